"""The team reward of MAGRPO's cooperative coding task ([`~trl_marl.envs.coding.CooperativeCodingEnv`]).

Rewards (each a TRL reward function reading the team's completions from `agent_completions`):

| term | value | class |
|---|---|---|
| `helper_defined` | 1 if the helper code parses and defines `aux` at top level, else 0 | [`HelperDefinedReward`] |
| `main_defined` | 1 if the main code parses and defines `entry_point` at top level, else 0 | [`MainDefinedReward`] |
| `syntax` | 1 if the combined program parses, else 0 | [`CombinedSyntaxReward`] |
| `tests` | passed / total unit tests of the combined program (0 if it does not parse) | [`PassRateReward`] |
| `helper_used` | 1 if corrupting the helper's results makes the team fail tests | [`HelperUsedReward`] |
| `nontrivial` | 1 if `helper_used` and the main function is not a wrapper of the helper | [`NonTrivialMainReward`] |
| `ignored_call` | 1 if main refers to the helper, a test passes, its results do not matter | [`IgnoredCallReward`] |
| `codebleu` | CodeBLEU of helper + main against the reference solution | [`CodeBLEUTermReward`] |

[`CodingTeamReward`] is their weighted sum, r = sum_k w_k * term_k; its [`~CodingTeamReward.reward_funcs`] gives the
terms as separate reward functions, so that a trainer logs each. Two sets of weights ship (`CODING_REWARD_PRESETS`):

- `"trl_marl"` (the default, `DEFAULT_CODING_WEIGHTS`): structure 0.25 + 0.25, syntax 0.5, tests 2.0, helper used 0.5,
  non-trivial 0.5; maximum 4.0. A main that solves the task alone scores 3.0; one that calls a correct helper, 4.0.
- `"magrpo_authors"` (`MAGRPO_AUTHORS_CODING_WEIGHTS`): the weights and the gate of the MAGRPO authors' released
  reward (`execution_reward_aux`): aux defined 0.4, main defined 0.6, and only when main is defined: syntax 0.5,
  tests 1.0, helper used 0.5, non-trivial 1.0, ignored call -0.5; maximum 4.0. A main that solves the task alone
  scores 2.5.

**How the two presets differ**, term by term: tests weigh 2.0 here and 1.0 there; the structure terms 0.25 + 0.25
here, 0.4 + 0.6 there; the non-trivial bonus 0.5 here, 1.0 there; the default does not deduct for an ignored call
(weight 0); and the authors pay nothing after "main defined" when main is missing (here a program that parses without
the main function still earns the syntax term). Both nest the non-trivial bonus under helper use, as the authors do.
Where the authors decide helper use and an ignored result by reading the code, both presets here decide them by
running it (below).

**Cooperation is decided by running the program**, not by reading it: a static check ("does main call aux") is
gamed by a call whose result is discarded, a bare reference to `aux`, or a call under `if False:`. So:

- `helper_used`: the team passes a test, the main function refers to `aux`, and the same program with the helper's
  results corrupted passes fewer tests ([`~trl_marl.envs.coding.CooperativeCodingEnv.with_stub_helper`]: the helper
  runs, then a wrong value of its result's type is returned, on every call or on every other call). Leaving the
  helper out instead would credit a discarded call: the program then fails with a `NameError`.
- `nontrivial`: `helper_used`, the main's body is not a plain forward (`return aux(...)`), and a main that only
  returns `aux(*args)` passes fewer tests than the team's main
  ([`~trl_marl.envs.coding.CooperativeCodingEnv.with_wrapper_main`]), so that no rewrite of a wrapper
  (`return aux(x) + 0`) earns it.
- The team's program keeps only the helper agent's `aux` (and its imports and constants): a helper that also writes
  the main function cannot pass alone (`CooperativeCodingEnv(keep_helper_only=True)`, the default).

What is not guaranteed: a main that uses the helper's result only to check its own work (`assert aux(x) == x * x`)
earns `helper_used` while the helper is correct; a main that uses the results only through something a corrupted
helper keeps (an order, a length) may earn nothing for a helper it really uses. The extra sandbox runs (at most two
corrupted helpers and one wrapper per joint action) are made only for teams that pass a test and refer to the helper.
"""


