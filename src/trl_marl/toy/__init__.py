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
* :func:`toy_debate_dataset`, :func:`toy_facts_dataset`, :func:`toy_writing_rows` and :func:`toy_coding_rows` are
  the toy world's datasets; ``TOY_WRITING_PROMPTS`` and ``TOY_CODING_PROMPTS`` the writing and coding tasks' prompt
  templates cut to the toy's 128 positions.
* Names: ``"toy"`` is always the target-number model (``"toy:target"``); ``"toy:addition"`` and ``"toy:debate"``
  (the model of ``trl-marl maporl``'s offline run, on :func:`toy_debate_dataset`) are the other tasks' models.
  `trl_marl.offline_models` registers them, next to the real model ``"smollm2-135m-instruct"``, as the offline model
  names that every API taking a model name accepts.

Modules: ``model`` (tokenizer and model), ``tasks`` (the synthetic tasks), ``pretrain`` (pretraining and accuracy),
``cache`` (cached models), ``names`` (the toy names and presets, no torch), ``rows``
(datasets). The real model lives in `trl_marl.offline_models`.
"""


from __future__ import annotations

from typing import TYPE_CHECKING

from ..utils.lazy import lazy_exports

# Imported on first use (PEP 562): the names (`toy.names`) need no torch, so the offline model names and the
# command line's checks read them without loading transformers; the models and tasks load when first used.
_SUBMODULES = ("cache", "model", "names", "pretrain", "rows", "tasks")
_PUBLIC = {
    "is_toy_name": ".names",
    **dict.fromkeys(("make_toy_model", "resolve_toy_name", "toy_cache_dir"), ".cache"),
    **dict.fromkeys(("TOY_CHARS", "TOY_CHAT_CHARS", "TOY_CHAT_SPECIAL_TOKENS", "TOY_CHAT_TEMPLATE",
                     "TOY_SPECIAL_TOKENS", "build_toy_chat_tokenizer", "build_toy_model", "build_toy_tokenizer"),
                    ".model"),
    **dict.fromkeys(("generate_toy_answers", "pretrain_toy_model", "toy_accuracy"), ".pretrain"),
    **dict.fromkeys(("TOY_CODING_PROMPTS", "TOY_WRITING_PROMPTS", "toy_coding_rows", "toy_debate_dataset",
                     "toy_facts_dataset", "toy_writing_rows"), ".rows"),
    **dict.fromkeys(("FACT_KEYS", "AdditionTask", "DebateAdditionTask", "SpecialistFactsTask", "TargetNumberTask",
                     "ToyTask", "fact_table", "specialty_of"), ".tasks"),
}


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, _SUBMODULES)


if TYPE_CHECKING:
    from .cache import make_toy_model, resolve_toy_name, toy_cache_dir
    from .model import (
        TOY_CHARS,
        TOY_CHAT_CHARS,
        TOY_CHAT_SPECIAL_TOKENS,
        TOY_CHAT_TEMPLATE,
        TOY_SPECIAL_TOKENS,
        build_toy_chat_tokenizer,
        build_toy_model,
        build_toy_tokenizer,
    )
    from .names import is_toy_name
    from .pretrain import generate_toy_answers, pretrain_toy_model, toy_accuracy
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
    "SpecialistFactsTask",
    "TOY_CHARS",
    "TOY_CHAT_CHARS",
    "TOY_CHAT_SPECIAL_TOKENS",
    "TOY_CHAT_TEMPLATE",
    "TOY_CODING_PROMPTS",
    "TOY_SPECIAL_TOKENS",
    "TOY_WRITING_PROMPTS",
    "TargetNumberTask",
    "ToyTask",
    "build_toy_chat_tokenizer",
    "build_toy_model",
    "build_toy_tokenizer",
    "fact_table",
    "generate_toy_answers",
    "is_toy_name",
    "make_toy_model",
    "pretrain_toy_model",
    "resolve_toy_name",
    "specialty_of",
    "toy_accuracy",
    "toy_cache_dir",
    "toy_coding_rows",
    "toy_debate_dataset",
    "toy_facts_dataset",
    "toy_writing_rows",
]
