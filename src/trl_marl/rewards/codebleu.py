"""CodeBLEU against a reference-code column, as a TRL reward function.

MAGRPO (arXiv 2508.04652) reports its coding results in CodeBLEU. The score is computed by the `codebleu` package
(`codebleu.calc_codebleu`), one completion against one row's reference at a time (a per-sample score, not the
corpus-level score of a whole batch).

`codebleu`'s syntax match writes out every subtree of both programs, so its time grows with the length of the code
times the depth of its syntax tree: `"x = a+a+..."` took 2.4 s at 2 KB, 235 s at 20 KB, and crashed the interpreter
at 50 KB (issue 54). [`CodeBLEUReward`] therefore scores at most [`DEFAULT_MAX_CODE_CHARS`] characters of each text
and gives a candidate nested deeper than [`DEFAULT_MAX_SYNTAX_DEPTH`] levels 0 without calling `codebleu`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..utils.columns import AgentSelector, column, is_missing, select_texts
from ..utils.text import encodable

DEFAULT_MAX_CODE_CHARS = 8_000
"""The most characters of a candidate or reference [`CodeBLEUReward`] scores by default (longer ones are cut)."""

DEFAULT_MAX_SYNTAX_DEPTH = 100
"""The deepest syntax tree (tree-sitter levels) of a candidate [`CodeBLEUReward`] scores by default; a deeper one
scores 0. Real code stays far below: HumanEval's prompts with their solutions are at most 21 levels deep, a function
with six nested loops and a comprehension inside them 26."""

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


def syntax_depth(parser: Any, code: str, stop_after: int | None = None) -> int:
    """The depth of the syntax tree of `code` (the root alone is 0), walked without recursion.

    Args:
        parser (`tree_sitter.Parser`): A parser with its language set.
        code (`str`): The code (it must encode to UTF-8).
        stop_after (`int`, *optional*): Stop walking once the depth passes this value (it is then returned).

    Returns:
        `int`: The depth, or a value above `stop_after` as soon as one is found.
    """
    cursor = parser.parse(code.encode("utf-8")).walk()
    depth = deepest = 0
    while True:
        if cursor.goto_first_child():
            depth += 1
            deepest = max(deepest, depth)
            if stop_after is not None and deepest > stop_after:
                return deepest
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return deepest
            depth -= 1


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

    Bounded cost, whatever the policy writes: `codebleu`'s time grows with the length of the code times the depth of
    its syntax tree (module docstring). The candidate and each reference are cut to their first `max_chars`
    characters, and a candidate whose syntax tree (tree-sitter, the parser `codebleu` uses) is nested deeper than
    `max_syntax_depth` levels scores 0.0 without being scored (`"x = ------...a"` or `"x = a+a+...+a"`, in which each
    operator is one more level). With the defaults (8,000 characters, 100 levels) one score of any candidate takes
    about a second at most (1.0 s for the worst shapes found, e.g. 8 KB of lines each 95 operators deep, against a
    short reference, on a busy CPU core; a reference as deep doubles it); unlimited, 20 KB of `"x = a+a+..."` took
    235 s and 50 KB crashed the interpreter. Lone surrogates (which no parser can encode) are replaced by U+FFFD
    first.

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
        max_chars (`int` or `None`): The most characters of a candidate or reference scored (the rest is cut);
            `None` for no limit, at the cost above.
        max_syntax_depth (`int` or `None`): The deepest syntax tree of a candidate that is scored; a deeper one
            scores 0.0. `None` for no limit, at the cost above.

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
        max_chars: int | None = DEFAULT_MAX_CODE_CHARS,
        max_syntax_depth: int | None = DEFAULT_MAX_SYNTAX_DEPTH,
    ) -> None:
        weights = tuple(float(w) for w in weights)
        if len(weights) != 4:
            raise ValueError(
                f"CodeBLEUReward: `weights` must hold 4 numbers (n-gram, weighted n-gram, syntax, data flow), got "
                f"{len(weights)}."
            )
        if agent_index is not None and agent_index != "concat" and not isinstance(agent_index, int):
            raise ValueError(f"`agent_index` must be None, an int or 'concat', got {agent_index!r}.")
        for label, limit in (("max_chars", max_chars), ("max_syntax_depth", max_syntax_depth)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"CodeBLEUReward: `{label}` must be a positive int or None, got {limit!r}.")
        self._calc_codebleu = _load_codebleu(lang)
        self.name = "codebleu"
        self.reference_column = reference_column
        self.lang = lang
        self.weights: tuple[float, float, float, float] = weights
        self.agent_index = agent_index
        self.strip_fences = strip_fences
        self.empty_score = empty_score
        self.separator = separator
        self.max_chars = max_chars
        self.max_syntax_depth = max_syntax_depth

    def _bounded(self, text: str) -> str:
        """`text` cut to `max_chars` characters, its lone surrogates replaced."""
        return encodable(text if self.max_chars is None else text[: self.max_chars])

    def _too_deep(self, code: str) -> bool:
        if self.max_syntax_depth is None:
            return False
        from codebleu.utils import get_tree_sitter_language
        from tree_sitter import Parser

        parser = Parser(get_tree_sitter_language(self.lang))  # one per call: a parser is not shared across threads
        return syntax_depth(parser, code, stop_after=self.max_syntax_depth) > self.max_syntax_depth

    def score(self, prediction: str, reference: str | Sequence[str]) -> float:
        """CodeBLEU of the code `prediction` (fences already stripped) against one reference or a list of them, each
        cut to `max_chars` characters; 0.0 for a candidate deeper than `max_syntax_depth` (class docstring)."""
        if self.empty_score is not None and not prediction.strip():
            return float(self.empty_score)
        prediction = self._bounded(prediction)
        references = [reference] if isinstance(reference, str) else [str(r) for r in reference if not is_missing(r)]
        references = [self._bounded(r) for r in references]
        if not references or self._too_deep(prediction):
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