from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..envs.coding import HELPER_AGENT, MAIN_AGENT, STUB_MODES, CooperativeCodingEnv
from ..envs.coding_analysis import CodingSolution, analyze_solution
from ..sandbox.executor import ExecutionResultLike
from ..utils.code import definitions_of, parse_or_none, prompt_preamble, top_level_function

if TYPE_CHECKING:
    pass

DEFAULT_CODING_WEIGHTS: dict[str, float] = {
    "helper_defined": 0.25,
    "main_defined": 0.25,
    "syntax": 0.5,
    "tests": 2.0,
    "helper_used": 0.5,
    "nontrivial": 0.5,
    "ignored_call": 0.0,
    "codebleu": 0.0,
}
"""Default weights of [`CodingTeamReward`] (the `"trl_marl"` preset): structure (0.25 + 0.25), syntax (0.5), tests
(2.0), cooperation (0.5 + 0.5); CodeBLEU off. The maximum team reward is 4.0."""

MAGRPO_AUTHORS_CODING_WEIGHTS: dict[str, float] = {
    "helper_defined": 0.4,
    "main_defined": 0.6,
    "syntax": 0.5,
    "tests": 1.0,
    "helper_used": 0.5,
    "nontrivial": 1.0,
    "ignored_call": -0.5,
    "codebleu": 0.0,
}
"""The weights of the MAGRPO authors' coding reward (`execution_reward_aux` in their released code; maximum 4.0),
used with its gate (`gate_on_main=True`): nothing after "main defined" counts when the main function is missing."""

CODING_REWARD_PRESETS: dict[str, tuple[dict[str, float], bool]] = {
    "trl_marl": (DEFAULT_CODING_WEIGHTS, False),
    "magrpo_authors": (MAGRPO_AUTHORS_CODING_WEIGHTS, True),
}
"""`CodingTeamReward(preset=...)`: name -> (weights, gate_on_main)."""

GATE_FREE_TERMS = ("helper_defined", "main_defined")
"""The terms that count whether or not the main function is defined, under `gate_on_main`."""


# ---------------------------------------------------------------------------------------------------- rewards
@dataclass
class CodingBatch:
    """The joint actions a reward function scores, assembled once and executed at most once."""

    env: CooperativeCodingEnv
    rows: list[dict[str, Any]]
    solutions: list[CodingSolution]
    _results: list[ExecutionResultLike | None] | None = field(default=None, repr=False)

    _helper_credit: list[bool] | None = field(default=None, repr=False)
    _wrapper_equivalent: list[bool] | None = field(default=None, repr=False)

    @property
    def results(self) -> list[ExecutionResultLike | None]:
        """Sandbox results (`None` where the program does not parse), computed on first access."""
        if self._results is None:
            self._results = self.env.execute(self.rows, self.solutions)
        return self._results

    def passes_some(self, index: int) -> bool:
        """Whether the combined program of joint action `index` passes at least one test."""
        result = self.results[index]
        return result is not None and result.total > 0 and result.passed > 0

    def refers_to_helper(self, index: int) -> bool:
        """Whether the team passes a test (without a sandbox error) and its main function refers to the helper: the
        static part of the cooperation checks, which decides whose program runs again."""
        result = self.results[index]
        return (self.solutions[index].helper_used and self.passes_some(index) and result is not None
                and not str(result.reason).startswith("sandbox_error"))

    def _fewer(self, indices: list[int], variants: list[CodingSolution]) -> list[bool]:
        """Per index, whether the variant program passes fewer tests than the team's (one sandbox batch; a variant
        that does not parse passes none; a sandbox error never counts as fewer)."""
        ran = self.env.execute([self.rows[i] for i in indices], variants) if indices else []
        out = []
        for i, result in zip(indices, ran):
            team = self.results[i]
            passed = team.passed if team is not None else 0
            out.append(result is None or (not str(result.reason).startswith("sandbox_error")
                                          and result.passed < passed))
        return out

    @property
    def helper_credit(self) -> list[bool]:
        """Per joint action, whether the main function depends on the helper's results: it refers to the helper, the
        team passes a test, and the program with the helper's results corrupted
        ([`~trl_marl.envs.coding.CooperativeCodingEnv.with_stub_helper`]: on every call, then, for the joint actions
        still undecided, on every other call) passes fewer tests. Computed on first access, one sandbox batch per
        stub mode."""
        if self._helper_credit is None:
            credit = [False] * len(self.solutions)
            todo = [i for i in range(len(self.solutions)) if self.refers_to_helper(i)]
            for mode in STUB_MODES:
                stubs = [self.env.with_stub_helper(self.rows[i], self.solutions[i], mode) for i in todo]
                for i, fewer in zip(todo, self._fewer(todo, stubs)):
                    credit[i] = fewer
                todo = [i for i in todo if not credit[i]]
            self._helper_credit = credit
        return self._helper_credit

    @property
    def wrapper_equivalent(self) -> list[bool]:
        """Per joint action with helper credit, whether a main that only returns `aux(*args)` passes as many tests
        as the team's main ([`~trl_marl.envs.coding.CooperativeCodingEnv.with_wrapper_main`]); `False` for the
        others. Computed on first access, in one sandbox batch."""
        if self._wrapper_equivalent is None:
            todo = [i for i, credit in enumerate(self.helper_credit) if credit]
            wrappers = [self.env.with_wrapper_main(self.rows[i], self.solutions[i]) for i in todo]
            equivalent = [False] * len(self.solutions)
            for i, fewer in zip(todo, self._fewer(todo, wrappers)):
                equivalent[i] = not fewer
            self._wrapper_equivalent = equivalent
        return self._wrapper_equivalent


