"""Teamwork evaluation: is a trained team's score due to teamwork? Ablations of one team on held-out rows.

[`evaluate_teamwork`] plays the same held-out rows, with the same seed, under several *conditions* and reports, per
condition, the mean team reward and every named cooperation metric (a [`TeamworkReport`]: a text table, a plot, a
dict for JSON records). The conditions (docs/teamwork.md says what each one tests):

- `team`: the team as trained (the reference score);
- `blank_partner_<i>`: agent i acts, every other agent's answer is replaced by an empty one, in the rewards and in what
  agent i sees at later turns: is the partner *necessary*?
- `untrained_partner_<i>`: agent i as trained, every other agent untrained (a given team before training, or for a
  LoRA team the same base with the adapters off): did the agents *co-adapt*?
- `roles_swapped` (two agents): agent 0's policy plays role 1 and agent 1's plays role 0: are the roles learned
  (AT-GRPO's control)?

Every condition is one [`JointRollout`] (the package's rollout engine), with one sample per agent per node
(`num_generations=1`) and each row repeated `samples_per_row` times. What changes between conditions is only which
weights play which role: each condition plays a *view* of the team, an [`AgentTeam`] over the same models (no
weights copied) whose members map to other members, to the untrained team's, or to a member's model with its adapter
off (PEFT's `"__base__"` rows in a mixed-adapter batch). A blanked agent still samples, through the team's own
decoding, and its completion is emptied afterwards: the random stream is the team condition's, so at turn 1 agent i's
answers under `blank_partner_<i>` are exactly its answers under `team` and the difference is the partner's alone. In
a one-turn task without tools that is all a blanked condition samples, so it replays the team condition's samples
instead of sampling them again (the same answers, two conditions fewer to sample for two agents).

The global random state, the team's train/eval mode, its active adapters and every `requires_grad` flag are restored
afterwards, so a trainer can call this between steps.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

import torch
from transformers import GenerationConfig

from .envs.base import MultiAgentEnv
from .reward_contract import RewardSet, TeamReward
from .rollout import JointRollout, Rollout
from .team import AgentTeam, Generation
from .team.generation.base import GenerationBackend
from .team.generation.transformers_backend import TransformersBackend
from .tools.loop import ToolLoop

if TYPE_CHECKING:
    from peft import PeftModel

__all__ = ["CONDITION_QUESTIONS", "ConditionResult", "TeamworkReport", "evaluate_teamwork", "teamwork_conditions"]

CONDITION_QUESTIONS = {
    "team": "the team as trained",
    "blank_partner": "agent {i} acts, every other answer is empty: is the partner necessary?",
    "untrained_partner": "agent {i} as trained, the others untrained: did they co-adapt?",
    "roles_swapped": "agent 0's policy plays role 1 and agent 1's role 0: are the roles learned?",
}
"""What each condition (by its name without the agent number) tests, in one line (the report's descriptions)."""


# ----------------------------------------------------------------------------------------------------- results
@dataclass
class ConditionResult:
    """The scores of one condition.

    Attributes:
        name: The condition (`"team"`, `"blank_partner_0"`, ...).
        description: What it tests, in one line.
        score: The mean team reward over the episodes, each scored at the last turn it reached (NaN: none scored).
        metrics: The mean of each named metric over the episodes, at their last turn (None: the metric scored none).
        episodes: Episodes played (rows times samples per row).
        unscored: Episodes whose team reward was unscorable (every function returned None, or a non-finite value).
        turn_scores: The mean team reward at each turn (one value for a one-turn task).
        completions: `completions[a][e]`: agent a's answer at the last turn of episode e (as the rewards saw it: "" for
            a blanked agent). Not in [`TeamworkReport.to_dict`] unless asked.
    """

    name: str
    description: str
    score: float
    metrics: dict[str, float | None]
    episodes: int
    unscored: int
    turn_scores: list[float]
    completions: list[list[str]] = field(default_factory=list, repr=False)

    def to_dict(self, completions: bool = False) -> dict[str, Any]:
        """The result as plain JSON values (NaN as None); with `completions`, the final answers too."""
        out: dict[str, Any] = {"description": self.description, "score": _json_float(self.score),
               "metrics": {k: _json_float(v) for k, v in self.metrics.items()}, "episodes": self.episodes,
               "unscored": self.unscored, "turn_scores": [_json_float(v) for v in self.turn_scores]}
        if completions:
            out["completions"] = self.completions
        return out


def _json_float(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass
class TeamworkReport:
    """What [`evaluate_teamwork`] measured: one [`ConditionResult`] per condition, in the order played.

    Attributes:
        conditions: The results by condition name (`"team"` first).
        metric_names: The names of the cooperation metrics, in the order given.
        settings: How it was measured (rows, samples per row, seed, sampling, the untrained partner's source).
        notes: Conditions left out and why (e.g. no untrained partner for a fully fine-tuned team).

    Example:

    ```python
    report = evaluate_teamwork(trainer.team, env, heldout_rows, reward, metrics={"calls_helper": calls_helper})
    print(report.table())
    report.plot("teamwork.png")
    json.dump(report.to_dict(), open("teamwork.json", "w"))
    report.gaps()["blank_partner_0"]  # the team's score minus agent 0's with a blank partner: necessity
    ```
    """

    conditions: dict[str, ConditionResult]
    metric_names: list[str]
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> ConditionResult:
        return self.conditions[name]

    def gaps(self) -> dict[str, float]:
        """The team's score minus each other condition's (positive: the team does better than the ablation)."""
        team = self.conditions["team"].score if "team" in self.conditions else math.nan
        return {name: team - result.score for name, result in self.conditions.items() if name != "team"}

    def table(self) -> str:
        """A text table: one line per condition, its score, its gap to the team, and every metric."""
        headers = ["condition", "score", "team - this", *self.metric_names]
        gaps = self.gaps()
        lines = []
        for name, result in self.conditions.items():
            gap = "" if name == "team" else _cell(gaps[name], signed=True)
            lines.append([name, _cell(result.score), gap, *(_cell(result.metrics[m]) for m in self.metric_names)])
        widths = [max(len(row[c]) for row in [headers, *lines]) for c in range(len(headers))]

        def render(row: Sequence[str]) -> str:
            return "  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in
                             enumerate(zip(row, widths))).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([render(headers), rule, *map(render, lines)])

    __str__ = table

    def to_dict(self, completions: bool = False) -> dict[str, Any]:
        """The report as plain JSON values (`json.dump`-able); with `completions`, each condition's final answers."""
        return {"settings": dict(self.settings), "metric_names": list(self.metric_names),
                "conditions": {name: r.to_dict(completions) for name, r in self.conditions.items()},
                "gaps": {name: _json_float(v) for name, v in self.gaps().items()}, "notes": list(self.notes)}

    def save_json(self, path: str | os.PathLike, completions: bool = False) -> str:
        """Write [`to_dict`] to `path` (indented JSON); returns the path."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(completions), f, indent=2)
        return os.fspath(path)

    def plot(self, path: str | os.PathLike, title: str | None = None) -> str:
        """Save a PNG: one panel per quantity (the score, then each metric), one bar per condition, the team's value
        as a dashed line. Needs matplotlib (a dependency of trl-marl; imported only here). Returns the path."""
        try:
            import matplotlib
        except ImportError as error:  # pragma: no cover - matplotlib is a dependency
            raise ImportError("`TeamworkReport.plot` needs matplotlib: `pip install matplotlib`.") from error
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = list(self.conditions)
        panels = [("score", [self.conditions[c].score for c in names])]
        panels += [(m, [_nan(self.conditions[c].metrics[m]) for c in names]) for m in self.metric_names]
        fig, axes = plt.subplots(1, len(panels), figsize=(max(4.0, 0.55 * len(names) + 1.5) * len(panels), 4.2),
                                 squeeze=False)
        colors = ["tab:green" if c == "team" else "tab:gray" if c.startswith("blank") else
                  "tab:orange" if c.startswith("untrained") else "tab:blue" for c in names]
        for ax, (label, values) in zip(axes[0], panels):
            ax.bar(range(len(names)), [0.0 if math.isnan(v) else v for v in values], color=colors)
            if "team" in self.conditions and not math.isnan(values[0]):
                ax.axhline(values[0], color="tab:green", linestyle="--", linewidth=1)
            ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
            ax.set_title(label)
        fig.suptitle(title or f"teamwork on {self.settings.get('rows', '?')} held-out rows x "
                     f"{self.settings.get('samples_per_row', '?')} samples")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return os.fspath(path)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _cell(value: float | None, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


# ----------------------------------------------------------------------------------------------------- views
@dataclass(frozen=True)
class _Member:
    """Who plays one member of a view: member `member` of `team`, with its adapter off when `base`."""

    team: AgentTeam
    member: int
    base: bool = False


@dataclass(frozen=True)
class _Plan:
    """One condition: who plays each member of the team, and which members' answers are emptied."""

    name: str
    description: str
    members: tuple[_Member, ...]
    blank: frozenset[int] = frozenset()


class _Blanking(GenerationBackend):
    """The backend of a view: `inner`'s generation with the completions of the members in `blank` emptied.

    With `record` (a list), every generation it returns is appended to it with its prompts; with `replay` (such a
    list), it returns the recorded generations in order instead of sampling (the prompts must be the recorded ones).
    A blanked condition of a one-turn task plays the team condition's members on the same prompts from the same seed,
    so it samples exactly what the team condition sampled: replaying that skips the sampling and returns the same."""

    name = "teamwork"

    def __init__(self, inner: GenerationBackend, blank: frozenset[int],
                 record: list[tuple[Any, Generation]] | None = None,
                 replay: list[tuple[Any, Generation]] | None = None) -> None:
        self.inner, self.blank, self.record = inner, blank, record
        self.replay = None if replay is None else list(replay)

    def generate(self, team: AgentTeam, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
                 stop_token_ids: set[int] | None = None) -> Generation:
        if self.replay:
            recorded, out = self.replay.pop(0)
            if recorded != prompt_ids:
                raise RuntimeError("teamwork: a replayed condition asked for other prompts than the team condition's; "
                                   "this evaluation cannot replay it (a bug: please report it).")
        else:
            out = self.inner.generate(team, prompt_ids, generation_config, stop_token_ids=stop_token_ids)
        if self.record is not None:
            self.record.append((prompt_ids, out))
        if not self.blank:
            return out

        def emptied(per_member: list[list[Any]]) -> list[list[Any]]:
            return [[[] for _ in rows] if m in self.blank else rows for m, rows in enumerate(per_member)]

        logps = None if out.sampling_logps is None else emptied(out.sampling_logps)
        return Generation(out.prompt_ids, emptied(out.completion_ids), logps)


def _view(plan: _Plan, team: AgentTeam, record: list[tuple[Any, Generation]] | None = None,
          replay: list[tuple[Any, Generation]] | None = None) -> AgentTeam:
    """An [`AgentTeam`] over the models of `plan.members` (shared, not copied), member m played as `plan.members[m]`
    says, sampling through the team's own decoding with the blanked members emptied (`record`, `replay`:
    [`_Blanking`]'s)."""
    models: list[Any] = []
    agent_model, agent_adapter, tokenizers = [], [], []
    for who in plan.members:
        model = who.team.policy(who.member)
        index = next((k for k, m in enumerate(models) if m is model), None)
        if index is None:
            index = len(models)
            models.append(model)
        agent_model.append(index)
        agent_adapter.append(None if who.base else who.team.agent_adapter[who.member])
        tokenizers.append(who.team.tokenizers[who.member])
    names_per_model = [{agent_adapter[m] for m in range(len(plan.members)) if agent_model[m] == k}
                       for k in range(len(models))]
    mixed = any(len(names) > 1 for names in names_per_model)
    shared_vocab = all(t is tokenizers[0] or t.get_vocab() == tokenizers[0].get_vocab() for t in tokenizers)
    mode = "adapters" if mixed or (shared_vocab and any(a is not None for a in agent_adapter)) else "models"
    view = AgentTeam(models, tokenizers, mode, agent_model, agent_adapter, policy_turns=team.policy_turns)
    # the team's own decoding (a vLLM engine holds its own copy of the weights, which a view cannot remap)
    own = team.generation_backend
    inner = own if isinstance(own, TransformersBackend) else TransformersBackend()
    view.configure(team.settings, generation_backend=_Blanking(inner, plan.blank, record, replay))
    return view


def _is_peft(model: torch.nn.Module, attribute: str) -> TypeGuard[PeftModel]:
    """Whether `model` is a PEFT model: it has PEFT's `attribute` (`peft_config`, `disable_adapter`, ...)."""
    return hasattr(model, attribute)


@contextmanager
def _restored(teams: Sequence[AgentTeam], view: AgentTeam | None = None) -> Iterator[None]:
    """Eval mode inside; afterwards every model's train/eval mode, active adapter and `requires_grad` flags as they
    were. With `view`, a PEFT model of it that plays only base rows runs with its adapters disabled inside."""
    models = list({id(m): m for t in teams for m in t.models}.values())
    flags = [(p, p.requires_grad) for m in models for p in m.parameters()]
    modes = [(t, t.training) for t in teams]
    active = [(m, m.active_adapter) for m in models if _is_peft(m, "peft_config")]
    with ExitStack() as stack:
        try:
            for t in teams:
                t.eval()
            if view is not None:
                for k, model in enumerate(view.models):
                    members = [m for m in range(view.num_agents) if view.agent_model[m] == k]
                    if _is_peft(model, "disable_adapter") and all(view.agent_adapter[m] is None for m in members):
                        stack.enter_context(model.disable_adapter())
            yield
        finally:
            stack.close()
            for model, name in active:
                if model.active_adapter != name:
                    model.set_adapter(name)
            for param, flag in flags:
                param.requires_grad_(flag)
            for t, training in modes:
                t.train(training)


# ----------------------------------------------------------------------------------------------------- conditions
def teamwork_conditions(team: AgentTeam, untrained: AgentTeam | None = None) -> tuple[list[str], list[str]]:
    """The conditions [`evaluate_teamwork`] plays for `team` by default, and why any other is left out.

    Args:
        team: The trained team (two or more agents).
        untrained: The team before training, if any.

    Returns:
        `(names, notes)`: the condition names in play order, and one line per condition left out.

    Example:

    ```python
    team = AgentTeam.build("toy", 2, peft_config=LoraConfig(r=4))
    teamwork_conditions(team)[0]
    # ['team', 'blank_partner_0', 'blank_partner_1', 'untrained_partner_0', 'untrained_partner_1', 'roles_swapped']
    ```
    """
    n = team.agents_per_turn
    names = ["team", *(f"blank_partner_{i}" for i in range(n))]
    notes = []
    if untrained is not None or all(a is not None for a in team.agent_adapter):
        names += [f"untrained_partner_{i}" for i in range(n)]
    else:
        notes.append("untrained_partner_*: left out: the team has no LoRA adapters to turn off; pass `untrained=` "
                     "(the team before training) to play them")
    if n == 2:
        names.append("roles_swapped")
    else:
        notes.append(f"roles_swapped: left out: it swaps two roles, and the team has {n} agents")
    return names, notes


def _plan(name: str, team: AgentTeam, untrained: AgentTeam | None) -> _Plan:
    n, members = team.agents_per_turn, range(team.num_agents)

    def agent(m: int) -> int:
        return m % n

    if name == "team":
        return _Plan(name, CONDITION_QUESTIONS["team"], tuple(_Member(team, m) for m in members))
    kind, _, number = name.rpartition("_")
    if name == "roles_swapped":
        if n != 2:
            raise ValueError(f"`conditions`: roles_swapped swaps two roles, but the team has {n} agents: leave it "
                             "out.")
        return _Plan(name, CONDITION_QUESTIONS[name],
                     tuple(_Member(team, m - agent(m) + 1 - agent(m)) for m in members))
    if kind not in ("blank_partner", "untrained_partner") or not number.isdigit() or int(number) >= n:
        raise ValueError(f"`conditions`: unknown condition {name!r}; the team's are "
                         f"{teamwork_conditions(team, untrained)[0]}.")
    i = int(number)
    question = CONDITION_QUESTIONS[kind].format(i=i)
    if kind == "blank_partner":
        return _Plan(name, question, tuple(_Member(team, m) for m in members),
                     frozenset(m for m in members if agent(m) != i))
    if untrained is None and not all(a is not None for a in team.agent_adapter):
        raise ValueError(f"`conditions`: {name} needs an untrained partner, and the team has no LoRA adapters to "
                         "turn off: pass `untrained=` (the team before training, e.g. `AgentTeam.build` of the same "
                         "model), or leave it out.")
    return _Plan(name, question, tuple(
        _Member(team, m) if agent(m) == i else
        _Member(untrained, m) if untrained is not None else _Member(team, m, base=True) for m in members))


# ----------------------------------------------------------------------------------------------------- evaluation
def evaluate_teamwork(
    team: AgentTeam,
    env: MultiAgentEnv,
    rows: Sequence[Mapping[str, Any]],
    reward: Callable[..., Any] | Sequence[Callable[..., Any]] | RewardSet,
    *,
    untrained: AgentTeam | None = None,
    metrics: Mapping[str, Callable[..., Any]] | None = None,
    conditions: Sequence[str] | None = None,
    samples_per_row: int = 8,
    seed: int = 0,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    stop_token_ids: set[int] | Sequence[int] | None = None,
    generation_config: GenerationConfig | None = None,
    chat_template_kwargs: dict | None = None,
    tool_loop: ToolLoop | None = None,
    batch_size: int | None = None,
) -> TeamworkReport:
    """Score a trained team and its ablations on the same rows: necessity, co-adaptation, roles (module docstring).

    Every condition plays `rows`, each `samples_per_row` times, with one sample per agent per turn, from the same
    seed; an episode is scored by the team reward at the last turn it reached, and so is every metric.

    Args:
        team: The trained team, two or more agents (`MAGRPOTrainer.team`, `MultiAgentPPOTrainer.team`, or
            `AgentTeam.from_pretrained`).
        env: The task's environment, with as many agents as the team has per turn.
        rows: Held-out rows, with the columns the environment and the rewards read.
        reward: The team reward: a TRL-style function `f(prompts, completions, agent_completions=..., **columns)`,
            a list of them (summed), or a `RewardSet`/`TeamReward` (its weights used).
        untrained: The team before training, same members, for `untrained_partner_<i>`. Default: for a LoRA team,
            the same models with the adapters off (nothing loaded); otherwise those conditions are left out.
        metrics: Cooperation metrics, name -> function with the reward's signature (e.g. `{"calls_helper": f}`),
            evaluated in every condition; None values are left out of the means.
        conditions: The conditions to play (names as in the module docstring). Default: every one that applies
            ([`teamwork_conditions`]).
        samples_per_row: Episodes per row.
        seed: Seeds the sampling of every condition (the global torch state is restored afterwards).
        max_new_tokens: Tokens per answer.
        temperature: Sampling temperature (0: greedy).
        stop_token_ids: Answers end at these tokens (default: each agent's EOS).
        generation_config: Replaces the sampling settings built from `max_new_tokens` and `temperature`.
        chat_template_kwargs: Passed to the chat template.
        tool_loop: The tools of the team's members (a [`ToolLoop`], as the trainer's), if they have any.
        batch_size: Episodes per rollout call (default: all at once).

    Returns:
        A [`TeamworkReport`].

    Raises:
        ValueError: A team of one agent, an environment of another size, no rows, a row that lacks a column the
            environment reads, an untrained team of another size, or an unknown condition.

    Example:

    ```python
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward, parse_int
    from trl_marl.teamwork import evaluate_teamwork

    def first_says_zero(prompts, completions, agent_completions, **columns):  # a convention, as a metric
        return [float(parse_int(answer) == 0) for answer in agent_completions[0]]

    report = evaluate_teamwork(trainer.team, TargetSumEnv(), [{"target": 10}, {"target": 7}], TargetSumReward(),
                               metrics={"agent_0_says_0": first_says_zero}, samples_per_row=16)
    print(report.table())
    ```
    """
    _check_inputs(team, env, rows, untrained, samples_per_row, batch_size)
    reward_set = reward if isinstance(reward, RewardSet) else TeamReward(
        list(reward) if isinstance(reward, Sequence) else [reward])
    metric_set = _metric_set(metrics)
    names, notes = teamwork_conditions(team, untrained)
    if conditions is not None:
        names, notes = list(conditions), []
    plans = [_plan(name, team, untrained) for name in names]
    config = generation_config or _sampling(team, max_new_tokens, temperature, stop_token_ids)
    episodes = [row for row in rows for _ in range(samples_per_row)]
    step = batch_size or len(episodes)
    results: dict[str, ConditionResult] = {}
    teams = [team] + ([untrained] if untrained is not None else [])
    devices = [team.device] if team.device.type == "cuda" else []
    # one turn, no tools: a blanked condition samples what the team condition sampled (same members, prompts and
    # seed), so it replays the team condition's generations instead of sampling them again
    team_generations: list[tuple[Any, Generation]] | None = [] if env.num_turns == 1 and tool_loop is None else None
    for plan in plans:
        replay = team_generations if plan.blank and "team" in results and team_generations else None
        view = _view(plan, team, record=team_generations if plan.name == "team" else None, replay=replay)
        rollout = JointRollout(env, view, reward_set, config, num_generations=1, seed=seed,
                               chat_template_kwargs=chat_template_kwargs, tool_loop=tool_loop,
                               stop_token_ids=set(stop_token_ids) if stop_token_ids is not None else None)
        with torch.random.fork_rng(devices=devices), _restored(teams, view), torch.no_grad():
            torch.manual_seed(seed)
            played = [(rollout.run(episodes[s: s + step]), episodes[s: s + step])
                      for s in range(0, len(episodes), step)]
        results[plan.name] = _summarize(plan, played, env.num_agents, metric_set)
    settings = {"rows": len(rows), "samples_per_row": samples_per_row, "seed": seed,
                "max_new_tokens": config.max_new_tokens, "temperature": temperature if config.do_sample else 0.0,
                "num_agents": env.num_agents, "num_turns": env.num_turns, "env": type(env).__name__,
                "reward": list(reward_set.names),
                "untrained_partner": "given team" if untrained is not None else "adapters off"
                if all(a is not None for a in team.agent_adapter) else None}
    return TeamworkReport(results, list(metrics or {}), settings, notes)


def _check_inputs(team: AgentTeam, env: MultiAgentEnv, rows: Sequence[Mapping[str, Any]],
                  untrained: AgentTeam | None, samples_per_row: int, batch_size: int | None) -> None:
    if not isinstance(team, AgentTeam):
        hint = " (a trainer: pass `trainer.team`)" if isinstance(getattr(team, "team", None), AgentTeam) else ""
        raise TypeError(f"`team` must be a `trl_marl.AgentTeam`, got {type(team).__name__}{hint}.")
    if team.agents_per_turn < 2:
        raise ValueError(f"`team` has {team.agents_per_turn} agent: teamwork needs two or more agents (a single "
                         "policy has no partner to blank, swap or replace).")
    if env.num_agents != team.agents_per_turn:
        raise ValueError(f"`env` has {env.num_agents} agents but `team` has {team.agents_per_turn} per turn: pass the "
                         "environment the team was trained in.")
    if untrained is not None and (not isinstance(untrained, AgentTeam) or untrained.num_agents != team.num_agents
                                  or untrained.policy_turns != team.policy_turns):
        raise ValueError("`untrained` must be an `AgentTeam` with the trained team's members (the same team before "
                         f"training): it has {getattr(untrained, 'num_agents', '?')} members, the team "
                         f"{team.num_agents}.")
    if untrained is not None and untrained.device != team.device:
        raise ValueError(f"`untrained` is on {untrained.device} and `team` on {team.device}: move both to one device.")
    if not rows:
        raise ValueError("`rows` is empty: pass the held-out rows to evaluate on.")
    if samples_per_row < 1 or (batch_size is not None and batch_size < 1):
        raise ValueError(f"`samples_per_row` ({samples_per_row}) and `batch_size` ({batch_size}) must be >= 1.")
    for index, row in enumerate(rows):
        missing = [c for c in env.required_columns if c not in row]
        if missing:
            raise ValueError(f"`rows` row {index} lacks the column(s) {missing} that {type(env).__name__} reads (it "
                             f"has {sorted(row)}): pass rows of the task's schema.")


def _metric_set(metrics: Mapping[str, Callable[..., Any]] | None) -> RewardSet | None:
    if not metrics:
        return None
    if not isinstance(metrics, Mapping):
        raise TypeError("`metrics` must map a name to a reward-style function, e.g. {'calls_helper': f}.")
    metric_set = TeamReward(list(metrics.values()))
    metric_set.names = list(metrics)
    return metric_set


def _sampling(team: AgentTeam, max_new_tokens: int, temperature: float,
              stop_token_ids: set[int] | Sequence[int] | None) -> GenerationConfig:
    tokenizer = team.tokenizers[0]
    eos = sorted(stop_token_ids) if stop_token_ids else tokenizer.eos_token_id
    if temperature <= 0:
        return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                eos_token_id=eos)
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_k=0,
                            top_p=1.0, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)


