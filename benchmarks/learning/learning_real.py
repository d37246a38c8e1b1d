"""Learning benchmark on the real offline model "smollm2-135m-instruct" (issue 24, deliverable 3).

Two entry points, each run over several seeds, every number measured on held-out data that no arm trains on, with
the untrained team as the baseline and every value taken at the END of training (never the best step):

- `magrpo`: a cooperative task, by default the division of labour of `trl_marl.envs.ChatSplitItemsEnv` (`--task
  split`): both agents see the same two numbers and each says one (assistant prefill "My number is"); the team
  reward (`SplitItemsReward`) is the share of the two numbers said, so the team wins only when the agents say
  different ones. The two-digit numbers are split once into 72 training and 18 held-out numbers
  (`trl_marl.scripts.demo_real.number_split`): training lists use only the former, the held-out evaluation lists
  only the latter, so winning there needs a convention over positions, not over numbers. Success (team reward 1) is
  sampled at T=1, 8 joint actions per list. `--task target_sum` is the target-sum game of the earlier pilots (train
  targets 4..16 without the held-out {5, 9, 13}).
  Arms at the same number of optimizer steps:
  `team` (MAGRPO, both agents trained on the team reward), `alone` (each agent trained with its partner frozen at
  the pretrained policy via `frozen_agents`, then the two trained agents paired, as `trl-marl demo` does) and
  `central` (one policy writes both numbers in `<agent_0>..</agent_0><agent_1>..</agent_1>` sections through
  `CentralizedEnv`, `num_agents=1`, with the opening tag prefilled). The untrained team and the untrained central
  policy are measured before training.
- `maporl`: a 2-agent, 2-turn debate (`DebateEnv`, chat prompts) with an answer verifier (multi-agent PPO, LoRA
  adapters). `--debate-task addition` (default): generated 1-digit additions "a + b" that each agent can answer
  alone; the held-out questions are unordered pairs {a, b} that never occur in training (either order).
  `--debate-task hidden_sum`: "What is a + b?" where agent 1 knows only a and agent 2 only b (`DebateEnv`'s
  `private_columns`; `trl_marl.data.hidden_debate`, one fixed split by unordered pair), so the last turn needs the
  other agent's first answer. `--reward influence` (default): MAPoRL's influence-aware reward with collaboration
  incentives; `--reward verifier`: the plain verifier score per answer and turn (MAPoRL's ablation). Before and after
  training, on held-out questions: majority and agent accuracy per turn, wrong->right and right->wrong rates per turn
  change. `--arms alone` (default `team`): MAPoRL's agents trained alone, each with its partner frozen
  (`frozen_agents`), then paired and evaluated as the team is.

The recipes (LoRA placement, trainers, evaluation, data splits) are `trl_marl.scripts.demo_real`'s, which
`trl-marl demo --real` runs once. Results (per seed, plus mean and spread over seeds) go to a JSON file under
benchmarks/results with the command, the machine and the git commit read when the run starts; a tree with
uncommitted changes (outside benchmarks/results) is refused unless `--allow-dirty` is given, and then the record says
`"dirty": true` and lists the changed paths (`benchmarks/provenance.py`). `--smoke` runs 1 step with tiny evaluation
sets to check the wiring (not a measurement).

    python benchmarks/learning/learning_real.py magrpo --seeds 0 1 2 3 4 --steps 30
    python benchmarks/learning/learning_real.py maporl --seeds 0 1 2 3 4 --steps 10
    python benchmarks/learning/learning_real.py maporl --debate-task hidden_sum --reward verifier --seeds 0 --steps 10
    python benchmarks/learning/learning_real.py maporl --debate-task hidden_sum --arms alone --seeds 0 --steps 10
    python benchmarks/learning/learning_real.py maporl --debate-task hidden_sum --value-adapter --seeds 0 --steps 10
    python benchmarks/learning/learning_real.py magrpo --seeds 0 --smoke
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.provenance`
from benchmarks.provenance import git_state, machine_info, require_clean  # noqa: E402

MODEL = "smollm2-135m-instruct"
HELDOUT_TARGETS = (5, 9, 13)
TARGET_RANGE = (4, 16)
INVALID_PENALTY = 0.5
ARMS = ("team", "alone", "central")
HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------------------------------------------ data
def target_split(low: int = TARGET_RANGE[0], high: int = TARGET_RANGE[1],
                 heldout: Sequence[int] = HELDOUT_TARGETS) -> tuple[list[int], list[int]]:
    """Train and held-out targets of the target-sum game: `low..high` without `heldout`, and `heldout`."""
    bad = [t for t in heldout if not low <= t <= high]
    if bad:
        raise ValueError(f"held-out targets {bad} are outside {low}..{high}.")
    return [t for t in range(low, high + 1) if t not in heldout], sorted(heldout)


# ------------------------------------------------------------------------------------------------------ tasks
@dataclass(frozen=True)
class Task:
    """A MAGRPO task of this benchmark: its env and team reward, and its train / held-out rows.

    `eval_rows(split, count)` gives the evaluation rows (`split` "heldout" or "train"); each is sampled 8 times.
    A joint action succeeds when its team reward is 1."""

    name: str
    env: Callable[[bool], Any]
    reward: Callable[[Any], Any]
    train_rows: Callable[[int, int], list[dict[str, Any]]]
    eval_rows: Callable[[str, int], list[dict[str, Any]]]
    success: Callable[[Any], Any] | None = None
    """Scores a joint action 1 when it succeeds (default: the team reward itself, success when it is 1)."""
    sizes: dict[str, Any] | None = None
    """Sizes that replace `SIZES["magrpo"]`'s for this task (e.g. longer completions)."""
    central: bool = True
    """Whether the task has a centralised single-policy arm."""
    metrics: Callable[[Any], dict[str, Any]] | None = None
    """Named functions of the joint action (reward-function signature) for an env, e.g. a reward's terms: each is
    evaluated on the sampled evaluation completions and its mean reported under `metrics`."""
    tools: Callable[[], list[Any]] | None = None
    """The agents' tools (the trainer's `tools`, per agent), played in training and in every evaluation, with
    `sizes["tool_rounds"]` rounds of calls per turn."""


CENTRAL_TAGS = ("agent_0", "agent_1")


def central_prompt(agent_texts: Sequence[str], tags: Sequence[str]) -> str:
    """The centralised policy's prompt: the rules once (without the player line) and the tagged answer format."""
    rules = agent_texts[0].rsplit(" You are player", 1)[0]
    sections = "".join(f"<{t}>number</{t}>" for t in tags)
    return f"{rules}\n\nWrite both players' numbers, exactly in this form: {sections}"


def _centralized(env: Any, central: bool) -> Any:
    from trl_marl.envs import CentralizedEnv

    # the opening tag as a prefill: from the instruction alone the untrained model won none of 64 samples (one wrote a
    # single valid section) and got reward 0 on every step of a 30-step run; with it 12% of its samples already win
    return CentralizedEnv(env, format_prompt=central_prompt, prefill=f"<{CENTRAL_TAGS[0]}>") if central else env


def _team_reward(env: Any, team: Any) -> Any:
    from trl_marl.envs import CentralizedEnv
    from trl_marl.rewards import CentralizedReward

    return CentralizedReward(env, team) if isinstance(env, CentralizedEnv) else team


def split_task() -> Task:
    """Division of labour (`ChatSplitItemsEnv`): both agents see two numbers and each says one; the team wins when
    they say different ones. Training rows use numbers of the train pool only, held-out rows the held-out pool only."""
    from trl_marl.envs.coordination import ChatSplitItemsEnv
    from trl_marl.rewards.coordination import SplitItemsReward
    from trl_marl.scripts.demo_real import EVAL_SEED, item_lists, number_split

    train_pool, held_pool = number_split()

    def env(central: bool) -> Any:
        base = ChatSplitItemsEnv(2, system_prompt=None, prefill="") if central else ChatSplitItemsEnv(2)
        return _centralized(base, central)

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        return item_lists(train_pool, count, seed)

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        pool = held_pool if split == "heldout" else train_pool
        return item_lists(pool, count, EVAL_SEED)

    return Task("split", env, lambda env: _team_reward(env, SplitItemsReward()), train_rows, eval_rows)


def target_sum_task() -> Task:
    """The target-sum game (`ChatTargetSumEnv`, prefill "My number is", leading integers): train targets 4..16
    without the held-out {5, 9, 13}."""
    from trl_marl.envs import ChatTargetSumEnv
    from trl_marl.rewards import TargetSumReward

    train, heldout = target_split()

    def env(central: bool) -> Any:
        return _centralized(ChatTargetSumEnv(2, system_prompt=None, prefill="") if central else ChatTargetSumEnv(2),
                            central)

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        order = random.Random(seed).choices(train, k=count)
        return [{"target": t} for t in order]

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        targets = heldout if split == "heldout" else train
        return [{"target": targets[i % len(targets)]} for i in range(count)]

    team = TargetSumReward(invalid_penalty=INVALID_PENALTY, leading=True)
    return Task("target_sum", env, lambda env: _team_reward(env, team), train_rows, eval_rows)


def split_rows(train: list[dict[str, Any]], heldout: list[dict[str, Any]]) -> tuple[
        Callable[[int, int], list[dict[str, Any]]], Callable[[str, int], list[dict[str, Any]]]]:
    """A task's `train_rows` (drawn with replacement from `train`, by seed) and `eval_rows` (the first `count` rows of
    `heldout` or `train`, each once)."""

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        return random.Random(seed).choices(train, k=count)

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        rows = heldout if split == "heldout" else train
        return [rows[i % len(rows)] for i in range(min(count, len(rows)))]

    return train_rows, eval_rows