def coding_batch(env: CooperativeCodingEnv, completions: Sequence[Any], kwargs: Mapping[str, Any],
                 caller: str = "coding reward") -> CodingBatch:
    """Assemble the joint actions of one reward call from its `agent_completions` and dataset columns.

    Args:
        env (`CooperativeCodingEnv`): The environment (helper name, columns, executor).
        completions (`list`): Agent 0's completions (TRL's `completions`; only its length is used).
        kwargs (`Mapping`): The reward call's keyword arguments.
        caller (`str`): Name used in error messages.

    Raises:
        ValueError: Without `agent_completions` for two agents.
        KeyError: When a dataset column the environment reads is missing (the message names it).
    """
    team = kwargs.get("agent_completions")
    if team is None or len(team) < 2:
        raise ValueError(
            f"{caller} scores a helper + main pair: it needs `agent_completions` with one list per agent (helper "
            "first, main second), as trl-marl trainers pass it; got "
            f"{'none' if team is None else f'{len(team)} list(s)'}."
        )
    size = len(team[HELPER_AGENT])
    if len(team[MAIN_AGENT]) != size or (completions is not None and len(completions) != size):
        raise ValueError(f"{caller}: the agents' completion lists have different lengths.")
    columns = (env.prompt_column, env.entry_point_column, env.test_column)
    missing = [c for c in columns if c not in kwargs]
    if missing:
        raise KeyError(
            f"{caller} needs the dataset column(s) {missing}; the reward call got only "
            f"{sorted(k for k in kwargs if k not in ('agent_completions', 'agent_prompts'))}."
        )
    rows = [{c: kwargs[c][i] for c in columns} for i in range(size)]
    solutions = [env.assemble(row, h, m) for row, h, m in zip(rows, team[HELPER_AGENT], team[MAIN_AGENT])]
    return CodingBatch(env, rows, solutions)


