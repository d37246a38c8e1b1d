"""The team reward of MAGRPO's cooperative coding task ([`~trl_marl.envs.coding.CooperativeCodingEnv`]).

Rewards (each a TRL reward function reading the team's completions from `agent_completions`):

| term | value | class |
|---|---|---|
| `helper_defined` | 1 if the helper code parses and defines `aux` at top level, else 0 | [`HelperDefinedReward`] |
| `main_defined` | 1 if the main code parses and defines `entry_point` at top level, else 0 | [`MainDefinedReward`] |
| `syntax` | 1 if the combined program parses, else 0 | [`CombinedSyntaxReward`] |
| `tests` | passed / total unit tests of the combined program (0 if it does not parse) | [`PassRateReward`] |
| `helper_used` | 1 if `entry_point` calls `aux` and the helper's code adds passing tests | [`HelperUsedReward`] |
| `nontrivial` | 1 if a test passes and `entry_point` is not a mere `return aux(...)` | [`NonTrivialMainReward`] |
| `codebleu` | CodeBLEU of helper + main against the reference solution | [`CodeBLEUTermReward`] |

[`CodingTeamReward`] is their weighted sum, r = sum_k w_k * term_k (defaults in `DEFAULT_CODING_WEIGHTS`); its
[`~CodingTeamReward.reward_funcs`] gives the terms as separate reward functions, so that a trainer logs each.

The two cooperation terms are earned only by a team that passes tests, as in MAGRPO's coding reward (its authors'
`execution_reward_aux` grants the "main uses aux" and anti-wrapper bonuses only when at least one test passes): a
structural check alone is gamed, e.g. by a main that calls `aux` under `if False:` or on a branch no test reaches.
So `helper_used` is decided by running the program: the combined program must pass more tests than the main code
without the helper's code (the preamble and the main code alone, one more sandbox run, only for teams that pass a
test and refer to `aux`): the call runs and it matters. A pair that passes no test earns at most the structure and
syntax terms (1.0 of 4.0 with the default weights).
"""


from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..envs.coding import HELPER_AGENT, MAIN_AGENT, CooperativeCodingEnv
from ..envs.coding_analysis import CodingSolution
from ..sandbox.executor import ExecutionResultLike
from ..utils.code import parse_or_none, top_level_function

if TYPE_CHECKING:
    pass

DEFAULT_CODING_WEIGHTS: dict[str, float] = {
    "helper_defined": 0.25,
    "main_defined": 0.25,
    "syntax": 0.5,
    "tests": 2.0,
    "helper_used": 0.5,
    "nontrivial": 0.5,
    "codebleu": 0.0,
}
"""Default weights of [`CodingTeamReward`]: structure (0.25 + 0.25), syntax (0.5), tests (2.0), cooperation
(0.5 + 0.5); CodeBLEU off. The maximum team reward is 4.0."""