def _summarize(plan: _Plan, played: Sequence[tuple[Rollout, Sequence[Mapping[str, Any]]]], n: int,
               metric_set: RewardSet | None) -> ConditionResult:
    """Per episode, the team reward and the metrics at its last turn; their means, and the mean reward per turn."""
    scores: list[float] = []
    values: dict[str, list[float]] = {name: [] for name in (metric_set.names if metric_set else [])}
    completions: list[list[str]] = [[] for _ in range(n)]
    per_turn: dict[int, list[float]] = {}
    for rollout, rows in played:
        last: dict[int, tuple[float, list[float], list[str]]] = {}
        for result in rollout.turns:
            node_rows = [rows[node.row_index] for node in result.nodes]
            measured = None
            if metric_set is not None:
                # one sample per agent and episode: the joint actions are the samples, so are their tool messages
                measured = metric_set.score(result.prompts, result.completions, node_rows, result.transcripts,
                                            result.turn, tool_messages=result.tool_messages)[0]
            for k, node in enumerate(result.nodes):
                value = float(result.rewards[k, 0])
                per_turn.setdefault(result.turn, []).append(value)
                last[node.row_index] = (value, [] if measured is None else measured[k].tolist(),
                                        [result.completions[a][k] for a in range(n)])
        for episode in sorted(last):
            value, measured_row, texts = last[episode]
            scores.append(value)
            for name, v in zip(values, measured_row):
                values[name].append(v)
            for a in range(n):
                completions[a].append(texts[a])
    return ConditionResult(
        plan.name, plan.description, _mean(scores), {name: _mean(v, none=True) for name, v in values.items()},
        episodes=len(scores), unscored=sum(not math.isfinite(v) for v in scores),
        turn_scores=[_mean(per_turn[t]) for t in sorted(per_turn)], completions=completions)


def _mean(values: Sequence[float], none: bool = False) -> Any:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None if none else math.nan
    return sum(finite) / len(finite)