class CodingRewardTerm:
    """Base class of the coding reward terms: a TRL reward function scoring helper + main pairs.

    Called as `term(prompts, completions, agent_completions=[helpers, mains], prompt=[...], entry_point=[...],
    test=[...], **kwargs) -> list[float]`, one score per joint action. Subclasses implement `scores(batch)`.

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment whose helper name, columns and executor (with
            its cache) to use; a default one if `None`.
    """

    name = "coding_term"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    reward_isolation = "thread"
    """Runs in the trainer's process, not a forked worker: the model's programs already run in the sandbox with their
    own time limits, and the environment's executor cache (one sandbox run per program for every term and for the
    feedback) lives here."""

    def __init__(self, env: CooperativeCodingEnv | None = None) -> None:
        self.env = env if env is not None else CooperativeCodingEnv()
        self.__name__ = self.name

    gate_on_main = False
    """Multiply the scores by [main defined] (the MAGRPO authors' gate; set by [`CodingTeamReward`])."""

    def scores(self, batch: CodingBatch) -> list[float]:
        """One score per joint action of `batch`."""
        raise NotImplementedError(f"{type(self).__name__} is a CodingRewardTerm: it must define scores(batch)")

    def gated_scores(self, batch: CodingBatch) -> list[float]:
        """`scores(batch)`, zeroed where the main function is missing when `gate_on_main` is set."""
        values = self.scores(batch)
        if not self.gate_on_main:
            return values
        return [v if s.main_error is None and s.main_defined else 0.0 for v, s in zip(values, batch.solutions)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return self.gated_scores(coding_batch(self.env, completions, kwargs, type(self).__name__))


class HelperDefinedReward(CodingRewardTerm):
    """1 if the helper agent's code parses and defines the helper function (`aux`) at top level, else 0."""

    name = "helper_defined"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.helper_error is None and s.helper_defined) for s in batch.solutions]


class MainDefinedReward(CodingRewardTerm):
    """1 if the main agent's code parses and defines the row's `entry_point` at top level, else 0."""

    name = "main_defined"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.main_error is None and s.main_defined) for s in batch.solutions]


class CombinedSyntaxReward(CodingRewardTerm):
    """1 if the combined program (prompt preamble + helper + main) parses, else 0."""

    name = "syntax"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.parses) for s in batch.solutions]


class PassRateReward(CodingRewardTerm):
    """Fraction of the unit tests the combined program passes in the sandbox (0 if it does not parse or no test
    ran)."""

    name = "tests"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [0.0 if r is None or r.total <= 0 else float(r.fraction) for r in batch.results]


class HelperUsedReward(CodingRewardTerm):
    """1 if the main function depends on the helper's results, else 0.

    That is: the main function refers to the helper (`aux(...)`, or `aux` passed as a value) and does not define or
    assign that name itself (static analysis), the team passes a test, and the same program with the helper's results
    corrupted passes fewer tests (see [`CodingBatch.helper_credit`]). A call that never runs (`if False: aux(x)`, a
    branch no test reaches), a call whose result is discarded, or a bare mention of `aux` earns nothing; so does any
    call of a team that passes no test.
    """

    name = "helper_used"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(credit) for credit in batch.helper_credit]


class NonTrivialMainReward(CodingRewardTerm):
    """1 if the main function uses the helper ([`HelperUsedReward`]) and does work of its own, else 0.

    Trivial (0): no `entry_point`, an empty body (docstring, `pass`, `...`, a lone `raise`), a body that only
    forwards to the helper (`return aux(...)`, `aux(...)`, `x = aux(...); return x`; see `envs.coding_analysis`), or
    any main that passes no more tests than `return aux(*args)` does on the same tests
    ([`CodingBatch.wrapper_equivalent`]), whatever its text (`return aux(x) + 0`). As in MAGRPO's reward, the bonus is
    nested under helper use: a main that solves the task without the helper earns nothing here.
    """

    name = "nontrivial"

    def scores(self, batch: CodingBatch) -> list[float]:
        credit, wrapper = batch.helper_credit, batch.wrapper_equivalent
        return [float(credit[i] and s.main_error is None and not s.main_trivial and not wrapper[i])
                for i, s in enumerate(batch.solutions)]


class IgnoredCallReward(CodingRewardTerm):
    """1 if the main function refers to the helper and the team passes a test, but the helper's results do not
    matter (corrupting them fails no test: [`CodingBatch.helper_credit`] is 0), else 0.

    The MAGRPO authors deduct 0.5 for a helper called with its result ignored (`MAGRPO_AUTHORS_CODING_WEIGHTS`); they
    read it from the code, this term decides it by running the program.
    """

    name = "ignored_call"

    def scores(self, batch: CodingBatch) -> list[float]:
        credit = batch.helper_credit
        return [float(batch.refers_to_helper(i) and not credit[i]) for i in range(len(batch.solutions))]


