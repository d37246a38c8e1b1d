"""CodeBLEU against a reference-code column, as a TRL reward function.

MAGRPO (arXiv 2508.04652) reports its coding results in CodeBLEU. The score is computed by the `codebleu` package
(`codebleu.calc_codebleu`), one completion against one row's reference at a time (a per-sample score, not the
corpus-level score of a whole batch).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..utils.columns import AgentSelector, column, is_missing, select_texts

_INSTALL_HINT = (
    'install trl-marl\'s `rewards` extra, `pip install "trl-marl[rewards]"` (from a clone: `pip install -e '
    '".[rewards]"`), which pins `codebleu>=0.7` together '
    "with `tree-sitter-python~=0.21.0` (codebleu 0.7 fails with tree-sitter-python 0.23+: \"an integer is "
    'required"), or `pip install codebleu "tree-sitter-python~=0.21.0"`'
)

# A fenced block: an opening line of three or more backticks (or tildes) with an optional info string, the code,
# and a closing fence of the same characters. A completion cut off by the length limit may lack the closing fence.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)


def strip_code_fences(text: str) -> str:
    """The code inside the markdown code fences of `text`.

    Every fenced block (```` ```python ... ``` ````, ```` ``` ... ``` ```` or `~~~`) is kept, in order, joined with
    a newline; prose outside the fences is dropped. An opening fence without a closing one (a completion cut off by
    the length limit) keeps everything after it. Text without any fence is returned unchanged.

    Args:
        text (`str`): A model's completion.

    Returns:
        `str`: The code.
    """
    blocks = [match.group(2) for match in _FENCE.finditer(text)]
    if not blocks:
        return text
    return "\n".join(block.rstrip("\n") for block in blocks)


def _load_codebleu(lang: str) -> Any:
    """`codebleu.calc_codebleu`, after checking that the package and the tree-sitter grammar of `lang` load."""
    try:
        from codebleu import calc_codebleu
        from codebleu.utils import AVAILABLE_LANGS, get_tree_sitter_language
    except ImportError as exc:
        raise ImportError(f"CodeBLEUReward needs the `codebleu` package: {_INSTALL_HINT}.") from exc
    if lang not in AVAILABLE_LANGS:
        raise ValueError(f"CodeBLEUReward: `lang` must be one of {list(AVAILABLE_LANGS)}, got {lang!r}.")
    try:
        get_tree_sitter_language(lang)
    except (ImportError, TypeError, ValueError) as exc:
        raise ImportError(
            f"CodeBLEUReward could not load the tree-sitter grammar of {lang!r} ({type(exc).__name__}: {exc}); "
            f"{_INSTALL_HINT}."
        ) from exc
    return calc_codebleu


class CodeBLEUReward:
    """CodeBLEU of a code completion against the row's reference code.

    CodeBLEU (Ren et al. 2020) mixes four similarities of candidate and reference, with weights
    `(alpha, beta, gamma, theta)` (default 0.25 each):

        CodeBLEU = alpha * BLEU + beta * weighted BLEU (language keywords count 5x) + gamma * AST subtree match
                   + theta * data-flow match

    computed by `codebleu.calc_codebleu([reference], [candidate], lang, weights)["codebleu"]`; a list of references
    in the cell is passed as multiple references. Markdown code fences are stripped from the completion first
    ([`strip_code_fences`]). Rows whose reference is `None` (or NaN) get `None`.

    A quirk of `codebleu` 0.7 to know when reading rewards: it replaces a data-flow match of 0 by 1
    (`theta * (dataflow_match_score or 1)`), so a candidate that shares no data flow with the reference (or code
    with no data flow at all) gets `theta` for free. An empty candidate would therefore score `theta` = 0.25;
    `empty_score` (default 0.0) is returned instead for completions that are empty after fence stripping, so that a
    policy cannot collect reward by saying nothing. Every other score is `codebleu`'s own value.

    Args:
        reference_column (`str`): The dataset column holding the reference code (or a list of references).
        lang (`str`): The programming language (one of `codebleu.utils.AVAILABLE_LANGS`, e.g. `"python"`).
        weights (`tuple[float, float, float, float]`): `(alpha, beta, gamma, theta)` above.
        agent_index (`int`, `"concat"` or `None`): Which text is scored: `None` the `completions` argument, an int
            `i` agent `i`'s completion, `"concat"` all agents' code of the joint action joined with `separator`
            (e.g. MAGRPO's helper function + main function).
        strip_fences (`bool`): Keep only the code inside markdown fences of each completion.
        empty_score (`float` or `None`): The score of an empty (or whitespace-only) candidate; `None` uses
            `codebleu`'s own value.
        separator (`str`): Separator between the agents' code with `agent_index="concat"`.

    Raises:
        ImportError: `codebleu` (or its tree-sitter grammar) is missing or incompatible: install the `rewards` extra.
    """

    def __init__(
        self,
        reference_column: str = "reference",
        lang: str = "python",
        weights: Sequence[float] = (0.25, 0.25, 0.25, 0.25),
        agent_index: AgentSelector = None,
        strip_fences: bool = True,
        empty_score: float | None = 0.0,
        separator: str = "\n\n",
    ) -> None:
        weights = tuple(float(w) for w in weights)
        if len(weights) != 4:
            raise ValueError(
                f"CodeBLEUReward: `weights` must hold 4 numbers (n-gram, weighted n-gram, syntax, data flow), got "
                f"{len(weights)}."
            )
        if agent_index is not None and agent_index != "concat" and not isinstance(agent_index, int):
            raise ValueError(f"`agent_index` must be None, an int or 'concat', got {agent_index!r}.")
        self._calc_codebleu = _load_codebleu(lang)
        self.name = "codebleu"
        self.reference_column = reference_column
        self.lang = lang
        self.weights: tuple[float, float, float, float] = weights  # type: ignore[assignment]
        self.agent_index = agent_index
        self.strip_fences = strip_fences
        self.empty_score = empty_score
        self.separator = separator

    def score(self, prediction: str, reference: str | Sequence[str]) -> float:
        """CodeBLEU of the code `prediction` (fences already stripped) against one reference or a list of them."""
        if self.empty_score is not None and not prediction.strip():
            return float(self.empty_score)
        references = [reference] if isinstance(reference, str) else [str(r) for r in reference if not is_missing(r)]
        if not references:
            return 0.0
        result = self._calc_codebleu([references], [prediction], lang=self.lang, weights=self.weights)
        return float(result["codebleu"])

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion against its row's reference code.

        Args:
            prompts (`Sequence`): The prompts (unused).
            completions (`Sequence`): The completions (strings or chat messages).
            **kwargs: The dataset columns (`reference_column` among them) and trl-marl's multi-agent arguments.

        Returns:
            `list[float | None]`: CodeBLEU per completion, `None` where the reference is missing.
        """
        codes = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, self.separator,
                             type(self).__name__, transform=strip_code_fences if self.strip_fences else None)
        references = column(kwargs, self.reference_column, type(self).__name__, len(codes))
        return [None if is_missing(ref) else self.score(code, ref if isinstance(ref, (list, tuple)) else str(ref))
                for code, ref in zip(codes, references)]