def scored_on_team(reward: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A reward's builder for either arm: `reward(env)` for a team, and for the single policy (a `CentralizedEnv`:
    `CentralizedCodingEnv`, `CentralizedRuleDivisionCodingEnv`, the writing views) the same reward on the team env it
    wraps, read through `CentralizedReward` (the single policy's completion split into the team's parts)."""
    from trl_marl.envs import CentralizedEnv
    from trl_marl.rewards import CentralizedReward

    def build(env: Any) -> Any:
        return CentralizedReward(env, reward(env.env)) if isinstance(env, CentralizedEnv) else reward(env)
    return build


def scored(func: Any) -> Callable[[Any], Any]:
    """`scored_on_team` for a reward that does not depend on the env: `func` itself, for either arm."""
    return scored_on_team(lambda _team: func)


def coding_task() -> Task:
    """MAGRPO's cooperative coding on `trl_marl.data.team_coding`'s level-1 problems (a one-line helper `aux` and a
    one-line main function; the helper's contract is stated to both agents): agent 0 writes `aux`, agent 1 the main
    function, each after the assistant prefill "```python", sampled at T = 0.7 until the closing fence. Trained on
    `CodingTeamReward` (structure, syntax, pass rate, helper used, non-trivial main); success is a joint program that
    passes every hidden test. Training and held-out problems are split by family (`team_coding_split`), so no held-out
    problem shares its helper with a training problem. The centralised arm is `CentralizedCodingEnv`: one policy
    writes both functions in one code block, split into the helper's and the main part and scored by the same
    rewards."""
    from trl_marl.data.team_coding import team_coding_rows
    from trl_marl.envs import CentralizedCodingEnv, CooperativeCodingEnv
    from trl_marl.rewards.coding import CodeBLEUTermReward, CodingTeamReward, HelperUsedReward, PassRateReward

    train, heldout = team_coding_rows("train", (1,)), team_coding_rows("heldout", (1,))

    def env(central: bool) -> Any:
        team = CooperativeCodingEnv(chat=True, code_prefill="```python\n")
        return CentralizedCodingEnv(team) if central else team

    train_rows, eval_rows = split_rows(train, heldout)

    def metrics(env: Any) -> dict[str, Any]:
        """The paper's second metric and the cooperation: CodeBLEU of helper + main against the reference program
        (`canonical_solution`, reference helper first), how often main calls `aux`, and how often that call makes
        tests pass (`HelperUsedReward`, decided by running the program with and without the helper)."""
        coding = env.env if isinstance(env, CentralizedCodingEnv) else env
        named = {"main_calls_helper": MainCallsHelper(coding), "helper_used": HelperUsedReward(coding),
                 "codebleu": CodeBLEUTermReward(coding)}
        return {name: scored(func)(env) for name, func in named.items()}

    # T = 0.7 for training and evaluation: at T = 1 the 135M model's code is mostly broken (on eight training problems
    # its untrained team passed every test in 28% of joint actions at T = 0.7, 12% at T = 1 in a smoke run).
    # Sampling stops at the closing code fence: the untrained model follows its code with prose ("This function
    # uses...") that no test reads, most of the 96 tokens of the first pilot (70.8 s per step)
    sizes = {"batch": 16, "generations": 8, "completion": 64, "eval_rows": 8, "temperature": 0.7, "stop": ["```"]}
    return Task("coding", env, scored_on_team(CodingTeamReward), train_rows, eval_rows,
                success=scored_on_team(PassRateReward),
                sizes={**sizes, "central_completion": 128},  # both functions: the team's 2 x 64
                metrics=metrics)


class MainCallsHelper:
    """1 when the main function refers to the helper (and does not rebind its name), else 0: how often the main
    agent uses its partner's function, whatever the tests say (`CodingSolution.helper_used`)."""

    reward_kind = "team"

    def __init__(self, env: Any) -> None:
        self.env = env
        self.__name__ = "main_calls_helper"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        from trl_marl.rewards.coding import coding_batch

        batch = coding_batch(self.env, completions, kwargs, "main_calls_helper")
        return [float(solution.helper_used) for solution in batch.solutions]


class NameChoice:
    """1 when agent `agent_index` chose `name` in `NamingCodingEnv` (the helper: its function is called `name`; the
    main agent: its function refers to `name`), else 0; with `name=None`, 1 when the main agent calls the name the
    helper chose (the team agreed)."""

    reward_kind = "team"

    def __init__(self, env: Any, agent_index: int, name: str | None) -> None:
        self.env, self.agent_index, self.name = env, agent_index, name
        self.__name__ = "names_match" if name is None else f"agent_{agent_index}_{name}"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        from trl_marl.envs.coding_analysis import analyze_solution
        from trl_marl.rewards.coding import coding_batch

        out = []
        for s in coding_batch(self.env, completions, kwargs, self.__name__).solutions:
            if self.name is None:
                out.append(float(s.helper_defined and s.helper_used))
            elif self.agent_index == 0:
                out.append(float(s.helper_defined and s.helper_name == self.name))
            else:
                out.append(float(analyze_solution("", s.main_code, s.entry_point, self.name).helper_used))
        return out


class RuleDivisionMetric:
    """Metrics of `RuleDivisionCodingEnv`: with `name`, 1 when agent `agent_index` wrote the function `name` first;
    with `name=None` and `agent_index=None`, 1 when both wrote the same function (a collision); with `name=None`, 1
    when agent `agent_index`'s function passes every test paired with the reference of the other one (its skill)."""

    reward_kind = "team"
    reward_isolation = "thread"

    def __init__(self, env: Any, agent_index: int | None, name: str | None) -> None:
        self.env, self.agent_index, self.name = env, agent_index, name
        self.__name__ = ("collision" if agent_index is None else f"agent_{agent_index}_{name}" if name
                         else f"agent_{agent_index}_right")

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        from trl_marl.envs.coding_analysis import analyze_solution
        from trl_marl.utils.code import definitions_of

        team = kwargs["agent_completions"]
        choices = [[self.env.part(c)[0] for c in team[a]] for a in (0, 1)]
        if self.agent_index is None:
            return [float(a is not None and a == b) for a, b in zip(*choices)]
        if self.name is not None:
            return [float(c == self.name) for c in choices[self.agent_index]]
        rows, variants, todo = [], [], []
        for i, completion in enumerate(team[self.agent_index]):
            choice, code = self.env.part(completion)
            if choice is None:
                continue
            row = {key: kwargs[key][i] for key in ("prompt", "entry_point", "test", "canonical_solution")}
            other = next(n for n in self.env.names if n != choice)
            helper = code + "\n\n\n" + definitions_of(row["canonical_solution"], {other})
            main = definitions_of(row["prompt"], {row["entry_point"]})
            rows.append(row)
            variants.append(analyze_solution(helper, main, row["entry_point"], self.env.helper_name))
            todo.append(i)
        out = [0.0] * len(team[self.agent_index])
        for i, result in zip(todo, self.env.execute(rows, variants)):
            out[i] = float(result is not None and result.total > 0 and result.passed == result.total)
        return out


def coding_rule_division_task(template: str = "number", temperature: float = 0.7) -> Task:
    """Two rules, two one-expression functions, two programmers who choose who writes which (`RuleDivisionCodingEnv`,
    issue 55's ninth design): the same prompt for both but "programmer 1/2", each answer prefilled up to `def aux`
    so that the first token (`1` or `2`) is the choice; the program's main function is given and returns
    `[aux1(x), aux2(x)]`. Trained on the pass rate (half the tests check each function; a collision passes none);
    success is every test passing. Rows: `rule_pair_rows` (160 training pairs of the first private-rule design's
    training rules, 16 held-out pairs of its held-out rules). Metrics: each programmer's choice, collisions, each
    programmer's function right with the reference of the other. The single-policy arm (`central`) is
    `CentralizedRuleDivisionCodingEnv` on the same rows: one policy writes both functions (nothing to divide), scored
    by the same reward; its metrics are each function right with the reference of the other.

    `template="decide"` (tasks `coding_rule_division_decide` and `_decide_t1`, at T = 0.7 and 1) uses
    `RULE_DIVISION_DECIDE_TEMPLATE`: the programmer's number last, and asked to decide which function it writes;
    `template="decide_2or1"` (task `coding_rule_division_decide_2or1`, T = 0.7) uses
    `RULE_DIVISION_DECIDE_2OR1_TEMPLATE`, the decision naming function 2 first; `"decide_2or1_named"` (task
    `coding_rule_division_decide_2or1_named`) the same with each function's name beside its number."""
    from trl_marl.data.team_coding import rule_pair_rows
    from trl_marl.envs.coding_rule_division import (
        RULE_DIVISION_DECIDE_2OR1_NAMED_TEMPLATE,
        RULE_DIVISION_DECIDE_2OR1_TEMPLATE,
        RULE_DIVISION_DECIDE_TEMPLATE,
        RULE_DIVISION_TEMPLATE,
        CentralizedRuleDivisionCodingEnv,
        RuleDivisionCodingEnv,
    )
    from trl_marl.rewards.coding import PassRateReward

    train, heldout = rule_pair_rows("train"), rule_pair_rows("heldout")

    templates = {"number": RULE_DIVISION_TEMPLATE, "decide": RULE_DIVISION_DECIDE_TEMPLATE,
                 "decide_2or1": RULE_DIVISION_DECIDE_2OR1_TEMPLATE,
                 "decide_2or1_named": RULE_DIVISION_DECIDE_2OR1_NAMED_TEMPLATE}

    def env(central: bool) -> Any:
        team = RuleDivisionCodingEnv(chat=True, template=templates[template])
        return CentralizedRuleDivisionCodingEnv(team) if central else team

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        return random.Random(seed).choices(train, k=count)

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        rows = heldout if split == "heldout" else random.Random(EVAL_ORDER_SEED).sample(train, k=len(heldout))
        return [rows[i % len(rows)] for i in range(min(count, len(rows)))]

    def metrics(env: Any) -> dict[str, Any]:
        if isinstance(env, CentralizedRuleDivisionCodingEnv):  # one policy: no choice, no collision
            return {f"agent_{a}_right": scored_on_team(lambda team, a=a: RuleDivisionMetric(team, a, None))(env)
                    for a in (0, 1)}
        out: dict[str, Any] = {"collision": RuleDivisionMetric(env, None, None)}
        for agent in (0, 1):
            for name in env.names:
                out[f"agent_{agent}_{name}"] = RuleDivisionMetric(env, agent, name)
            out[f"agent_{agent}_right"] = RuleDivisionMetric(env, agent, None)
        return out

    sizes = {"batch": 16, "generations": 8, "completion": 64, "eval_rows": 16, "temperature": temperature,
             "stop": ["```"]}
    suffix = ("" if template == "number" else "_" + template) + ("_t1" if temperature == 1 else "")
    name = "coding_rule_division" + suffix
    return Task(name, env, scored_on_team(PassRateReward), train_rows, eval_rows,
                success=scored_on_team(PassRateReward),
                sizes={**sizes, "central_completion": 128}, metrics=metrics)  # both functions: the team's 2 x 64


DIVISION_PREFILL = "```python\n# I write the function named `"
"""The start of each programmer's answer in `coding_division`: a comment that the model completes with a name, so its
first word chooses its part (`aux` or the main function). Pilots on 16 training rows x 8 (untrained): with the fence
alone it named neither function in about 80% of its answers (`pilot_coding_division.json`); prefilled up to `def `,
still in 80% (invented names such as `2_squares`; `pilot_coding_division_def.json`); with this comment, in 60-66%
(main 0.27/0.31, helper 0.09/0.07, both the same function 0.11; `pilot_coding_division_named.json`). All three fail
the gate fixed before the pilots (both the same function >= 0.6)."""


def coding_division_task() -> Task:
    """Cooperative coding with unassigned roles (`DivisionCodingEnv`, issue 55): both agents get the same level-1
    problem of `trl_marl.data.team_coding` (the helper's contract and the main function's), apart from "You are
    programmer 1/2"; each must write exactly one of `aux` and the main function, and only the first of the two in each
    answer counts. The hidden tests check both functions (`division_coding_rows`), so the team succeeds only if the
    agents split the work. Trained on `CodingTeamReward`; success is a program that passes every test. Same sampling,
    splits and sizes as `coding`. Metrics: each agent's choice, collisions (both wrote the same function), how often
    the main calls the helper. No centralised arm (one policy writing both functions has nothing to divide)."""
    from trl_marl.data.team_coding import division_coding_rows
    from trl_marl.envs.coding_division import DivisionCodingEnv
    from trl_marl.rewards.coding import CodingTeamReward, DivisionChoiceRate, PassRateReward

    train, heldout = division_coding_rows("train"), division_coding_rows("heldout")

    def env(central: bool) -> Any:
        if central:
            raise ValueError("coding_division has no centralised arm.")
        return DivisionCodingEnv(chat=True, code_prefill=DIVISION_PREFILL)

    train_rows, eval_rows = split_rows(train, heldout)

    def metrics(env: Any) -> dict[str, Any]:
        choices = {f"agent_{a}_{c}": DivisionChoiceRate(env, a, c) for a in (0, 1) for c in ("helper", "main")}
        return {**choices, "collision": DivisionChoiceRate(env), "main_calls_helper": MainCallsHelper(env),
                "team_reward": CodingTeamReward(env)}

    sizes = {"batch": 16, "generations": 8, "completion": 64, "eval_rows": 8, "temperature": 0.7, "stop": ["```"]}
    return Task("coding_division", env, lambda env: CodingTeamReward(env), train_rows, eval_rows,
                success=lambda env: PassRateReward(env), sizes=sizes, central=False, metrics=metrics)


STUBS_PREFILL = "```python\ndef"
"""The start of each programmer's answer in `coding_division_stubs`: up to `def` (no space: the name's first token
carries it), so the first word the model writes names the function it writes."""


def coding_division_stubs_task() -> Task:
    """`coding_division` with both functions shown as stubs, helper first (`STUBS_DIVISION_TEMPLATE`), and each answer
    prefilled up to `def` (`STUBS_PREFILL`): the first word is the choice of function, as the first word is the
    choice of number in the split game. Same rows, reward, success, sizes and metrics as `coding_division`."""
    from trl_marl.envs.coding_division import STUBS_DIVISION_TEMPLATE, DivisionCodingEnv

    base = coding_division_task()

    def env(central: bool) -> Any:
        if central:
            raise ValueError("coding_division_stubs has no centralised arm.")
        return DivisionCodingEnv(chat=True, code_prefill=STUBS_PREFILL, division_template=STUBS_DIVISION_TEMPLATE)

    return Task("coding_division_stubs", env, base.reward, base.train_rows, base.eval_rows, success=base.success,
                sizes=base.sizes, central=False, metrics=base.metrics)


def coding_division_stubs_t1_task() -> Task:
    """`coding_division_stubs` sampled at T = 1 (training and evaluation), as the split game is: its pilot at T = 0.7
    sharpened the shared bias past exploration (each programmer's minority function in 0.055 and 0.063 of its
    answers; `pilot_coding_division_stubs.json`), while the untrained first-word probabilities are 0.26 `aux` and
    0.12 the main function."""
    base = coding_division_stubs_task()
    return Task("coding_division_stubs_t1", base.env, base.reward, base.train_rows, base.eval_rows,
                success=base.success, sizes={**(base.sizes or {}), "temperature": 1.0}, central=False,
                metrics=base.metrics)


def coding_private_task(rules: str = "linear", naming: bool = False) -> Task:
    """Cooperative coding with private information (`PrivateRuleCodingEnv`, issue 55): only agent 0 (the helper)
    reads the rule that codes a number ("multiply `x` by 3, then add 4") and writes `aux`; agent 1 writes a main
    function over the codes (a list of codes, their sum, the largest, the codes of two numbers) and is told only that
    `aux(x)` returns the code of `x`, after two worked exchanges of functions that call a partner's `aux`; the
    helper's answer is prefilled up to `return ` (64 new tokens, stop at the closing fence, T = 0.7). Trained on
    `CodingTeamReward`; success is a program that passes every hidden test. Rules are split by form and multiplier
    (`private_rule_rows`): 432 training rows, 16 held-out rows whose rules never occur in training. Metrics: main
    calls the helper, helper use decided by running the program, and each agent paired with its reference partner
    (each one's own skill). The single-policy arm (`central`) is `CentralizedCodingEnv` on the same rows: one policy
    reads the rule (the rows' helper contract) and the main function's task and writes both functions in one code
    block (128 new tokens), split into the helper's and the main part and scored by the same rewards.

    `rules="mixed"` (task `coding_private_mixed`, the seventh design) trains on rules the untrained helper often gets
    wrong (`private_rule_rows(..., "mixed")`), each training batch and the training rows of a pilot drawn form by
    form (a form, then a rule of it), so that each form is a third of the rows.

    `naming=True` (task `coding_naming`, issue 55's eighth design) is `NamingCodingEnv` on the same rows: the helper
    names its function `aux` or `code`, the main agent calls one of them, neither sees the other's code, and each
    prompt lists the names in the opposite order (the helper `aux` first, the main agent `code` first, its worked
    exchanges calling `code`). Metrics add each agent's choice and whether the names match."""
    from trl_marl.data.team_coding import private_rule_rows
    from trl_marl.envs import CentralizedCodingEnv, CooperativeCodingEnv
    from trl_marl.envs.coding_private import NamingCodingEnv, PrivateRuleCodingEnv
    from trl_marl.rewards.coding import CodingTeamReward, HelperUsedReward, PassRateReward, ReferencePartnerPass

    train, heldout = private_rule_rows("train", rules), private_rule_rows("heldout", rules)
    families = sorted({row["family"] for row in train})
    by_family = {family: [row for row in train if row["family"] == family] for family in families}

    def balanced(count: int, rng: random.Random) -> list[dict[str, Any]]:  # a form, then a row of it
        return [rng.choice(by_family[rng.choice(families)]) for _ in range(count)]

    def env(central: bool) -> Any:
        if central:  # one policy reads the rule (the rows' helper contract) and writes both functions
            return CentralizedCodingEnv(CooperativeCodingEnv(chat=True, code_prefill="```python\n"))
        return NamingCodingEnv(chat=True) if naming else PrivateRuleCodingEnv(chat=True)

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        if rules == "mixed":
            return balanced(count, random.Random(seed))
        return random.Random(seed).choices(train, k=count)

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        if split == "heldout":
            rows = heldout
        elif rules == "mixed":
            rows = balanced(len(heldout), random.Random(EVAL_ORDER_SEED))
        else:
            rows = random.Random(EVAL_ORDER_SEED).sample(train, k=len(heldout))
        return [rows[i % len(rows)] for i in range(min(count, len(rows)))]

    def metrics(env: Any) -> dict[str, Any]:
        named = {"main_calls_helper": MainCallsHelper, "helper_used": HelperUsedReward,
                 "helper_with_reference_main": lambda env: ReferencePartnerPass(env, 0),
                 "main_with_reference_helper": lambda env: ReferencePartnerPass(env, 1),
                 "team_reward": CodingTeamReward}
        out = {name: scored_on_team(func)(env) for name, func in named.items()}
        if isinstance(env, NamingCodingEnv):
            for agent in (0, 1):
                for name in env.helper_names:
                    out[f"agent_{agent}_{name}"] = NameChoice(env, agent, name)
            out["names_match"] = NameChoice(env, 0, None)
        return out

    # 64 new tokens: the main agent writes its whole function (the helper one expression, closed well within it);
    # the single policy writes both functions, the helper's `def` line included: 128
    sizes = {"batch": 16, "generations": 8, "completion": 64, "central_completion": 128, "eval_rows": 16,
             "temperature": 0.7, "stop": ["```"]}
    name = "coding_naming" if naming else "coding_private" if rules == "linear" else f"coding_private_{rules}"
    return Task(name, env,
                scored_on_team(CodingTeamReward), train_rows, eval_rows, success=scored_on_team(PassRateReward),
                sizes=sizes, metrics=metrics)


TASKS: dict[str, Callable[[], Task]] = {"split": split_task, "target_sum": target_sum_task, "coding": coding_task,
                                     "coding_division": coding_division_task, "coding_private": coding_private_task,
                                     "coding_division_stubs": coding_division_stubs_task,
                                     "coding_division_stubs_t1": coding_division_stubs_t1_task,
                                     "coding_private_mixed": lambda: coding_private_task("mixed"),
                                     "coding_naming": lambda: coding_private_task("linear", naming=True),
                                     "coding_rule_division": lambda: coding_rule_division_task(),
                                     "coding_rule_division_decide": lambda: coding_rule_division_task("decide"),
                                     "coding_rule_division_decide_t1":
                                         lambda: coding_rule_division_task("decide", 1.0),
                                     "coding_rule_division_decide_2or1":
                                         lambda: coding_rule_division_task("decide_2or1"),
                                     "coding_rule_division_decide_2or1_named":
                                         lambda: coding_rule_division_task("decide_2or1_named")}


def writing_task() -> Task:
    """MAGRPO's cooperative writing on `trl_marl.data.team_writing` (standard-library docstrings): agent 0 writes a
    short summary of the text, agent 1 a detailed one (`CooperativeWritingEnv`, chat prompts), sampled at T = 0.7.
    Trained on `WritingTeamReward(reference_column=None)` (the paper's length range and ratio, distinct-word ratio,
    transition words and content-word overlap, plus type-token ratio; maximum 4.0); ROUGE-L of the short summary
    against the docstring's summary line (`reference`) is measured, never trained on. Success is a team reward of at
    least `WRITING_SUCCESS` (see there). Training and held-out texts are split by module (`HELDOUT_MODULES`). The
    centralised arm writes both summaries after the labels "Short summary:" (prefilled) and "Detailed summary:"
    (`CentralizedWritingEnv`: the untrained model wrote no tagged sections that parsed for `CentralizedEnv`)."""
    from trl_marl.data.team_writing import team_writing_rows
    from trl_marl.envs import CooperativeWritingEnv
    from trl_marl.envs.writing import CentralizedWritingEnv
    from trl_marl.rewards import RougeLReward
    from trl_marl.rewards.writing import WritingTeamReward

    train, heldout = team_writing_rows("train"), team_writing_rows("heldout")

    def env(central: bool) -> Any:
        team = CooperativeWritingEnv(chat=True)
        return CentralizedWritingEnv(team) if central else team

    def team_reward() -> Any:
        return WritingTeamReward(reference_column=None)

    def success(env: Any) -> Any:
        return scored(AtLeast(team_reward(), WRITING_SUCCESS))(env)

    def metrics(env: Any) -> dict[str, Any]:
        team = team_reward()
        named = {"team_reward": team, **dict(zip(team.names, team.funcs)),
                 "rouge_l_short": RougeLReward("reference", agent_index=0),
                 "rouge_l_detailed_vs_text": RougeLReward("text", agent_index=1)}
        return {name: scored(func if name == "team_reward" else CleanedTexts(func))(env)
                for name, func in named.items()}

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        return random.Random(seed).choices(train, k=count)

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        rows = heldout if split == "heldout" else train
        order = random.Random(EVAL_ORDER_SEED).sample(range(len(rows)), k=len(rows))  # spread over the modules
        return [rows[i] for i in order[:count]]

    # T = 0.7 as for coding: at T = 1 the untrained 135M model's summaries of these texts drift into invented links
    # and names; 96 tokens hold a detailed summary of ~70 words (the sources have 40-150, mean 61)
    sizes = {"batch": 16, "generations": 8, "completion": 96, "central_completion": 192, "eval_rows": 16,
             "temperature": 0.7}
    return Task("writing", env, lambda env: scored(team_reward())(env), train_rows, eval_rows, success=success,
                sizes=sizes, metrics=metrics)


EVAL_ORDER_SEED = 7
WRITING_SUCCESS = 3.0
"""A writing joint action succeeds at a team reward >= 3.0 of 4.0: both lengths and their ratio right (2.0) and
about two of the four 0.5-terms of vocabulary and style. Chosen on training texts only: the untrained team reached it
in 3 of 64 joint actions on 8 training texts (`writing_untrained.py --rows 8`, mean team reward 2.35), which leaves
room to learn; the mean team reward and its terms (`metrics`) are the main result."""


class AtLeast:
    """1.0 where `reward` (a team reward function) reaches `threshold`, else 0.0 (None where it gives None)."""

    reward_kind = "team"

    def __init__(self, reward: Any, threshold: float) -> None:
        self.reward, self.threshold, self.name = reward, threshold, f"at_least_{threshold:g}"

    def __call__(self, prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        return [None if v is None else float(v >= self.threshold)
                for v in self.reward(prompts=prompts, completions=completions, **kwargs)]


class CleanedTexts:
    """`func` on the answers as the writing rewards read them (`writing_text`: no label, markdown or quotes)."""

    reward_kind = "team"

    def __init__(self, func: Any) -> None:
        self.func, self.name = func, getattr(func, "name", type(func).__name__)

    def __call__(self, prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        from trl_marl.envs import writing_text

        if kwargs.get("agent_completions") is not None:
            kwargs = {**kwargs, "agent_completions": [[writing_text(c) for c in agent]
                                                      for agent in kwargs["agent_completions"]]}
        return self.func(prompts=prompts, completions=[writing_text(c) for c in completions], **kwargs)


TASKS["writing"] = writing_task


def writing_symmetric_task() -> Task:
    """Cooperative writing with symmetric roles (`SymmetricWritingEnv`, issue 55, design b1): both writers read the
    same text and the same instruction (one writes a one-sentence summary, the other a detailed paragraph) and differ
    only in "You are writer 1/2"; `SymmetricWritingTeamReward` scores the shorter text as the summary and pays nothing
    on the structure terms when both fall in the same length class, and nothing at all for texts unrelated to the
    source. The untrained team collides (both long) in 0.83 of its joint actions on training texts
    (`pilot_writing_symmetric.json`), so agents trained alone against the same frozen partner learn the same
    best response (both short) and collide, while a team can split the roles. Texts, splits, sampling and success
    (team reward >= `WRITING_SUCCESS`) as `writing_task`; metrics: which writer wrote the short text, collisions, and
    the team reward. No centralised arm."""
    from trl_marl.envs.writing import SymmetricWritingEnv
    from trl_marl.rewards.writing_variants import SymmetricWritingTeamReward, length_class_metrics

    base = writing_task()

    def env(central: bool) -> Any:
        if central:
            raise ValueError("writing_symmetric has no centralised arm.")
        return SymmetricWritingEnv(chat=True)

    def metrics(env: Any) -> dict[str, Any]:
        return {"team_reward": SymmetricWritingTeamReward(), **length_class_metrics()}

    return Task("writing_symmetric", env, lambda env: SymmetricWritingTeamReward(), base.train_rows, base.eval_rows,
                success=lambda env: AtLeast(SymmetricWritingTeamReward(), WRITING_SUCCESS), sizes=base.sizes,
                central=False, metrics=metrics)


TASKS["writing_symmetric"] = writing_symmetric_task


HALVES_SUCCESS = 0.55
"""A halves joint action succeeds at a team reward >= 0.55: above the 0.5 that two writers choosing the same half can
reach at most, so success needs the halves split and both summaries about their halves. Fixed before the pilot."""


def writing_halves_task(name: str = "writing_halves", instruction: str | None = None,
                        writers: tuple[str, str] = ("1", "2"), split_bonus: float = 0.0, template: str | None = None,
                        prefill: str | None = None, require_split: bool = False, central: bool = False) -> Task:
    """Cooperative writing where the writers choose who summarizes which half (`HalvesWritingEnv`, issue 55): both
    read the same text in two halves and the same instruction, and differ only in "You are writer 1/2"; each answer
    is prefilled with "I summarize the", so its first word is the writer's choice. `HalvesTeamReward` pays for each
    half the best summary of it (two writers on one half earn at most 0.5). Texts and their train / held-out split as
    `writing_task` (the 126 training and 44 held-out texts whose halves each have at least three content words of
    their own), T = 0.7, 48 new tokens (the choice and a sentence of at most 30 words); success is a team reward of at
    least `HALVES_SUCCESS`; metrics: which half each writer chose, collisions, the team reward.
    `instruction` and `writers` replace the env's (`name` names the variant); `split_bonus` is the trained reward's
    bonus for the division (`HalvesTeamReward(split_bonus=...)`; success and the `team_reward` metric stay the share
    without it, so every design is measured alike). `template` and `prefill` replace the env's; with `require_split`
    the trained reward pays nothing unless the writers chose different halves, and it is also what success and the
    teamwork evaluation score (as the coding rule division scores its pass rate). With `central` the task has a
    single-policy arm: one policy summarizes both parts (`CentralizedHalvesEnv`, "Summary of part 1:" prefilled, twice
    the team's tokens), scored by the same rewards and metrics through `CentralizedReward`."""
    from trl_marl.envs.writing_halves import (
        HALVES_INSTRUCTION,
        HALVES_PREFILL,
        HALVES_TEMPLATE,
        CentralizedHalvesEnv,
        HalvesWritingEnv,
        split_halves,
    )
    from trl_marl.rewards.writing_halves import HalvesTeamReward, halves_metrics
    from trl_marl.rewards.writing_source import content_words

    def usable(row: dict[str, Any]) -> bool:
        first, second = (set(content_words(half)) for half in split_halves(row["text"]))
        return len(first - second) >= 3 and len(second - first) >= 3

    base = writing_task()
    train = [row for row in base.eval_rows("train", 10_000) if usable(row)]
    heldout = [row for row in base.eval_rows("heldout", 10_000) if usable(row)]

    def env(single: bool) -> Any:
        if single and not central:
            raise ValueError(f"{name} has no centralised arm.")
        team = HalvesWritingEnv(chat=True, instruction=instruction or HALVES_INSTRUCTION, writers=writers,
                                template=template or HALVES_TEMPLATE, prefill=prefill or HALVES_PREFILL)
        return CentralizedHalvesEnv(team) if single else team

    def train_rows(count: int, seed: int) -> list[dict[str, Any]]:
        return random.Random(seed).choices(train, k=count)

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        return (heldout if split == "heldout" else train)[:count]

    def metrics(env: Any) -> dict[str, Any]:
        named = {"team_reward": HalvesTeamReward(), **halves_metrics()}
        return {key: scored(func)(env) for key, func in named.items()}

    sizes = {**(base.sizes or {}), "completion": 48, "central_completion": 96}
    trained = functools.partial(HalvesTeamReward, split_bonus=split_bonus, require_split=require_split)

    def success(env: Any) -> Any:
        return scored(trained() if require_split else AtLeast(HalvesTeamReward(), HALVES_SUCCESS))(env)

    return Task(name, env, lambda env: scored(trained())(env), train_rows, eval_rows, success=success, sizes=sizes,
                central=central, metrics=metrics)


TASKS["writing_halves"] = writing_halves_task

HALVES_START_CLAUSE = 'Start with "I summarize the first half:" or "I summarize the second half:".'
HALVES_START_SECOND_FIRST = 'Start with "I summarize the second half:" or "I summarize the first half:".'


def writing_halves_second_first_task() -> Task:
    """`writing_halves` with the instruction's "Start with" clause naming the second half first (design 3 of the
    halves task, pilot 3: the untrained writers choose the first half in 0.69 and 0.54 of their answers instead of
    0.98, which fails the bias gate fixed before the pilots on writer 2, 1.19 to 1 against 1.5; trained after design
    2's team did not find the split in 30 steps, as an exploratory run). Everything else as `writing_halves`."""
    from trl_marl.envs.writing_halves import HALVES_INSTRUCTION

    instruction = HALVES_INSTRUCTION.replace(HALVES_START_CLAUSE, HALVES_START_SECOND_FIRST)
    if instruction == HALVES_INSTRUCTION:
        raise ValueError("HALVES_INSTRUCTION no longer holds the start clause this task reorders.")
    return writing_halves_task("writing_halves_second_first", instruction)


TASKS["writing_halves_second_first"] = writing_halves_second_first_task



def writing_halves_no_clause_task() -> Task:
    """`writing_halves` without the instruction's "Start with" clause: the prefill alone asks for the choice (a
    design-4 candidate, piloted on training rows only: design 2's clause made the untrained writers choose the first
    half in 0.98 of their answers, design 3's reordered clause in 0.69 and 0.54). Everything else as
    `writing_halves`."""
    from trl_marl.envs.writing_halves import HALVES_INSTRUCTION

    instruction = HALVES_INSTRUCTION.replace(" " + HALVES_START_CLAUSE, "")
    if instruction == HALVES_INSTRUCTION:
        raise ValueError("HALVES_INSTRUCTION no longer holds the start clause this task removes.")
    return writing_halves_task("writing_halves_no_clause", instruction)


TASKS["writing_halves_no_clause"] = writing_halves_no_clause_task


HALVES_NAMES = ("Robin", "Sam")
"""Writer labels without an order, for the design-4 candidates `writing_halves_named*`."""


def _named_instruction(start_clause: str) -> str:
    from trl_marl.envs.writing_halves import HALVES_INSTRUCTION

    instruction = HALVES_INSTRUCTION.replace(HALVES_START_CLAUSE, start_clause)
    named = instruction.replace("You are writer {writer}.", "Your name is {writer}.")
    if named == instruction or start_clause not in named:
        raise ValueError("HALVES_INSTRUCTION no longer holds the sentences the named variants replace.")
    return named


def writing_halves_named_task() -> Task:
    """`writing_halves` with the writers named ("Your name is Robin." / "... Sam.") instead of numbered: a design-4
    candidate (the number of design 3's writers moved writer 2 towards the second half: 0.45 against writer 1's
    0.30), piloted on training rows only. Everything else as `writing_halves`."""
    return writing_halves_task("writing_halves_named", _named_instruction(HALVES_START_CLAUSE), HALVES_NAMES)


def writing_halves_named_second_first_task() -> Task:
    """`writing_halves_named` with design 3's start clause (the second half named first): a design-4 candidate."""
    return writing_halves_task("writing_halves_named_second_first", _named_instruction(HALVES_START_SECOND_FIRST),
                               HALVES_NAMES)


TASKS["writing_halves_named"] = writing_halves_named_task
TASKS["writing_halves_named_second_first"] = writing_halves_named_second_first_task


HALVES_SPLIT_BONUS = 0.5
"""Design 5's weight of the division bonus in the trained reward."""


def writing_halves_bonus_task() -> Task:
    """Design 5 of the halves task: `writing_halves_named_second_first`'s prompt, trained on `HalvesTeamReward` with
    a division bonus of `HALVES_SPLIT_BONUS` (gate 0.25), because while the summaries are weak the share pays the
    choice little. Its prompt failed design 4's bias gate narrowly on training rows (both writers prefer the second
    half, 1.40 and 1.44 to 1 against 1.5): a weaker bias makes agents trained alone less sure to collide, so it
    works against the team in the team-versus-alone comparison. Success and metrics as `writing_halves`."""
    return writing_halves_task("writing_halves_bonus", _named_instruction(HALVES_START_SECOND_FIRST), HALVES_NAMES,
                               split_bonus=HALVES_SPLIT_BONUS)


TASKS["writing_halves_bonus"] = writing_halves_bonus_task


NUMBERED_HALVES: dict[str, tuple[str, str]] = {
    "writing_halves_decide": ("HALVES_DECIDE_INSTRUCTION", "HALVES_NUMBERED_PREFILL"),
    "writing_halves_summary": ("HALVES_SUMMARY_INSTRUCTION", "HALVES_SUMMARY_PREFILL"),
    "writing_halves_summary_options": ("HALVES_SUMMARY_OPTIONS_INSTRUCTION", "HALVES_SUMMARY_PREFILL"),
}
"""Designs 6-8 of the halves task: their instruction and prefill (names in `trl_marl.envs.writing_halves`)."""


def numbered_halves_task(name: str) -> Task:
    """Designs 6-8 of the halves task (`NUMBERED_HALVES`): the coding rule division's design carried to the halves.
    The parts by number (`HALVES_NUMBERED_TEMPLATE`), the decision naming part 2 first ("decide whether you summarize
    part 2 or part 1"), each answer prefilled up to the part's number so that its first token is the choice, and a
    collision paying nothing (`HalvesTeamReward(require_split=True)`, as a program missing a function passes no
    test), which the teamwork evaluation and success score too. Design 6 (`writing_halves_decide`) prefills "I
    summarize part"; after it the untrained model went on with the instruction's words (its pilot's summaries scored
    0.05 and 0.10), so design 7 (`writing_halves_summary`) asks for the answer as a heading, "Summary of part N:",
    prefilled up to "Summary of part"; the model wrote the letter N, so design 8 (`writing_halves_summary_options`)
    writes both headings out, "Summary of part 2:" or "Summary of part 1:". Rows, sampling and metrics as
    `writing_halves`. Design 8 has a single-policy arm (`central`): one policy writes "Summary of part 1: ...
    Summary of part 2: ..." (`CentralizedHalvesEnv`)."""
    from trl_marl.envs import writing_halves as halves

    instruction, prefill = (getattr(halves, constant) for constant in NUMBERED_HALVES[name])
    return writing_halves_task(name, instruction, template=halves.HALVES_NUMBERED_TEMPLATE, prefill=prefill,
                               require_split=True, central=name == "writing_halves_summary_options")


for _name in NUMBERED_HALVES:
    TASKS[_name] = functools.partial(numbered_halves_task, _name)


def tool_division_task(first: bool = False, read: str = "answer", temperature: float = 0.7) -> Task:
    """Two agents with calculators, two products, one each (`ToolDivisionEnv`, issue 55's tools design; task
    `tool_division_worked`): the same prompt for both but "agent 1/2" (the team's rule and the agent's number in the
    system message, two worked exchanges of the two-product question, then the row's); with `first` (task
    `tool_division`) the first design, whose pilot failed: the tool relay's worked exchanges, then the rule and the
    number in a long question. The team reward (`ToolDivisionReward`) pays 0.5 per product stated by exactly one
    agent, so a collision pays nothing and success is both products stated. Rows: `tool_division_rows` over the tool
    relay's split of the pairs (training rows from training pairs, 16 held-out rows from held-out pairs, the same for
    every seed). The completion budget holds a call, its result and the stated product (the tool relay's 72 tokens);
    at most 2 rounds of calls. Metrics: each agent's stated product, whether it states one, collisions. No
    single-policy arm. With `read="calls"` (task `tool_division_calls`, the third candidate: the second's prompt)
    an agent's product is the one its calculator computed, in the reward and the metrics; the answer is not read.
    `temperature`: sampling in training and evaluation (task `tool_division_calls_t1`: the third candidate at 1)."""
    from trl_marl.data.tool_relay import tool_division_rows, tool_relay_split
    from trl_marl.envs.tool_division import FIRST_SYSTEM, FIRST_TEMPLATE, ToolDivisionEnv
    from trl_marl.envs.tool_relay import WORKED_EXCHANGES
    from trl_marl.rewards.tool_division import ToolDivisionReward, tool_division_metrics
    from trl_marl.tools import calculator

    train, heldout = tool_relay_split()

    def eval_rows(split: str, count: int) -> list[dict[str, Any]]:
        return tool_division_rows(heldout if split == "heldout" else train, count,
                                  10_000 if split == "heldout" else EVAL_ORDER_SEED)

    sizes = {"batch": 16, "generations": 8, "completion": 72, "tool_rounds": 2, "eval_rows": 16,
             "temperature": temperature}

    def env(central: bool) -> Any:
        return ToolDivisionEnv(FIRST_TEMPLATE, FIRST_SYSTEM, WORKED_EXCHANGES) if first else ToolDivisionEnv()

    name = "tool_division" if first else "tool_division_worked" if read == "answer" else "tool_division_calls"
    name += "_t1" if temperature == 1 else ""
    return Task(name, env, lambda env: ToolDivisionReward(read),
                lambda count, seed: tool_division_rows(train, count, seed), eval_rows, sizes=sizes, central=False,
                metrics=lambda env: tool_division_metrics(read), tools=lambda: [[calculator], [calculator]])


TASKS["tool_division"] = lambda: tool_division_task(first=True)
TASKS["tool_division_worked"] = tool_division_task
TASKS["tool_division_calls"] = lambda: tool_division_task(read="calls")
TASKS["tool_division_calls_t1"] = lambda: tool_division_task(read="calls", temperature=1.0)


# ------------------------------------------------------------------------------------------------------ sizes
SIZES: dict[str, dict[str, Any]] = {
    # rows per step = batch // generations; eval: `eval_rows` rows per split, 8 sampled joint actions each
    "magrpo": {"batch": 16, "generations": 8, "completion": 3, "central_completion": 24, "lr": 1e-3,
               "eval_rows": 24},
    "maporl": {"batch": 8, "response": 8, "lr": 2e-3, "ppo_epochs": 2, "eval_rows": 60, "value_layers": 8},
}
SMOKE: dict[str, dict[str, Any]] = {
    "magrpo": {"batch": 8, "generations": 4, "eval_rows": 2},
    "maporl": {"batch": 4, "eval_rows": 6},
}


# ------------------------------------------------------------------------------------------------------ MAGRPO
def stop_token_ids(tokenizer: Any, stops: Sequence[str]) -> list[int]:
    """The end-of-sequence token of `tokenizer` and one token id per string of `stops` (each must be a single token,
    e.g. "```" for SmolLM2): sampling ends at any of them."""
    ids = [tokenizer.eos_token_id]
    for stop in stops:
        encoded = tokenizer(stop, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise ValueError(f"stop string {stop!r} is {len(encoded)} tokens for this tokenizer: give single-token "
                             "stops.")
        ids.append(encoded[0])
    return ids


def with_stops(sizes: dict[str, Any], model: str) -> dict[str, Any]:
    """`sizes` with `generation_kwargs` that stop sampling at `sizes["stop"]` as well (unchanged without stops)."""
    if not sizes.get("stop"):
        return sizes
    from transformers import AutoTokenizer

    from trl_marl.offline_models import is_real_model_name, resolve_real_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_real_model_name(model) if is_real_model_name(model) else model)
    return {**sizes, "generation_kwargs": {"eos_token_id": stop_token_ids(tokenizer, sizes["stop"])}}


def build_magrpo(task: Task, arm: str, seed: int, steps: int, sizes: dict[str, Any], output_dir: str, model: str,
                 frozen: Sequence[int] = ()) -> Any:
    """One MAGRPO trainer of an arm (`team`/`alone`: 2 agents with adapters; `central`: one policy)."""
    from trl_marl.scripts.demo_real import magrpo_trainer

    central = arm == "central"
    env = task.env(central)
    rows = task.train_rows(max(64, steps * sizes["batch"] // sizes["generations"]), seed)
    length = sizes["central_completion"] if central else sizes["completion"]
    return magrpo_trainer(env, task.reward(env), rows, seed=seed, steps=steps, output_dir=output_dir,
                          sizes=with_stops({**sizes, "completion": length}, model), num_agents=1 if central else 2,
                          frozen=frozen, model=model, tools=task.tools() if task.tools is not None else None)


def task_tool_loop(task: Task, team: Any) -> Any:
    """The tool loop that plays `task`'s tools for `team` in an evaluation (None: the task has no tools), with the
    trainer's default limits and the task's `tool_rounds`."""
    if task.tools is None:
        return None
    from trl_marl.tools.loop import ToolLoop
    from trl_marl.tools.toolset import team_tools

    tools = task.tools()
    return ToolLoop(team_tools(tools, None, len(tools)), team.tokenizers,
                    max_iterations=(task.sizes or {}).get("tool_rounds"))


def evaluate_task(task: Task, team: Any, central: bool, rows: Sequence[dict[str, Any]], seed: int,
                  max_new_tokens: int, keep_completions: bool = False) -> dict[str, Any]:
    """Sampled (T=1) team success (team reward 1) and mean team reward over `rows`, 8 joint actions per row; with
    `keep_completions`, also the sampled answers (`completions[agent][row * 8 + g]`)."""
    from trl_marl.scripts.demo_real import sampled_team_success

    env = task.env(central)
    score = task.success(env) if task.success is not None else task.reward(env)
    sizes = task.sizes or {}
    stops = stop_token_ids(team.tokenizers[0], sizes["stop"]) if sizes.get("stop") else None
    result = sampled_team_success(env, score, team, rows, seed, max_new_tokens, sizes.get("temperature", 1.0), stops,
                                  tool_loop=task_tool_loop(task, team))
    completions, tool_messages = result.pop("completions"), result.pop("tool_messages")
    if task.metrics is not None:
        result["metrics"] = joint_action_means(task.metrics(env), completions, rows, tool_messages)
    if keep_completions:
        result["completions"] = [list(agent) for agent in completions]
        if tool_messages is not None:  # what each agent's calls returned, in order
            result["tool_results"] = [None if agent is None else [
                [str(m.get("content")) for m in turn if m.get("role") == "tool"] for turn in agent]
                for agent in tool_messages]
    return result


def teamwork_task(task: Task, team: Any, rows: Sequence[dict[str, Any]], seed: int,
                  max_new_tokens: int) -> dict[str, Any]:
    """`trl_marl.teamwork.evaluate_teamwork` of a two-agent arm on `rows`: the team, each agent with its partner's
    answer blanked (necessity), each agent with its partner's untrained self (the adapters off: co-adaptation), the
    roles swapped; scored by the task's success and its cooperation metrics, sampled as `evaluate_task` samples."""
    from trl_marl.teamwork import evaluate_teamwork

    env = task.env(False)
    score = task.success(env) if task.success is not None else task.reward(env)
    sizes = task.sizes or {}
    stops = stop_token_ids(team.tokenizers[0], sizes["stop"]) if sizes.get("stop") else None
    report = evaluate_teamwork(team, env, list(rows), score, metrics=task.metrics(env) if task.metrics else None,
                               samples_per_row=8, seed=seed, max_new_tokens=max_new_tokens,
                               temperature=sizes.get("temperature", 1.0), stop_token_ids=stops,
                               tool_loop=task_tool_loop(task, team))
    return report.to_dict()


def joint_action_means(funcs: dict[str, Any], completions: Sequence[Sequence[str]],
                       rows: Sequence[dict[str, Any]],
                       tool_messages: Sequence[Any] | None = None) -> dict[str, float | None]:
    """The mean of each named function over the sampled joint actions (`completions[agent][row * G + g]`, aligned
    joint actions: the g-th sample of every agent), skipping None; None when a function scored none. With tools,
    `tool_messages` (the same layout) reaches the functions as `agent_tool_messages`, as in training."""
    per_row = len(completions[0]) // max(1, len(rows))
    columns: dict[str, Any] = {key: [rows[i // per_row][key] for i in range(len(completions[0]))] for key in rows[0]}
    if tool_messages is not None:
        columns["agent_tool_messages"] = list(tool_messages)
    out: dict[str, float | None] = {}
    for name, func in funcs.items():
        values = [v for v in func(prompts=[None] * len(completions[0]), completions=list(completions[0]),
                                  agent_completions=[list(a) for a in completions], **columns) if v is not None]
        out[name] = statistics.mean(values) if values else None
    return out


def pair_alone_agents(trainers: Sequence[Any]) -> Any:
    """The team of two separately trained agents: trainer 0's team with agent 1's adapter taken from trainer 1."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    team, other = trainers[0].team, trainers[1].team
    weights = get_peft_model_state_dict(other.policy(1), adapter_name=other.agent_adapter[1])
    set_peft_model_state_dict(team.policy(1), weights, adapter_name=team.agent_adapter[1])
    return team


def train_timed(trainer: Any) -> dict[str, Any]:
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    steps = max(1, trainer.state.global_step)
    curve = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"train_seconds": seconds, "steps": trainer.state.global_step, "s_per_step": seconds / steps,
            "reward_curve": curve}


EVAL_SPLITS = {"heldout": "heldout", "train": "train_rows"}
"""`--eval-splits` names and the record keys of their results."""


def run_magrpo_seed(task: Task, seed: int, steps: int, sizes: dict[str, Any], arms: Sequence[str], work: str,
                    model: str, build: Callable[..., Any] = build_magrpo,
                    evaluate: Callable[..., dict[str, Any]] = evaluate_task,
                    pair: Callable[[Sequence[Any]], Any] = pair_alone_agents,
                    eval_splits: Sequence[str] = tuple(EVAL_SPLITS), teamwork_eval: bool = False) -> dict[str, Any]:
    """Every arm of one seed: success on the `eval_splits` (held-out and/or training rows) before (untrained) and
    after training; with `teamwork_eval`, each two-agent arm's teamwork evaluation on the held-out rows
    (`teamwork_task`)."""
    eval_seed = 10_000 + seed
    rows = {split: task.eval_rows(split, sizes["eval_rows"]) for split in eval_splits}

    def measure(team: Any, central: bool) -> dict[str, Any]:
        length = sizes["central_completion"] if central else sizes["completion"]
        return {EVAL_SPLITS[split]: evaluate(task, team, central, rows[split], eval_seed, length)
                for split in eval_splits}

    def teamwork(team: Any) -> dict[str, Any]:
        return teamwork_task(task, team, rows["heldout"], eval_seed, sizes["completion"]) if teamwork_eval else {}

    out: dict[str, Any] = {"seed": seed}
    if "team" in arms or "alone" in arms:
        trainer = build(task, "team", seed, steps, sizes, os.path.join(work, f"team{seed}"), model)
        out["untrained"] = measure(trainer.team, False)
        if "team" in arms:
            out["team"] = {**train_timed(trainer), **measure(trainer.team, False)}
            if teamwork_eval:
                out["team"]["teamwork"] = teamwork(trainer.team)
        del trainer
    if "alone" in arms:
        alone = []
        timings = []
        for agent in (0, 1):
            trainer = build(task, "alone", seed, steps, sizes, os.path.join(work, f"alone{seed}_{agent}"), model,
                            frozen=[1 - agent])
            timings.append(train_timed(trainer))
            alone.append(trainer)
        paired = pair(alone)
        out["alone"] = {"agents": timings, "s_per_step": statistics.mean(t["s_per_step"] for t in timings),
                        **measure(paired, False)}
        if teamwork_eval:
            out["alone"]["teamwork"] = teamwork(paired)
        del alone
    if "central" in arms:
        trainer = build(task, "central", seed, steps, sizes, os.path.join(work, f"central{seed}"), model)
        out["central_untrained"] = measure(trainer.team, True)
        out["central"] = {**train_timed(trainer), **measure(trainer.team, True)}
    return out


# ------------------------------------------------------------------------------------------------------ MAPoRL
@dataclass(frozen=True)
class DebateTask:
    """A MAPoRL debate task of this benchmark: its env, and its training and held-out evaluation rows per seed.

    `train_rows(count, seed)` and `eval_rows(count, seed)` give rows with `question` and the gold `answer`; no
    evaluation row's question is ever a training row's."""

    name: str
    record_name: str
    """The task's name in the JSON record (`settings["task"]`)."""
    env: Callable[[], Any]
    train_rows: Callable[[int, int], list[dict[str, Any]]]
    eval_rows: Callable[[int, int], list[dict[str, Any]]]
    sizes: dict[str, Any] | None = None
    """Sizes that replace `SIZES["maporl"]`'s for this task."""


def addition_debate_task() -> DebateTask:
    """1-digit additions that every agent can answer alone (`trl_marl.scripts.demo_real.debate_trainer`'s task):
    the held-out unordered pairs {a, b} are drawn per seed (`addition_split(seed)`)."""
    from trl_marl.scripts import demo_real as recipe

    def env() -> Any:
        from trl_marl.envs.debate import DebateEnv

        return DebateEnv(num_agents=2, num_turns=2, chat=True, system_prompt=recipe.DEBATE_SYSTEM,
                         answer_format=recipe.DEBATE_FORMAT)

    return DebateTask("addition", "debate_1digit_addition", env,
                      train_rows=lambda count, seed: recipe.addition_rows(recipe.addition_split(seed)[0], count, seed),
                      eval_rows=lambda count, seed: recipe.heldout_debate_rows(seed, count))


def hidden_sum_debate_task() -> DebateTask:
    """"What is a + b?" where agent 1 knows only a and agent 2 only b (`trl_marl.data.hidden_debate`): turn 1 cannot
    be right but by a guess; turn 2 needs the number the other agent stated. Each answer starts with the agent's
    own fact and the start of the sum ("I know that a = 7. So a + b = 7 +"). One fixed split of the unordered
    pairs; the 23 held-out questions are evaluated 3 times each by default (69 debates). Sampled at T=0.7 (training
    and evaluation): at T=1 the untrained model's continuations were mostly not sums (see docs/real_model.md)."""
    from trl_marl.data.hidden_debate import hidden_sum_env, hidden_sum_rows, hidden_sum_split

    train, heldout = hidden_sum_split()
    return DebateTask("hidden_sum", "debate_hidden_sum", hidden_sum_env,
                      train_rows=lambda count, seed: hidden_sum_rows(train, count, seed),
                      eval_rows=lambda count, seed: hidden_sum_rows(heldout, count, 10_000 + seed),
                      sizes={"eval_rows": 3 * len(heldout), "temperature": 0.7})


DEBATE_TASKS: dict[str, Callable[[], DebateTask]] = {"addition": addition_debate_task,
                                                     "hidden_sum": hidden_sum_debate_task}
DEBATE_REWARDS = ("influence", "verifier")
"""MAPoRL's ablation: the influence-aware reward with collaboration incentives (Definition 1, Tables 1-2), or the
plain verifier score of each answer at each turn."""


def debate_reward(kind: str, verifier: Any) -> Any:
    """The reward of `kind` over `verifier`: `influence` is `debate_trainer`'s (gamma 1, alpha 0.5, beta 0.2)."""
    from trl_marl.rewards.influence import InfluenceAwareReward

    if kind == "influence":
        return InfluenceAwareReward(verifier, gamma=1.0, alpha0=0.5, alpha1=0.5, beta0=0.2, beta1=0.2)
    if kind == "verifier":
        return InfluenceAwareReward(verifier, mode="verifier")
    raise ValueError(f"reward must be one of {DEBATE_REWARDS}, got {kind!r}.")


def build_maporl(seed: int, steps: int, sizes: dict[str, Any], output_dir: str, model: str,
                 task: DebateTask | None = None, reward: str = "influence", frozen: Sequence[int] = ()) -> Any:
    """Multi-agent PPO on a 2-agent, 2-turn debate of `task` (default: 1-digit additions) with `reward`; the eval
    rows are held-out questions. The settings are `trl_marl.scripts.demo_real.debate_trainer`'s (with the addition
    task and the influence reward, this is the same trainer). `frozen`: the agents that play but are not trained
    (`MultiAgentPPOConfig.frozen_agents`, the `alone` arm)."""
    from datasets import Dataset

    from trl_marl.rewards.verifier import AnswerVerifier
    from trl_marl.scripts.demo_real import real_lora_config, value_models
    from trl_marl.trainers import MultiAgentPPOConfig, MultiAgentPPOTrainer

    task = task or addition_debate_task()
    verifier = AnswerVerifier(task="math")
    batch, eval_rows = sizes["batch"], sizes["eval_rows"]
    config = MultiAgentPPOConfig(
        output_dir=output_dir, num_agents=2, num_turns=2, per_device_train_batch_size=batch,
        total_episodes=steps * batch, response_length=sizes["response"], stop_token="eos",
        num_ppo_epochs=sizes["ppo_epochs"], learning_rate=sizes["lr"], lr_scheduler_type="constant", kl_coef=0.02,
        temperature=sizes.get("temperature", 1.0), policy_sharing="agent", report_to="none", save_strategy="no",
        num_sample_generations=0, logging_steps=1, activation_checkpointing=False, seed=seed, disable_tqdm=True,
        per_device_eval_batch_size=max(2, min(32, eval_rows)), frozen_agents=list(frozen),
        value_adapter=bool(sizes.get("value_adapter", False)),
    )
    return MultiAgentPPOTrainer(
        args=config, model=model, reward_funcs=[debate_reward(reward, verifier)], env=task.env(),
        train_dataset=Dataset.from_list(task.train_rows(max(64, 2 * steps * batch), seed)),
        eval_dataset=Dataset.from_list(task.eval_rows(eval_rows, seed)),
        eval_verifier=verifier, peft_config=real_lora_config(),
        value_model=None if config.value_adapter else value_models(sizes["value_layers"], model=model, seed=seed),
    )


def debate_metrics(metrics: dict[str, float], turns: int = 2) -> dict[str, list[float | None]]:
    """Per turn, from `evaluate()`'s flat metrics: majority-vote and per-agent accuracy; per turn change t -> t+1:
    the wrong->right and right->wrong rates (over the answers that were wrong, resp. right, at t) and counts. A rate
    without answers to divide by (NaN in `evaluate()`) is `None`."""

    def value(key: str) -> float | None:
        x = float(metrics[f"eval_{key}"])
        return None if math.isnan(x) else x

    out: dict[str, list[float | None]] = {
        key: [value(f"turn_{t}/{key}") for t in range(1, turns + 1)]
        for key in ("majority_accuracy", "agent_accuracy")}
    for key in ("w_to_r_rate", "r_to_w_rate", "w_to_r", "r_to_w"):
        out[key] = [value(f"turn_{t}_{t + 1}/{key}") for t in range(1, turns)]
    return out


MAPORL_ARMS = ("team", "alone")
"""MAPoRL's arms: `team` (both agents trained together) and `alone` (each agent trained with its partner frozen,
then the two paired)."""


def maporl_timed(trainer: Any) -> dict[str, Any]:
    """Train a MAPoRL trainer: its seconds, PPO updates, seconds per update and `objective/scores` per update."""
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    updates = max(1, trainer.state.global_step)
    curve = [h["objective/scores"] for h in trainer.state.log_history if "objective/scores" in h]
    return {"train_seconds": seconds, "updates": updates, "s_per_step": seconds / updates, "score_curve": curve}


def run_maporl_seed(seed: int, steps: int, sizes: dict[str, Any], work: str, model: str,
                    build: Callable[..., Any] = build_maporl, task: str = "addition",
                    reward: str = "influence", arms: Sequence[str] = ("team",),
                    pair: Callable[[Sequence[Any]], Any] = pair_alone_agents) -> dict[str, Any]:
    """One seed: held-out debate metrics ([`debate_metrics`]) of the untrained team (`before`), then of each arm
    at the end of training.

    `team`: both agents trained together; its values are the run's top-level `after`, `train_seconds`, `updates`,
    `s_per_step` and `score_curve`, as before arms existed. `alone` (MAPoRL's agents trained alone): two trainers
    of the same seed and budget, agent 0 trained with agent 1 frozen and agent 1 with agent 0 frozen
    (`frozen_agents`); then agent 1's trained adapter goes into the first trainer's team (`pair`), whose `evaluate()`
    (the team's held-out evaluation) measures the pair. Its values, with `agents` (each trainer's timing), are the
    top-level ones when it runs without `team`, else under `alone`. The untrained team is the first trainer built.
    """
    unknown = [arm for arm in arms if arm not in MAPORL_ARMS]
    if unknown or not arms:
        raise ValueError(f"MAPoRL arms must be some of {MAPORL_ARMS}, got {list(arms)}.")
    debate = DEBATE_TASKS[task]()
    out: dict[str, Any] = {"seed": seed}
    if "team" in arms:
        trainer = build(seed, steps, sizes, os.path.join(work, f"maporl{seed}"), model, task=debate, reward=reward)
        out["before"] = debate_metrics(trainer.evaluate())
        timing = maporl_timed(trainer)
        out.update(after=debate_metrics(trainer.evaluate()), **timing)
        del trainer
    if "alone" in arms:
        alone, timings = [], []
        for agent in (0, 1):
            trainer = build(seed, steps, sizes, os.path.join(work, f"maporl{seed}_alone{agent}"), model, task=debate,
                            reward=reward, frozen=(1 - agent,))
            if "before" not in out:
                out["before"] = debate_metrics(trainer.evaluate())
            timings.append(maporl_timed(trainer))
            alone.append(trainer)
        pair(alone)  # the first trainer's team now plays agent 0 and agent 1 as each was trained alone
        paired = alone[0]
        del alone, trainer  # the second trainer (its adapter copied) is freed before the evaluation
        result = {"after": debate_metrics(paired.evaluate()),
                  "train_seconds": sum(t["train_seconds"] for t in timings),
                  "updates": sum(t["updates"] for t in timings),
                  "s_per_step": statistics.mean(t["s_per_step"] for t in timings),
                  "score_curve": [t["score_curve"] for t in timings], "agents": timings}
        if "team" in arms:
            out["alone"] = result
        else:
            out.update(result)
    return out


# ------------------------------------------------------------------------------------------------------ record
def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def summarize(kind: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, standard deviation and range over seeds of every end-of-training value (and of the baselines)."""
    out: dict[str, Any] = {}
    if kind == "magrpo":
        for arm in ("untrained", "team", "alone", "central_untrained", "central"):
            if all(arm in r for r in runs):
                for split in (s for s in EVAL_SPLITS.values() if s in runs[0][arm]):
                    for key in ("success", "reward"):
                        out[f"{arm}/{split}/{key}"] = _spread([r[arm][split][key] for r in runs])
                    for key in runs[0][arm][split].get("metrics", {}):
                        values = [r[arm][split]["metrics"][key] for r in runs]
                        if all(v is not None for v in values):
                            out[f"{arm}/{split}/{key}"] = _spread(values)
    else:
        for phase in ("before", "after"):
            for key in ("majority_accuracy", "agent_accuracy"):
                for t in range(len(runs[0][phase].get(key, []))):
                    values = [r[phase][key][t] for r in runs if r[phase][key][t] is not None]
                    if values:
                        out[f"{phase}/turn_{t + 1}/{key}"] = _spread(values)
            for key in ("w_to_r_rate", "r_to_w_rate"):
                for t in range(len(runs[0][phase].get(key, []))):
                    values = [r[phase][key][t] for r in runs if r[phase][key][t] is not None]
                    if values:
                        out[f"{phase}/turn_{t + 1}_{t + 2}/{key}"] = _spread(values)
    return out


def make_record(kind: str, argv: Sequence[str], settings: dict[str, Any], runs: list[dict[str, Any]],
                seconds: float, git: dict[str, Any]) -> dict[str, Any]:
    """The JSON record of one benchmark run; `git` is [`git_state`] read when the run started."""
    return {"benchmark": f"learning_real/{kind}",
            "command": "python benchmarks/learning/learning_real.py " + " ".join(argv),
            "commit": git["commit"], "dirty": git["dirty"], "dirty_paths": git["dirty_paths"],
            "machine": machine_info(), "model": settings["model"], "settings": settings,
            "seeds": [r["seed"] for r in runs], "runs": runs, "summary": summarize(kind, runs),
            "seconds": seconds, "note": "values at the end of training; held-out data never trained on"}


# ------------------------------------------------------------------------------------------------------ CLI
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("magrpo", "maporl"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (MAGRPO) / PPO updates (MAPoRL)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=None,
                        help=f"arms to run: MAGRPO's {list(ARMS)} (default: all), MAPoRL's {list(MAPORL_ARMS)} "
                             "(default: team; `alone`: each agent trained with its partner frozen, then paired)")
    parser.add_argument("--task", choices=sorted(TASKS), default="split", help="MAGRPO task")
    parser.add_argument("--debate-task", choices=sorted(DEBATE_TASKS), default="addition",
                        help="MAPoRL task: 1-digit additions each agent can answer alone, or `hidden_sum` (each "
                             "agent knows one of the two numbers)")
    parser.add_argument("--reward", choices=DEBATE_REWARDS, default="influence",
                        help="MAPoRL reward: the influence-aware reward with incentives, or the plain verifier score "
                             "per answer (MAPoRL's ablation)")
    parser.add_argument("--eval-splits", nargs="+", choices=tuple(EVAL_SPLITS), default=list(EVAL_SPLITS),
                        help="MAGRPO: where success is measured, before and after training: held-out rows (the "
                             "result) and training rows (a diagnostic; `--eval-splits heldout` halves evaluation)")
    parser.add_argument("--teamwork", action="store_true",
                        help="MAGRPO: after training, each two-agent arm's teamwork evaluation on the held-out rows "
                             "(`trl_marl.teamwork`: partner blanked, untrained partner, roles swapped, task metrics)")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--smoke", action="store_true", help="1 step, tiny eval sets: checks the wiring only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared machine)")
    parser.add_argument("--max-staleness", type=int, default=0,
                        help="MAGRPO's asynchronous rollouts (`max_staleness`; 0: synchronous, the records so far)")
    parser.add_argument("--share-prompt-forward", action="store_true",
                        help="MAGRPO's training forward runs each distinct prompt once (`share_prompt_forward`; the "
                             "records before 2026-12-05 ran every row's prompt)")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--eval-rows", type=int, default=None,
                        help="evaluation rows per split (MAGRPO: each sampled 8 times; MAPoRL: held-out questions)")
    parser.add_argument("--value-layers", type=int, default=None,
                        help="MAPoRL: value models train only their top N layers (0: the trainer's full default)")
    parser.add_argument("--value-adapter", action="store_true",
                        help="MAPoRL: each critic a LoRA adapter and a head on the policies' base "
                             "(`value_adapter=True`) instead of a value model training its top `value_layers`")
    parser.add_argument("--output", default=None, help="JSON path (default benchmarks/results/learning_real_*)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run on a tree with uncommitted changes (development only: the record says "
                             "\"dirty\": true and lists the changed paths)")
    args = parser.parse_args(argv)
    if args.arms is None:
        args.arms = list(ARMS) if args.kind == "magrpo" else ["team"]
    elif args.kind == "maporl" and not set(args.arms) <= set(MAPORL_ARMS):
        parser.error(f"--arms for maporl: choose from {list(MAPORL_ARMS)}")
    return args


def settings_for(args: argparse.Namespace) -> dict[str, Any]:
    sizes = dict(SIZES[args.kind])
    if args.kind == "maporl":
        sizes.update(DEBATE_TASKS[args.debate_task]().sizes or {})
    elif args.debate_task != "addition" or args.reward != "influence":
        raise SystemExit("--debate-task and --reward choose the MAPoRL debate: use them with `maporl`.")
    if args.kind == "magrpo":
        task = TASKS[args.task]()
        sizes.update(task.sizes or {})
        if "central" in args.arms and not task.central:
            raise SystemExit(f"--task {args.task} has no centralised arm: pass --arms team alone.")
    if args.smoke:
        sizes.update(SMOKE[args.kind])
    for key, value in (("lr", args.lr), ("batch", args.batch), ("eval_rows", args.eval_rows),
                       ("value_layers", args.value_layers)):
        if value is not None and key in sizes:
            sizes[key] = value
    if args.max_staleness:
        if args.kind != "magrpo":
            raise SystemExit("--max-staleness runs MAGRPO's asynchronous rollouts: use it with `magrpo`.")
        sizes["max_staleness"] = args.max_staleness
    if args.share_prompt_forward:
        if args.kind != "magrpo":
            raise SystemExit("--share-prompt-forward is MAGRPO's training forward: use it with `magrpo`.")
        sizes["share_prompt_forward"] = True
    if args.value_adapter:
        if args.kind != "maporl":
            raise SystemExit("--value-adapter chooses MAPoRL's critics: use it with `maporl`.")
        sizes["value_adapter"] = True
        sizes.pop("value_layers", None)  # no value model: nothing trains top layers
    steps = 1 if args.smoke else args.steps
    return {"model": args.model, "steps": steps, "sizes": sizes, "smoke": args.smoke, "threads": args.threads,
            "arms": args.arms if args.kind == "magrpo" else (["maporl"] if args.arms == ["team"] else args.arms),
            "task": args.task if args.kind == "magrpo" else DEBATE_TASKS[args.debate_task]().record_name,
            **({"reward": args.reward} if args.kind == "maporl"
               else {"eval_splits": args.eval_splits, "teamwork": args.teamwork}),
            "lora": "r=8 alpha=16 q_proj,v_proj layers 22-29"}


def main(argv: Sequence[str] | None = None, run_seed: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    git = git_state()  # read before anything runs: the record names the code the run started with
    require_clean(git, args.allow_dirty)
    import torch

    # an explicit OMP_NUM_THREADS is what the trainers' own thread choice respects (`trl_marl.utils.threads`): without
    # it they would pick one thread per core for this 135M-parameter model, whatever `--threads` says
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    from trl_marl.utils.malloc import keep_freed_memory

    # decoding's KV-cache concatenations page-fault freshly mapped memory every token without it (5x slower on CPU)
    kept = keep_freed_memory()
    settings = {**settings_for(args), "malloc_keep_freed_memory": kept}
    variant = ""
    if args.kind == "maporl":  # the default debate keeps its file name; another task or reward gets its own
        variant = "".join(f"_{x}" for x, default in ((args.debate_task, "addition"), (args.reward, "influence"))
                          if x != default) + "".join(f"_{arm}" for arm in args.arms if arm != "team") + (
            "_adapter_critics" if args.value_adapter else "")
    output = args.output or os.path.join(
        os.path.dirname(HERE), "results", f"learning_real_{args.kind}{variant}{'_smoke' if args.smoke else ''}.json")
    start = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="learning-real-") as work:
        for seed in args.seeds:
            if run_seed is not None:
                run = run_seed(seed, settings, work)
            elif args.kind == "magrpo":
                run = run_magrpo_seed(TASKS[args.task](), seed, settings["steps"], settings["sizes"], args.arms,
                                      work, args.model, eval_splits=args.eval_splits,
                                      teamwork_eval=args.teamwork)
            else:
                run = run_maporl_seed(seed, settings["steps"], settings["sizes"], work, args.model,
                                      task=args.debate_task, reward=args.reward, arms=args.arms)
            runs.append(run)
            # the record is rewritten after every seed: a run cut short keeps the seeds it finished
            record = make_record(args.kind, argv, settings, runs, time.perf_counter() - start, git)
            with open(output, "w") as f:
                json.dump(record, f, indent=2)
            print(json.dumps(brief(args.kind, run)), flush=True)
    print(f"wrote {output}")
    return record


def brief(kind: str, run: dict[str, Any]) -> dict[str, Any]:
    """One line per seed: the end-of-training values of each evaluated split (held-out: `heldout`,
    `heldout_reward`, `heldout_<metric>`; training rows: `train`, `train_reward`, `train_<metric>`) and s/step per
    arm."""
    if kind == "maporl":
        def rounded(values: list[float | None]) -> list[float | None]:
            return [None if v is None else round(v, 3) for v in values]

        out = {"seed": run["seed"]}
        for phase in ("before", "after"):
            for key in ("majority_accuracy", "w_to_r_rate", "r_to_w_rate"):
                if key in run[phase]:
                    out[f"{key.replace('_accuracy', '')}_{phase}"] = rounded(run[phase][key])
        return {**out, "s_per_step": round(run["s_per_step"], 1)}
    out: dict[str, Any] = {"seed": run["seed"]}
    for arm in ("untrained", "team", "alone", "central_untrained", "central"):
        if arm in run:
            out[arm] = {}
            for prefix, split in EVAL_SPLITS.items():
                if split not in run[arm]:
                    continue
                out[arm][prefix] = round(run[arm][split]["success"], 3)
                out[arm][f"{prefix}_reward"] = round(run[arm][split]["reward"], 3)
                for key, value in run[arm][split].get("metrics", {}).items():
                    out[arm][f"{prefix}_{key}"] = None if value is None else round(value, 3)
            if "s_per_step" in run[arm]:
                out[arm]["s_per_step"] = round(run[arm]["s_per_step"], 1)
    return out


if __name__ == "__main__":
    main()