def reference_code(row: Mapping[str, Any], env: CooperativeCodingEnv, reference_column: str) -> str:
    """The full reference program of a row: `canonical_solution` itself if it defines `entry_point` (MBPP's `code`
    as mapped by `load_mbpp`), else `prompt + canonical_solution` (HumanEval's solution is the body only)."""
    reference = row[reference_column]
    if not isinstance(reference, str):
        raise ValueError(f"The column {reference_column!r} must hold strings, got {type(reference).__name__}.")
    entry_point = env.entry_point(row)
    if top_level_function(parse_or_none(textwrap.dedent(reference)), entry_point) is not None:
        return reference
    return env._value(row, env.prompt_column) + reference


class CodeBLEUTermReward(CodingRewardTerm):
    """CodeBLEU of the team's code (helper code + main code) against the row's reference solution.

    The reference is `prompt + canonical_solution` for HumanEval, or `canonical_solution` when it is a whole
    function (see [`reference_code`]). Scored with `trl_marl.rewards.codebleu.CodeBLEUReward` (imported on first
    use; needs the `rewards` extra).

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment.
        reference_column (`str`): Column of the reference solution.
        scorer (`Callable`, *optional*): A TRL reward function `scorer(prompts, completions, **kwargs)` reading the
            references from the keyword `reference_column`; `CodeBLEUReward(reference_column=...)` if `None`.
    """

    name = "codebleu"

    def __init__(self, env: CooperativeCodingEnv | None = None, reference_column: str = "canonical_solution",
                 scorer: Callable[..., Sequence[float | None]] | None = None) -> None:
        super().__init__(env)
        self.reference_column = reference_column
        self._scorer = scorer

    @property
    def scorer(self) -> Callable[..., Sequence[float | None]]:
        """The CodeBLEU scorer (built on first use)."""
        if self._scorer is None:
            from ..rewards.codebleu import CodeBLEUReward

            self._scorer = CodeBLEUReward(reference_column=self.reference_column)
        return self._scorer

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        if self.reference_column not in kwargs:
            raise KeyError(f"{type(self).__name__} needs the dataset column {self.reference_column!r}.")
        batch = coding_batch(self.env, completions, kwargs, type(self).__name__)
        for row, reference in zip(batch.rows, kwargs[self.reference_column]):
            row[self.reference_column] = reference
        return self.gated_scores(batch)

    def scores(self, batch: CodingBatch) -> list[float]:
        if any(self.reference_column not in row for row in batch.rows):
            raise KeyError(f"{type(self).__name__} needs the dataset column {self.reference_column!r}.")
        references = [reference_code(row, self.env, self.reference_column) for row in batch.rows]
        candidates = ["\n\n\n".join(p for p in (s.helper_code, s.main_code) if p.strip()) for s in batch.solutions]
        values = self.scorer(prompts=[""] * len(candidates), completions=candidates,
                             **{self.reference_column: references})
        return [0.0 if v is None else float(v) for v in values]