# ---------------------------------------------------------------------------------------------------- rewards
@dataclass
class CodingBatch:
    """The joint actions a reward function scores, assembled once and executed at most once."""

    env: CooperativeCodingEnv
    rows: list[dict[str, Any]]
    solutions: list[CodingSolution]
    _results: list[ExecutionResultLike | None] | None = field(default=None, repr=False)

    _helper_credit: list[bool] | None = field(default=None, repr=False)

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

    @property
    def helper_credit(self) -> list[bool]:
        """Per joint action, whether the helper's code made a difference: the main function refers to the helper
        (statically) and the combined program passes more tests than the main code alone (the prompt's preamble
        and the main code, run in one more sandbox batch for the joint actions that pass a test and refer to the
        helper). Computed on first access."""
        if self._helper_credit is None:
            todo = [i for i, s in enumerate(self.solutions) if s.helper_used and self.passes_some(i)]
            alone = [self.env.without_helper(self.rows[i], self.solutions[i]) for i in todo]
            ablated = self.env.execute([self.rows[i] for i in todo], alone) if todo else []
            credit = [False] * len(self.solutions)
            for i, result in zip(todo, ablated):
                with_helper = self.results[i]
                credit[i] = (with_helper is not None and not str(with_helper.reason).startswith("sandbox_error")
                             and (result is None or (not str(result.reason).startswith("sandbox_error")
                                                     and result.passed < with_helper.passed)))
            self._helper_credit = credit
        return self._helper_credit


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

    def scores(self, batch: CodingBatch) -> list[float]:
        """One score per joint action of `batch`."""
        raise NotImplementedError(f"{type(self).__name__} is a CodingRewardTerm: it must define scores(batch)")

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return self.scores(coding_batch(self.env, completions, kwargs, type(self).__name__))


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
    """1 if the helper's code makes the team pass more tests, else 0.

    That is: the main function refers to the helper (`aux(...)`, or `aux` passed as a value) and does not define or
    assign that name itself (static analysis), and the combined program passes more unit tests than the main code
    without the helper's code (one more sandbox run, see [`CodingBatch.helper_credit`]). A call that never runs
    (`if False: aux(x)`, a branch no test reaches) or whose result does not matter earns nothing; so does any call
    of a team that passes no test.
    """

    name = "helper_used"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(credit) for credit in batch.helper_credit]


class NonTrivialMainReward(CodingRewardTerm):
    """1 if the combined program passes at least one test and the main function does work of its own, else 0.

    Trivial (0): no `entry_point`, an empty body (docstring, `pass`, `...`, a lone `raise`), or a body that only
    forwards to the helper: `return aux(...)`, `aux(...)`, or `x = aux(...); return x` (see `envs.coding_analysis`).
    A main that solves the task without the helper is non-trivial; [`HelperUsedReward`] scores cooperation. As in
    MAGRPO's reward, a team that passes no test earns nothing here (the body's shape alone is easily gamed).
    """

    name = "nontrivial"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.main_error is None and not s.main_trivial and batch.passes_some(i))
                for i, s in enumerate(batch.solutions)]


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
        return self.scores(batch)

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
        + w_tests * passed/total + w_helper_used * [the helper's code adds passing tests]
        + w_nontrivial * [a test passes and main is not a trivial wrapper] + w_codebleu * CodeBLEU

    Terms with weight 0 are not computed (CodeBLEU is off by default). The programs run once per call, in one
    sandbox batch, through the environment's cached executor. After each call, `last_terms` maps each term's name
    to its scores (for logging).

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment (helper name, columns, executor); a default one
            if `None`.
        weights (`dict[str, float]`, *optional*): Weights by term name, merged into `DEFAULT_CODING_WEIGHTS`.
        codebleu (`CodeBLEUTermReward`, *optional*): The CodeBLEU term to use (e.g. with a custom scorer).
    """

    name = "coding_team"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    reward_isolation = "thread"

    def __init__(self, env: CooperativeCodingEnv | None = None, weights: Mapping[str, float] | None = None,
                 codebleu: CodeBLEUTermReward | None = None) -> None:
        self.env = env if env is not None else CooperativeCodingEnv()
        unknown = set(weights or {}) - set(DEFAULT_CODING_WEIGHTS)
        if unknown:
            raise ValueError(
                f"Unknown reward term(s) {sorted(unknown)}; the terms are {list(DEFAULT_CODING_WEIGHTS)}."
            )
        self.weights = {**DEFAULT_CODING_WEIGHTS, **(weights or {})}
        self.terms: dict[str, CodingRewardTerm] = {
            "helper_defined": HelperDefinedReward(self.env),
            "main_defined": MainDefinedReward(self.env),
            "syntax": CombinedSyntaxReward(self.env),
            "tests": PassRateReward(self.env),
            "helper_used": HelperUsedReward(self.env),
            "nontrivial": NonTrivialMainReward(self.env),
            "codebleu": codebleu if codebleu is not None else CodeBLEUTermReward(self.env),
        }
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
            values = term.scores(batch)
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