class CodingTeamReward:
    """The team reward of [`CooperativeCodingEnv`]: a weighted sum of the coding reward terms.

    Like its terms, it runs in the trainer's process (`reward_isolation = "thread"`): the programs run in the sandbox,
    the executor's cache is shared with the environment, and `last_terms` is read after the call.

    r = w_helper_defined * [helper defined] + w_main_defined * [main defined] + w_syntax * [program parses]
        + w_tests * passed/total + w_helper_used * [the main depends on the helper's results]
        + w_nontrivial * [helper used and main is no wrapper of it] + w_ignored_call * [the helper's results are
        ignored] + w_codebleu * CodeBLEU

    and with `gate_on_main` every term after `main_defined` is multiplied by [main defined] (the MAGRPO authors'
    gate). Terms with weight 0 are not computed (CodeBLEU and the ignored call are off by default). The programs run
    once per call, in one sandbox batch, through the environment's cached executor (plus the cooperation checks' runs,
    see the module docstring). After each call, `last_terms` maps each term's name to its scores (for logging).

    Example:

    ```python
    from trl_marl.envs import CooperativeCodingEnv
    from trl_marl.rewards.coding import CodingTeamReward

    env = CooperativeCodingEnv(chat=True, code_prefill="```python\n")
    reward = CodingTeamReward(env)                             # trl-marl's weights (maximum 4.0)
    authors = CodingTeamReward(env, preset="magrpo_authors")   # the MAGRPO authors' weights and gate
    ```

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment (helper name, columns, executor); a default one
            if `None`.
        weights (`dict[str, float]`, *optional*): Weights by term name, merged into the preset's.
        codebleu (`CodeBLEUTermReward`, *optional*): The CodeBLEU term to use (e.g. with a custom scorer).
        preset (`str`): `"trl_marl"` (`DEFAULT_CODING_WEIGHTS`, no gate) or `"magrpo_authors"`
            (`MAGRPO_AUTHORS_CODING_WEIGHTS`, gated on the main function), see `CODING_REWARD_PRESETS`.
        gate_on_main (`bool`, *optional*): Override the preset's gate.
    """

    name = "coding_team"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    reward_isolation = "thread"

    def __init__(self, env: CooperativeCodingEnv | None = None, weights: Mapping[str, float] | None = None,
                 codebleu: CodeBLEUTermReward | None = None, preset: str = "trl_marl",
                 gate_on_main: bool | None = None) -> None:
        self.env = env if env is not None else CooperativeCodingEnv()
        if preset not in CODING_REWARD_PRESETS:
            raise ValueError(
                f"Unknown coding reward preset {preset!r}; the presets are {list(CODING_REWARD_PRESETS)}."
            )
        preset_weights, preset_gate = CODING_REWARD_PRESETS[preset]
        unknown = set(weights or {}) - set(preset_weights)
        if unknown:
            raise ValueError(
                f"Unknown reward term(s) {sorted(unknown)}; the terms are {list(preset_weights)}."
            )
        self.preset = preset
        self.weights = {**preset_weights, **(weights or {})}
        self.gate_on_main = preset_gate if gate_on_main is None else bool(gate_on_main)
        self.terms: dict[str, CodingRewardTerm] = {
            "helper_defined": HelperDefinedReward(self.env),
            "main_defined": MainDefinedReward(self.env),
            "syntax": CombinedSyntaxReward(self.env),
            "tests": PassRateReward(self.env),
            "helper_used": HelperUsedReward(self.env),
            "nontrivial": NonTrivialMainReward(self.env),
            "ignored_call": IgnoredCallReward(self.env),
            "codebleu": codebleu if codebleu is not None else CodeBLEUTermReward(self.env),
        }
        for name, term in self.terms.items():
            term.gate_on_main = self.gate_on_main and name not in GATE_FREE_TERMS
        self.last_terms: dict[str, list[float]] = {}
        self.__name__ = self.name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        batch = coding_batch(self.env, completions, kwargs, type(self).__name__)
        total = [0.0] * len(batch.solutions)
        self.last_terms = {}
        for name, term in self.terms.items():
            weight = self.weights[name]
            if weight == 0:
                continue
            if isinstance(term, CodeBLEUTermReward):
                if term.reference_column not in kwargs:
                    raise KeyError(f"The CodeBLEU term needs the dataset column {term.reference_column!r}.")
                for row, reference in zip(batch.rows, kwargs[term.reference_column]):
                    row[term.reference_column] = reference
            values = term.gated_scores(batch)
            self.last_terms[name] = values
            total = [t + weight * v for t, v in zip(total, values)]
        return total

    def reward_funcs(self) -> list[CodingRewardTerm]:
        """The terms with a non-zero weight, as separate reward functions (pass with `reward_weights()` to a trainer
        to log each term; the executor's cache keeps the programs from running more than once)."""
        return [term for name, term in self.terms.items() if self.weights[name] != 0]

    def reward_weights(self) -> list[float]:
        """The weights matching [`~CodingTeamReward.reward_funcs`]."""
        return [self.weights[name] for name in self.terms if self.weights[name] != 0]


class DivisionChoiceRate:
    """A cooperation metric of [`~trl_marl.envs.coding_division.DivisionCodingEnv`] with the reward signature: 1 per
    joint action where agent `agent_index` wrote `choice` first (`"helper"` or `"main"`), else 0; with `choice=None`
    and `agent_index=None`, 1 where both agents wrote the same function (a collision: the program lacks the other).

    Example:

    ```python
    metrics = {"agent_0_helper": DivisionChoiceRate(env, 0, "helper"), "collision": DivisionChoiceRate(env)}
    ```
    """

    reward_kind = "team"
    reward_isolation = "thread"

    def __init__(self, env: Any, agent_index: int | None = None, choice: str | None = None) -> None:
        if (agent_index is None) != (choice is None):
            raise ValueError("Pass both `agent_index` and `choice` (an agent's choice rate), or neither (collisions).")
        if choice is not None and choice not in ("helper", "main"):
            raise ValueError(f"`choice` must be 'helper' or 'main', got {choice!r}.")
        self.env, self.agent_index, self.choice = env, agent_index, choice
        self.__name__ = "collision" if choice is None else f"agent_{agent_index}_{choice}"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        batch = coding_batch(self.env, completions, kwargs, self.__name__)
        team = kwargs["agent_completions"]
        out = []
        for i, row in enumerate(batch.rows):
            choices = [self.env.choice(row, team[a][i]) for a in range(2)]
            if self.choice is None or self.agent_index is None:  # (both or neither are set)
                out.append(float(choices[0] is not None and choices[0] == choices[1]))
            else:
                out.append(float(choices[self.agent_index] == self.choice))
        return out


class ReferencePartnerPass:
    """A cooperation metric with the reward signature: 1 per joint action where agent `agent_index`'s code, paired
    with the reference code of its partner (the row's `canonical_solution`: reference helper, then reference main),
    passes every test, else 0. It separates the two agents' skills: how often the helper implements what it was
    asked, whatever its partner wrote, and how often the main function is right given a right helper.

    Example:

    ```python
    metrics = {"helper_right": ReferencePartnerPass(env, 0), "main_right": ReferencePartnerPass(env, 1)}
    ```
    """

    reward_kind = "team"
    reward_isolation = "thread"

    def __init__(self, env: CooperativeCodingEnv, agent_index: int,
                 reference_column: str = "canonical_solution") -> None:
        if agent_index not in (HELPER_AGENT, MAIN_AGENT):
            raise ValueError(f"`agent_index` must be {HELPER_AGENT} (helper) or {MAIN_AGENT} (main), "
                             f"got {agent_index}.")
        self.env, self.agent_index, self.reference_column = env, agent_index, reference_column
        self.__name__ = f"{'helper' if agent_index == HELPER_AGENT else 'main'}_with_reference_partner"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        if self.reference_column not in kwargs:
            raise KeyError(f"{self.__name__} needs the dataset column {self.reference_column!r}.")
        batch = coding_batch(self.env, completions, kwargs, self.__name__)
        variants = []
        for row, solution, reference in zip(batch.rows, batch.solutions, kwargs[self.reference_column]):
            entry_point, name = solution.entry_point, self.env.helper_name  # the reference code's helper name
            helper = definitions_of(reference, {name})
            main = definitions_of(reference, {entry_point})
            if self.agent_index == HELPER_AGENT:  # the reference main calls `name`: alias the helper's own choice
                helper = solution.helper_code
                if solution.helper_defined and solution.helper_name != name:
                    helper += f"\n\n{name} = {solution.helper_name}\n"
            else:  # the reference helper answers to every name the helper may choose
                main = solution.main_code
                helper += "".join(f"\n\n{other} = {name}\n" for other in self.env.helper_names if other != name)
            variants.append(analyze_solution(helper, main, entry_point, solution.helper_name,
                                             prompt_preamble(row[self.env.prompt_column], entry_point)))
        results = self.env.execute(batch.rows, variants)
        return [float(r is not None and r.total > 0 and r.passed == r.total) for r in results]
