"""The pieces of benchmarks/learning/learning_real.py (the real-model learning benchmark): splits, arm wiring, records.

The benchmark itself only makes sense on the real model and one step of it takes far more than a test may, so these
tests check its pieces with fake trainers: that no held-out item is ever trained on, that every arm is built,
trained and measured as documented (before = untrained, after = end of training), and the JSON record's fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import load_script
from trl_marl.data.hidden_debate import HIDDEN_SUM_SYSTEM

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "learning_real.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_script(PATH)


CLEAN = {"commit": "c0ffee" * 6 + "abcd", "dirty": False, "dirty_paths": []}


@pytest.fixture
def clean_tree(bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness reads a clean checkout at commit `CLEAN` (whatever the developer's tree holds right now)."""
    monkeypatch.setattr(bench, "git_state", lambda: dict(CLEAN))


def test_target_split_holds_out_5_9_13(bench: Any) -> None:
    train, heldout = bench.target_split()
    assert heldout == [5, 9, 13]
    assert train == [4, 6, 7, 8, 10, 11, 12, 14, 15, 16]
    with pytest.raises(ValueError, match=r"held-out targets \[20\] are outside 4..16"):
        bench.target_split(heldout=(5, 20))


def test_split_task_never_trains_on_a_heldout_number(bench: Any) -> None:
    from trl_marl.scripts.demo_real import number_split

    _, held_pool = number_split()
    task = bench.split_task()
    held = set(held_pool)
    for seed in (0, 1, 4):
        rows = task.train_rows(500, seed)
        assert len(rows) == 500 and all(len(set(r["items"])) == 2 for r in rows)
        assert not any(held & set(r["items"]) for r in rows)
    assert task.train_rows(50, 0) != task.train_rows(50, 1)
    heldout = task.eval_rows("heldout", 24)
    assert len(heldout) == 24 and all(set(r["items"]) <= held for r in heldout)
    assert all(not held & set(r["items"]) for r in task.eval_rows("train", 24))


def test_target_sum_task_rows(bench: Any) -> None:
    task = bench.target_sum_task()
    assert {r["target"] for r in task.train_rows(300, 0)} == {4, 6, 7, 8, 10, 11, 12, 14, 15, 16}
    assert [r["target"] for r in task.eval_rows("heldout", 6)] == [5, 9, 13, 5, 9, 13]


def test_coding_task_rows_sizes_and_success(bench: Any) -> None:
    """The coding task trains on level-1 training problems only, evaluates on each held-out problem once, counts a
    joint action as a success only when every hidden test passes, stops sampling at the closing code fence, and its
    centralised arm writes both functions in one code block, scored by the same rewards."""
    from trl_marl.data.team_coding import team_coding_rows
    from trl_marl.envs import CentralizedCodingEnv
    from trl_marl.rewards import CentralizedReward
    from trl_marl.rewards.coding import CodingTeamReward, PassRateReward
    from trl_marl.toy import build_toy_tokenizer

    task = bench.coding_task()
    held = {r["task_id"] for r in team_coding_rows("heldout", (1,))}
    rows = task.train_rows(200, 0)
    assert not held & {r["task_id"] for r in rows} and {r["level"] for r in rows} == {1}
    assert [r["task_id"] for r in task.eval_rows("heldout", 100)] == sorted(held, key=lambda t: int(t.split("/")[1]))
    env = task.env(False)
    assert env.code_prefill == "```python\n" and env.chat
    assert isinstance(task.reward(env), CodingTeamReward) and isinstance(task.success(env), PassRateReward)
    central = task.env(True)
    assert isinstance(central, CentralizedCodingEnv) and central.prefill == "```python\n"
    for reward in (task.reward(central), task.success(central)):
        assert isinstance(reward, CentralizedReward)
    settings = bench.settings_for(bench.parse_args(["magrpo", "--task", "coding"]))
    sizes = settings["sizes"]
    assert (sizes["completion"], sizes["central_completion"], sizes["generations"]) == (64, 128, 8)
    assert sizes["temperature"] == 0.7 == task.sizes["temperature"] and sizes["stop"] == ["```"]
    # the stops are the tokenizer's EOS and one token per stop string; a stop of several tokens is refused
    tok = build_toy_tokenizer()
    one = tok.convert_ids_to_tokens(7)
    assert bench.stop_token_ids(tok, [one]) == [tok.eos_token_id, 7]
    with pytest.raises(ValueError, match="single-token stops"):
        bench.stop_token_ids(tok, [one + one])
    assert bench.with_stops({"batch": 8}, "unused") == {"batch": 8}


def test_coding_metrics_count_helper_calls_and_codebleu_for_team_and_single_policy(bench: Any) -> None:
    """Per joint action: main refers to `aux` (0/1), the helper makes tests pass (0/1), CodeBLEU against the
    reference program; the single policy's one code block is split and scored the same way."""
    task = bench.coding_task()
    row = next(r for r in task.eval_rows("train", 16) if r["entry_point"] == "squares")
    helper = "def aux(x):\n    return x * x\n```"
    calls = "def squares(numbers):\n    return [aux(n) for n in numbers]\n```"
    inline = "def squares(numbers):\n    return [n * n for n in numbers]\n```"
    team = bench.joint_action_means(task.metrics(task.env(False)), [[helper, helper], [calls, inline]], [row])
    assert (team["main_calls_helper"], team["helper_used"]) == (0.5, 0.5) and 0 < team["codebleu"] < 1
    single = [[helper.replace("```", "") + "\n" + calls, helper.replace("```", "") + "\n" + inline]]
    central = bench.joint_action_means(task.metrics(task.env(True)), single, [row])
    assert (central["main_calls_helper"], central["helper_used"]) == (0.5, 0.5)
    assert central["codebleu"] == pytest.approx(team["codebleu"])  # the same programs


def test_coding_private_single_policy_reads_the_rule_and_is_scored_as_the_team(bench: Any) -> None:
    """coding_private's single policy sees the rule (the rows' helper contract) and writes both functions in one
    block; a program scores and passes exactly as the same program written by the team, and its metrics (helper use,
    each part with the reference partner) are the team's."""
    from trl_marl.envs import CentralizedCodingEnv

    task = bench.coding_private_task()
    row = next(r for r in task.eval_rows("train", 16) if r["entry_point"] == "coded_sum")
    central = task.env(True)
    assert isinstance(central, CentralizedCodingEnv) and task.central
    prompt = central.agent_prompt(row, 0, None)[0]["content"]
    assert row["rule"] in prompt and "coded_sum" in prompt
    assert "coded_sum" not in task.env(False).agent_prompt(row, 0, None)[-2]["content"]  # the team's helper: rule only
    expression = row["helper_solution"].split("return ")[1]
    helper, main = f"{expression}\n```", "def coded_sum(numbers: list):\n    return sum(aux(x) for x in numbers)\n```"
    wrong = "def coded_sum(numbers: list):\n    return sum(numbers)\n```"
    team = [[helper, helper], [main, wrong]]
    single = [[f"def aux(x):\n    return {expression}\n\n{main}", f"def aux(x):\n    return {expression}\n\n{wrong}"]]
    for score in (task.reward, task.success):
        team_scores = score(task.env(False))(prompts=[None] * 2, completions=team[0], agent_completions=team,
                                             **{k: [row[k]] * 2 for k in row})
        single_scores = score(central)(prompts=[None] * 2, completions=single[0], agent_completions=single,
                                       **{k: [row[k]] * 2 for k in row})
        assert single_scores == pytest.approx(team_scores) and team_scores[0] > team_scores[1]
    by_team = bench.joint_action_means(task.metrics(task.env(False)), team, [row])
    by_single = bench.joint_action_means(task.metrics(central), single, [row])
    assert by_single == pytest.approx(by_team) and by_team["main_calls_helper"] == 0.5
    assert bench.settings_for(bench.parse_args(["magrpo", "--task", "coding_private"]))["sizes"][
        "central_completion"] == 128


def test_coding_private_mixed_draws_each_form_a_third_of_the_time_and_holds_its_rules_out(bench: Any) -> None:
    """The seventh design draws a form, then a rule of it: the rare square form is a third of training batches
    (7% of the rows), the pilot's training rows are balanced the same way, and held-out rows are the mixed set's."""
    task = bench.TASKS["coding_private_mixed"]()
    assert task.name == "coding_private_mixed" and bench.TASKS["coding_private"]().name == "coding_private"
    rows = task.train_rows(3000, 0)
    share = {f: sum(r["family"] == f for r in rows) / len(rows) for f in ("x * k + c", "x * x + c", "x * k % c")}
    assert all(abs(v - 1 / 3) < 0.04 for v in share.values()), share
    assert task.train_rows(16, 5) == task.train_rows(16, 5) != task.train_rows(16, 6)  # seeded
    pilot = task.eval_rows("train", 16)
    assert len(pilot) == 16 and len({r["family"] for r in pilot}) == 3
    held = {r["rule"] for r in task.eval_rows("heldout", 16)}
    assert "square `x`, then add 9" in held and not held & {r["rule"] for r in rows}


class FakeTrainer:
    """Stands in for MAGRPOTrainer: `train()` sets a marker on its team, so evaluations show when they ran."""

    def __init__(self, log: list, arm: str, frozen: list[int]) -> None:
        self.arm, self.frozen, self.log = arm, frozen, log
        self.team = SimpleNamespace(trained=False, arm=arm, frozen=frozen)
        self.state = SimpleNamespace(global_step=0, log_history=[])

    def train(self) -> None:
        self.log.append(("train", self.arm, tuple(self.frozen)))
        self.team.trained = True
        self.state.global_step = 2
        self.state.log_history = [{"reward": -0.3}, {"reward": 0.1}]


def test_magrpo_arms_wiring(bench: Any) -> None:
    log: list = []
    task = bench.Task("fake", env=None, reward=None, train_rows=None,
                      eval_rows=lambda split, count: [{"split": split}] * count)

    def build(task_: Any, arm: str, seed: int, steps: int, sizes: dict, output_dir: str, model: str,
              frozen: Any = ()) -> Any:
        assert task_ is task
        log.append(("build", arm, tuple(frozen)))
        return FakeTrainer(log, arm, list(frozen))

    def evaluate(task_: Any, team: Any, central: bool, rows: list, seed: int, length: int) -> dict:
        log.append(("eval", getattr(team, "arm", "paired"), getattr(team, "trained", None), central,
                    rows[0]["split"], len(rows), length))
        return {"success": 1.0 if getattr(team, "trained", True) else 0.0, "reward": 0.5}

    def pair(trainers: list) -> Any:
        assert [t.frozen for t in trainers] == [[1], [0]] and all(t.team.trained for t in trainers)
        return SimpleNamespace(arm="paired", trained=True)

    sizes = {"completion": 3, "central_completion": 24, "eval_rows": 5}
    run = bench.run_magrpo_seed(task, 3, 2, sizes, bench.ARMS, "/tmp/x", "m", build=build, evaluate=evaluate,
                                pair=pair)
    assert [e for e in log if e[0] != "eval"] == [
        ("build", "team", ()), ("train", "team", ()),
        ("build", "alone", (1,)), ("train", "alone", (1,)), ("build", "alone", (0,)), ("train", "alone", (0,)),
        ("build", "central", ()), ("train", "central", ()),
    ]
    evals = [e for e in log if e[0] == "eval"]
    assert evals[0] == ("eval", "team", False, False, "heldout", 5, 3)  # the untrained team, held-out first
    assert evals[1] == ("eval", "team", False, False, "train", 5, 3)
    assert ("eval", "central", False, True, "heldout", 5, 24) in evals  # untrained central, its own length
    assert run["untrained"]["heldout"]["success"] == 0.0 and run["central_untrained"]["heldout"]["success"] == 0.0
    for arm in ("team", "alone", "central"):
        assert run[arm]["heldout"]["success"] == 1.0  # measured after train()
    assert run["team"]["reward_curve"] == [-0.3, 0.1] and run["team"]["steps"] == 2
    assert len(run["alone"]["agents"]) == 2


def test_eval_splits_heldout_measures_only_heldout_rows(bench: Any) -> None:
    seen: list = []
    task = bench.Task("fake", env=None, reward=None, train_rows=None,
                      eval_rows=lambda split, count: [{"split": split}] * count)

    def build(task_: Any, arm: str, seed: int, steps: int, sizes: dict, output_dir: str, model: str,
              frozen: Any = ()) -> Any:
        return FakeTrainer([], arm, list(frozen))

    def evaluate(task_: Any, team: Any, central: bool, rows: list, seed: int, length: int) -> dict:
        seen.append(rows[0]["split"])
        return {"success": 0.25, "reward": 0.5}

    sizes = {"completion": 3, "central_completion": 24, "eval_rows": 5}
    run = bench.run_magrpo_seed(task, 0, 2, sizes, ["team"], "/tmp/x", "m", build=build, evaluate=evaluate,
                                eval_splits=["heldout"])
    assert seen == ["heldout", "heldout"]  # untrained, then trained: no training-row evaluation
    assert set(run["untrained"]) == {"heldout"} and "train_rows" not in run["team"]
    summary = bench.summarize("magrpo", [run])
    assert summary["team/heldout/success"]["mean"] == 0.25 and not any("train_rows" in k for k in summary)
    assert "train" not in bench.brief("magrpo", run)["team"]
    assert bench.parse_args(["magrpo", "--eval-splits", "heldout"]).eval_splits == ["heldout"]


def test_brief_reads_the_splits_a_run_measured(bench: Any) -> None:
    """A run evaluated on training rows only (a pilot of a new arm) gets its line too (it raised KeyError)."""
    train_only = {"seed": 3, "central": {"train_rows": {"success": 0.125, "reward": 0.25, "metrics": {"same": 0.5}},
                                         "s_per_step": 50.04}}
    assert bench.brief("magrpo", train_only) == {"seed": 3, "central": {"train": 0.125, "train_reward": 0.25,
                                                                        "train_same": 0.5, "s_per_step": 50.0}}
    both = {"seed": 0, "team": {"heldout": {"success": 0.5, "reward": 0.75, "metrics": {"same": None}},
                                "train_rows": {"success": 0.25, "reward": 0.5}}}
    assert bench.brief("magrpo", both)["team"] == {"heldout": 0.5, "heldout_reward": 0.75, "heldout_same": None,
                                                   "train": 0.25, "train_reward": 0.5}


def test_record_fields_and_summary(bench: Any, tmp_path: Path, clean_tree: None) -> None:
    def fake_seed(seed: int, settings: dict, work: str) -> dict:
        def res(x: float) -> dict:
            return {"heldout": {"success": x, "reward": 1.0}, "train_rows": {"success": x + 0.1, "reward": 1.0}}
        return {"seed": seed, "untrained": res(0.0), "team": {**res(0.2 + seed / 10), "s_per_step": 9.0}}

    out = tmp_path / "r.json"
    argv = ["magrpo", "--seeds", "0", "2", "--steps", "5", "--arms", "team", "--output", str(out)]
    bench.main(argv, run_seed=fake_seed)
    record = json.loads(out.read_text())
    assert record["command"] == "python benchmarks/learning/learning_real.py " + " ".join(argv)
    assert set(record) >= {"commit", "machine", "model", "settings", "seeds", "runs", "summary", "seconds"}
    assert record["seeds"] == [0, 2] and record["model"] == "smollm2-135m-instruct"
    assert record["settings"]["steps"] == 5 and record["settings"]["task"] == "split"
    assert record["summary"]["team/heldout/success"] == pytest.approx(
        {"mean": 0.3, "std": 0.1414213, "min": 0.2, "max": 0.4}, abs=1e-6)
    assert record["summary"]["untrained/heldout/success"]["mean"] == 0.0
    assert "alone/heldout/success" not in record["summary"]
    assert record["commit"] == CLEAN["commit"] and record["dirty"] is False and record["dirty_paths"] == []


def test_smoke_settings(bench: Any) -> None:
    settings = bench.settings_for(bench.parse_args(["maporl", "--smoke", "--steps", "50"]))
    assert settings["steps"] == 1 and settings["sizes"]["eval_rows"] == 6 and settings["sizes"]["response"] == 8
    assert settings["sizes"]["value_layers"] == 8
    assert bench.settings_for(bench.parse_args(["maporl", "--value-layers", "0"]))["sizes"]["value_layers"] == 0
    settings = bench.settings_for(bench.parse_args(["magrpo", "--lr", "1e-4", "--task", "target_sum"]))
    assert settings["steps"] == 60 and settings["sizes"]["lr"] == 1e-4 and settings["sizes"]["eval_rows"] == 24
    assert settings["task"] == "target_sum"


# ------------------------------------------------------------------------------------------------------ MAPoRL
def eval_metrics(debates: list[tuple[list[list[str]], list[list[bool]]]]) -> dict[str, float]:
    """`evaluate()`'s flat metrics of hand-made debates (`answers[t][a]`, `correct[t][a]`)."""
    from trl_marl.evaluation import DebateEvaluation

    evaluation = DebateEvaluation()
    for answers, correct in debates:
        evaluation.add(answers, correct)
    return {f"eval_{k}": v for k, v in evaluation.compute().items()}


# 3 debates, 2 agents, 2 turns. Turn 1: (3, 4) both wrong; (12, 9) one right; (5, 12) one right. Turn 2: (12, 12)
# both right; (9, 9) both wrong; (12, 12) both right.
DEBATES = [
    ([["3", "4"], ["12", "12"]], [[False, False], [True, True]]),
    ([["12", "9"], ["9", "9"]], [[True, False], [False, False]]),
    ([["5", "12"], ["12", "12"]], [[False, True], [True, True]]),
]


def test_debate_metrics_per_turn_and_per_turn_change(bench: Any) -> None:
    metrics = bench.debate_metrics(eval_metrics(DEBATES))
    # majority, ties scored by expectation: turn 1 (0 + 0.5 + 0.5) / 3, turn 2 (1 + 0 + 1) / 3
    assert metrics["majority_accuracy"] == pytest.approx([1 / 3, 2 / 3])
    assert metrics["agent_accuracy"] == pytest.approx([2 / 6, 4 / 6])
    # 4 wrong answers at turn 1, 3 of them right at turn 2; 2 right answers, 1 of them wrong at turn 2
    assert metrics["w_to_r"] == [3.0] and metrics["r_to_w"] == [1.0]
    assert metrics["w_to_r_rate"] == pytest.approx([0.75]) and metrics["r_to_w_rate"] == pytest.approx([0.5])
    # no right answer at turn 1: the right->wrong rate has nothing to divide by and is None (not NaN) in the record
    none_right = bench.debate_metrics(eval_metrics([DEBATES[0]]))
    assert none_right["r_to_w_rate"] == [None] and none_right["w_to_r_rate"] == [1.0]


def test_debate_task_and_reward_options(bench: Any) -> None:
    settings = bench.settings_for(bench.parse_args(["maporl"]))
    assert settings["task"] == "debate_1digit_addition" and settings["reward"] == "influence"
    assert settings["sizes"]["eval_rows"] == 60 and "temperature" not in settings["sizes"]
    settings = bench.settings_for(bench.parse_args(["maporl", "--debate-task", "hidden_sum", "--reward", "verifier"]))
    assert settings["task"] == "debate_hidden_sum" and settings["reward"] == "verifier"
    assert settings["sizes"]["eval_rows"] == 69 and settings["sizes"]["temperature"] == 0.7  # 23 questions x 3
    smoke = bench.settings_for(bench.parse_args(["maporl", "--debate-task", "hidden_sum", "--smoke"]))
    assert smoke["sizes"]["eval_rows"] == 6 and smoke["steps"] == 1
    with pytest.raises(SystemExit, match="use them with `maporl`"):
        bench.settings_for(bench.parse_args(["magrpo", "--reward", "verifier"]))
    with pytest.raises(SystemExit):
        bench.parse_args(["maporl", "--reward", "final"])


def test_debate_reward_ablation(bench: Any) -> None:
    from trl_marl.rewards.influence import InfluenceAwareReward
    from trl_marl.rewards.verifier import AnswerVerifier

    verifier = AnswerVerifier()
    influence, plain = bench.debate_reward("influence", verifier), bench.debate_reward("verifier", verifier)
    assert isinstance(influence, InfluenceAwareReward) and isinstance(plain, InfluenceAwareReward)
    assert (influence.mode, influence.gamma, influence.alpha0, influence.alpha1, influence.beta0, influence.beta1) == (
        "influence", 1.0, 0.5, 0.5, 0.2, 0.2)
    assert (plain.mode, plain.alpha0, plain.beta1) == ("verifier", 0.0, 0.0)
    with pytest.raises(ValueError, match="reward must be one of"):
        bench.debate_reward("final", verifier)


def test_hidden_sum_task_prompts_and_rows(bench: Any) -> None:
    from trl_marl.envs.base import Transcript

    task = bench.hidden_sum_debate_task()
    env = task.env()
    train_rows = task.train_rows(300, 0)
    row = next(r for r in train_rows if r["a"] == 4 and r["b"] == 7)
    assert env.agent_prompt(row, 0, Transcript()) == [
        {"role": "system", "content": HIDDEN_SUM_SYSTEM},
        {"role": "user", "content": "Question: What is a + b?\n\nYou know that a = 4. Only the other agent knows b."
                                    "\n\nAnswer with the number only."},
        {"role": "assistant", "content": "I know that a = 4. So a + b = 4 +"},
    ]
    second = env.agent_prompt(row, 1, Transcript().extend([" 4 = 8.", " 7 = 14."]))
    assert second[-2:] == [
        {"role": "user", "content": "You know that b = 7. Only the other agent knows a.\n\nThe other agent said:\n\n"
                                    "Agent 1: I know that a = 4. So a + b = 4 + 4 = 8.\n\nWhat is a + b? Answer with "
                                    "the number only."},
        {"role": "assistant", "content": "I know that b = 7. So a + b = 7 +"},
    ]
    trained = {(r["a"], r["b"]) for r in train_rows}
    for seed in (0, 3):
        held = {(r["a"], r["b"]) for r in task.eval_rows(69, seed)}
        assert len(held) == 23 and not held & trained and not {(b, a) for a, b in held} & trained


def test_addition_task_is_the_demo_recipe(bench: Any) -> None:
    from trl_marl.scripts.demo_real import addition_rows, addition_split, heldout_debate_rows

    task = bench.addition_debate_task()
    assert task.train_rows(20, 2) == addition_rows(addition_split(2)[0], 20, 2)
    assert task.eval_rows(9, 2) == heldout_debate_rows(2, 9)
    assert task.env().private_columns == () and task.sizes is None


class FakeDebateTrainer:
    """Stands in for MultiAgentPPOTrainer: `evaluate()` gives hand-made debates, all right after `train()`."""

    def __init__(self) -> None:
        self.trained = False
        self.state = SimpleNamespace(global_step=0, log_history=[])

    def evaluate(self) -> dict[str, float]:
        if not self.trained:
            return eval_metrics(DEBATES)
        return eval_metrics([([["12", "12"], ["12", "12"]], [[True, True], [True, True]])])

    def train(self) -> None:
        self.trained = True
        self.state.global_step = 1
        self.state.log_history = [{"objective/scores": 0.4}]


def test_maporl_seed_wiring_summary_and_brief(bench: Any) -> None:
    built = []

    def build(seed: int, steps: int, sizes: dict, output_dir: str, model: str, task: Any, reward: str) -> Any:
        built.append((seed, steps, task.name, reward))
        return FakeDebateTrainer()

    runs = [bench.run_maporl_seed(seed, 1, {}, "/tmp/x", "m", build=build, task="hidden_sum", reward="verifier")
            for seed in (0, 1)]
    assert built == [(0, 1, "hidden_sum", "verifier"), (1, 1, "hidden_sum", "verifier")]
    run = runs[0]
    assert run["before"]["majority_accuracy"] == pytest.approx([1 / 3, 2 / 3])
    assert run["before"]["w_to_r_rate"] == pytest.approx([0.75])
    assert run["after"]["majority_accuracy"] == [1.0, 1.0] and run["after"]["w_to_r_rate"] == [None]
    assert run["score_curve"] == [0.4]
    summary = bench.summarize("maporl", runs)
    assert summary["before/turn_2/majority_accuracy"]["mean"] == pytest.approx(2 / 3)
    assert summary["before/turn_1_2/r_to_w_rate"]["mean"] == pytest.approx(0.5)
    assert summary["after/turn_1_2/r_to_w_rate"]["mean"] == 0.0
    assert "after/turn_1_2/w_to_r_rate" not in summary  # no wrong answer at turn 1 after training: no rate
    brief = bench.brief("maporl", run)
    assert brief["majority_before"] == [0.333, 0.667] and brief["w_to_r_rate_before"] == [0.75]
    assert brief["r_to_w_rate_after"] == [0.0] and brief["w_to_r_rate_after"] == [None]


class FakeAloneTrainer(FakeDebateTrainer):
    """A MAPoRL trainer of the `alone` arm: records its `evaluate()` calls; after pairing (`paired`), `evaluate()`
    gives debates that are all right at turn 2 only (the trained pair), before it the untrained team's."""

    def __init__(self, frozen: tuple[int, ...]) -> None:
        super().__init__()
        self.frozen = frozen
        self.paired = False
        self.evaluations: list[tuple[bool, bool]] = []  # (trained, paired) at each call

    def evaluate(self) -> dict[str, float]:
        self.evaluations.append((self.trained, self.paired))
        if self.paired:
            return eval_metrics([([["3", "4"], ["12", "12"]], [[False, False], [True, True]])])
        return super().evaluate()


def alone_wiring(bench: Any, arms: tuple[str, ...]) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """One seed of `run_maporl_seed` with fake trainers: the run, the trainers built, what `pair` got."""
    built: list[Any] = []
    paired: list[Any] = []

    def build(seed: int, steps: int, sizes: dict, output_dir: str, model: str, task: Any, reward: str,
              frozen: tuple[int, ...] = ()) -> Any:
        trainer = FakeAloneTrainer(tuple(frozen))
        trainer.where = (seed, steps, Path(output_dir).name, task.name, reward)
        built.append(trainer)
        return trainer

    def pair(trainers: list[Any]) -> Any:
        assert all(t.trained for t in trainers)  # paired after both trained
        paired.extend(trainers)
        trainers[0].paired = True
        return trainers[0]

    run = bench.run_maporl_seed(3, 2, {}, "/tmp/x", "m", build=build, task="hidden_sum", reward="influence",
                                arms=arms, pair=pair)
    return run, built, paired


def test_maporl_alone_arm_trains_each_agent_with_its_partner_frozen_then_pairs_them(bench: Any) -> None:
    run, built, paired = alone_wiring(bench, ("alone",))
    # two trainers, same seed and budget: agent 0 trained with agent 1 frozen, then the reverse
    assert [(t.where, t.frozen) for t in built] == [((3, 2, "maporl3_alone0", "hidden_sum", "influence"), (1,)),
                                                    ((3, 2, "maporl3_alone1", "hidden_sum", "influence"), (0,))]
    assert all(t.trained for t in built) and paired == built
    # before: the first trainer untrained; after: the first trainer's evaluate() once agent 1's adapter is in
    assert built[0].evaluations == [(False, False), (True, True)] and built[1].evaluations == []
    assert run["before"]["majority_accuracy"] == pytest.approx([1 / 3, 2 / 3])
    assert run["after"]["majority_accuracy"] == [0.0, 1.0] and run["after"]["w_to_r_rate"] == [1.0]
    # alone only: its values are the run's top-level ones (what `summarize` and `brief` read)
    assert "alone" not in run and len(run["agents"]) == 2
    assert run["updates"] == 2 and run["score_curve"] == [[0.4], [0.4]]
    assert run["train_seconds"] == pytest.approx(sum(a["train_seconds"] for a in run["agents"]))
    assert bench.summarize("maporl", [run])["after/turn_2/majority_accuracy"]["mean"] == 1.0
    assert bench.brief("maporl", run)["majority_after"] == [0.0, 1.0]


def test_maporl_team_and_alone_arms_in_one_run(bench: Any) -> None:
    run, built, paired = alone_wiring(bench, ("team", "alone"))
    assert [(t.where[2], t.frozen) for t in built] == [("maporl3", ()), ("maporl3_alone0", (1,)),
                                                       ("maporl3_alone1", (0,))]
    assert paired == built[1:]
    # the untrained team is measured once, on the team trainer; the team's values stay top-level, as before
    assert built[0].evaluations == [(False, False), (True, False)] and built[1].evaluations == [(True, True)]
    assert run["after"]["majority_accuracy"] == [1.0, 1.0] and run["score_curve"] == [0.4]
    assert run["alone"]["after"]["majority_accuracy"] == [0.0, 1.0] and len(run["alone"]["agents"]) == 2
    with pytest.raises(ValueError, match="MAPoRL arms must be some of"):
        bench.run_maporl_seed(0, 1, {}, "/tmp/x", "m", build=lambda *a, **k: None, arms=("central",))


def test_maporl_default_arm_keeps_the_record(bench: Any) -> None:
    run, built, paired = alone_wiring(bench, ("team",))
    assert set(run) == {"seed", "before", "after", "train_seconds", "updates", "s_per_step", "score_curve"}
    assert [(t.where[2], t.frozen) for t in built] == [("maporl3", ())] and paired == []
    assert bench.parse_args(["maporl"]).arms == ["team"]
    assert bench.settings_for(bench.parse_args(["maporl"]))["arms"] == ["maporl"]
    assert bench.settings_for(bench.parse_args(["maporl", "--arms", "alone"]))["arms"] == ["alone"]
    assert bench.parse_args(["magrpo"]).arms == ["team", "alone", "central"]
    with pytest.raises(SystemExit):
        bench.parse_args(["maporl", "--arms", "central"])


def test_threads_option_is_what_the_trainers_use(bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 clean_tree: None) -> None:
    """`--threads N` must reach the trainers, whose own choice (one thread per core for a 135M model) respects only an
    explicit OMP_NUM_THREADS (`trl_marl.utils.threads.choose_cpu_threads`)."""
    import torch

    from trl_marl.utils.threads import choose_cpu_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "")  # unset for the thread choice; restored after the test
    seen = {}

    def fake_seed(seed: int, settings: dict, work: str) -> dict:
        seen["choice"], seen["torch"] = choose_cpu_threads(135_000_000, cores=2)[0], torch.get_num_threads()
        result = {"heldout": {"success": 0.0, "reward": 1.0}, "train_rows": {"success": 0.0, "reward": 1.0}}
        return {"seed": seed, "untrained": result, "team": result}

    previous = torch.get_num_threads()
    try:
        bench.main(["magrpo", "--seeds", "0", "--threads", "1", "--arms", "team", "--output",
                    str(tmp_path / "r.json")], run_seed=fake_seed)
    finally:
        torch.set_num_threads(previous)
    assert seen["choice"] is None and seen["torch"] == 1  # the trainers leave the harness's one thread alone


def test_a_run_cut_short_keeps_the_seeds_it_finished(bench: Any, tmp_path: Path, clean_tree: None) -> None:
    def fake_seed(seed: int, settings: dict, work: str) -> dict:
        if seed == 2:
            raise KeyboardInterrupt  # the run is cut off during its second seed
        result = {"heldout": {"success": 0.5, "reward": 0.7}, "train_rows": {"success": 0.5, "reward": 0.7}}
        return {"seed": seed, "untrained": result, "team": result}

    out = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["magrpo", "--seeds", "0", "2", "--arms", "team", "--output", str(out)], run_seed=fake_seed)
    record = json.loads(out.read_text())
    assert record["seeds"] == [0] and record["summary"]["team/heldout/success"]["mean"] == 0.5


# ------------------------------------------------------------------------------------------------------ provenance
def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_git_state_sees_every_change_but_results(tmp_path: Path) -> None:
    """Tracked edits and new files anywhere make the tree dirty; records under benchmarks/results/ never do."""
    git_state = load_script(PATH.parents[1] / "provenance.py").git_state
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "benchmarks" / "results" / "r.json").write_text("{}")  # a record not yet committed
    (repo / "run.log").write_text("ignored")
    assert git_state(repo) == {"commit": head, "dirty": False, "dirty_paths": []}
    (repo / "src" / "a.py").write_text("x = 2\n")
    (repo / "src" / "b.py").write_text("")  # a new module the run would import
    assert git_state(repo) == {"commit": head, "dirty": True, "dirty_paths": ["src/a.py", "src/b.py"]}
    assert git_state(tmp_path / "nowhere") == {"commit": "unknown", "dirty": None, "dirty_paths": []}


def test_a_dirty_tree_is_refused_unless_allowed(bench: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record names the commit read when the run STARTED (a later reading, after the code changed under a
    long run, must not replace it), and a dirty tree is refused before any seed runs unless `--allow-dirty`."""
    readings = iter([{"commit": "a" * 40, "dirty": True, "dirty_paths": ["src/x.py"]},
                     {"commit": "b" * 40, "dirty": False, "dirty_paths": []}])
    monkeypatch.setattr(bench, "git_state", lambda: next(readings))
    ran = []

    def fake_seed(seed: int, settings: dict, work: str) -> dict:
        ran.append(seed)
        result = {"heldout": {"success": 0.5, "reward": 0.7}, "train_rows": {"success": 0.5, "reward": 0.7}}
        return {"seed": seed, "untrained": result, "team": result}

    out = tmp_path / "r.json"
    argv = ["magrpo", "--seeds", "0", "1", "--arms", "team", "--output", str(out)]
    with pytest.raises(SystemExit, match=r"differs from commit aaaaaaaaaaaa \(src/x.py\).*--allow-dirty"):
        bench.main(argv, run_seed=fake_seed)
    assert ran == [] and not out.exists()
    readings = iter([{"commit": "a" * 40, "dirty": True, "dirty_paths": ["src/x.py"]},
                     {"commit": "b" * 40, "dirty": False, "dirty_paths": []}])
    bench.main([*argv, "--allow-dirty"], run_seed=fake_seed)
    record = json.loads(out.read_text())
    assert ran == [0, 1]
    assert (record["commit"], record["dirty"], record["dirty_paths"]) == ("a" * 40, True, ["src/x.py"])
    assert record["command"].endswith("--allow-dirty")


def test_coding_division_task_rows_metrics_and_no_central_arm(bench: Any) -> None:
    """The division-of-labour coding task trains on training families only, scores success by the pass rate (its
    tests check both functions) and logs each agent's choice and collisions; it has no single-policy arm."""
    from trl_marl.data.team_coding import division_coding_rows
    from trl_marl.envs.coding_division import DivisionCodingEnv

    task = bench.coding_division_task()
    held = {r["task_id"] for r in division_coding_rows("heldout")}
    assert not held & {r["task_id"] for r in task.train_rows(200, 0)}
    assert {r["task_id"] for r in task.eval_rows("heldout", 8)} == held
    env = task.env(False)
    assert isinstance(env, DivisionCodingEnv) and not task.central
    with pytest.raises(ValueError, match="no centralised arm"):
        task.env(True)
    assert {"agent_0_helper", "agent_1_main", "collision", "main_calls_helper"} <= set(task.metrics(env))
    with pytest.raises(SystemExit, match="no centralised arm"):
        bench.settings_for(bench.parse_args(["magrpo", "--task", "coding_division"]))
    settings = bench.settings_for(bench.parse_args(["magrpo", "--task", "coding_division", "--arms", "team", "alone",
                                                    "--teamwork"]))
    assert settings["teamwork"] is True and settings["sizes"]["stop"] == ["```"]


def test_teamwork_evaluation_of_each_two_agent_arm(bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `--teamwork`, the trained team and the paired alone agents get a teamwork evaluation on held-out rows,
    after training; the untrained team and the central policy do not."""
    seen: list = []
    task = bench.Task("fake", env=None, reward=None, train_rows=None,
                      eval_rows=lambda split, count: [{"split": split}] * count)

    def build(task_: Any, arm: str, seed: int, steps: int, sizes: dict, output_dir: str, model: str,
              frozen: Any = ()) -> Any:
        return FakeTrainer([], arm, list(frozen))

    def teamwork(task_: Any, team: Any, rows: list, seed: int, length: int) -> dict:
        seen.append((getattr(team, "arm", "paired"), getattr(team, "trained", None), rows[0]["split"], seed))
        return {"conditions": {"team": {"score": 1.0}}}

    monkeypatch.setattr(bench, "teamwork_task", teamwork)
    sizes = {"completion": 3, "central_completion": 24, "eval_rows": 5}
    run = bench.run_magrpo_seed(task, 3, 2, sizes, bench.ARMS, "/tmp/x", "m", build=build,
                                evaluate=lambda *a: {"success": 1.0, "reward": 0.5},
                                pair=lambda trainers: SimpleNamespace(arm="paired", trained=True),
                                eval_splits=("heldout",), teamwork_eval=True)
    assert seen == [("team", True, "heldout", 10_003), ("paired", True, "heldout", 10_003)]
    assert run["team"]["teamwork"] == run["alone"]["teamwork"] == {"conditions": {"team": {"score": 1.0}}}
    assert "teamwork" not in run["central"]


def test_writing_symmetric_task_rows_rewards_and_metrics(bench: Any) -> None:
    """The symmetric writing task (issue 55, design b1): the writing task's texts and held-out split, both writers on
    the same instruction, `SymmetricWritingTeamReward` trained on, success at `WRITING_SUCCESS` of it, the
    length-class metrics, no centralised arm; a pair that splits the roles succeeds and a colliding pair does not."""
    from trl_marl.data.team_writing import team_writing_rows
    from trl_marl.envs import Transcript
    from trl_marl.envs.writing import SymmetricWritingEnv
    from trl_marl.rewards.writing_variants import SymmetricWritingTeamReward

    task, writing = bench.writing_symmetric_task(), bench.writing_task()
    held = {r["text"] for r in team_writing_rows("heldout")}
    assert not held & {r["text"] for r in task.train_rows(300, 0)}
    assert task.eval_rows("heldout", 16) == writing.eval_rows("heldout", 16) and task.sizes == writing.sizes
    env = task.env(False)
    assert isinstance(env, SymmetricWritingEnv) and not task.central
    with pytest.raises(ValueError, match="no centralised arm"):
        task.env(True)
    row = task.eval_rows("heldout", 1)[0]
    prompts = [env.render(row, i, Transcript()) for i in (0, 1)]
    texts = [p if isinstance(p, str) else p[-1]["content"] for p in prompts]
    assert texts[0] != texts[1] and texts[0].replace("writer 1", "writer 2") == texts[1]
    assert isinstance(task.reward(env), SymmetricWritingTeamReward)
    assert set(task.metrics(env)) == {"team_reward", "agent_0_short", "agent_1_short", "same_length_class"}
    source = row["text"]
    words = [w.strip(".,;:()`'\"") for w in source.split() if len(w) > 3][:40]
    short = " ".join(words[:10]) + "."
    long = " ".join((words * 3)[:45]) + "."
    pairs = {"split": [[short], [long]], "collide": [[long], [long]]}
    scores = {name: task.reward(env)(prompts=[None], completions=pair[0], agent_completions=pair, text=[source])[0]
              for name, pair in pairs.items()}
    assert scores["split"] > scores["collide"]  # splitting the roles pays more than both writing long
    assert task.success(env)(prompts=[None], completions=[long], agent_completions=pairs["collide"],
                             text=[source]) == [0.0]


def test_writing_halves_task_rows_prompts_reward_and_success(bench: Any) -> None:
    """The halves task (issue 55): the writing task's texts and split, only texts whose halves each have three content
    words of their own, identical prompts but the writer's number, `HalvesTeamReward` trained on, success above the
    0.5 a colliding pair can reach, the choice metrics, no centralised arm."""
    from trl_marl.data.team_writing import team_writing_rows
    from trl_marl.envs import Transcript
    from trl_marl.envs.writing_halves import HalvesWritingEnv, split_halves
    from trl_marl.rewards.writing_halves import HalvesTeamReward
    from trl_marl.rewards.writing_source import content_words

    task = bench.writing_halves_task()
    held = {r["text"] for r in team_writing_rows("heldout")}
    train = task.train_rows(400, 0)
    assert not held & {r["text"] for r in train} and len({r["text"] for r in train}) > 100
    heldout = task.eval_rows("heldout", 100)
    assert {r["text"] for r in heldout} <= held and len(heldout) == 44
    for row in heldout + train:
        first, second = (set(content_words(h)) for h in split_halves(row["text"]))
        assert len(first - second) >= 3 and len(second - first) >= 3
    assert task.eval_rows("heldout", 16) == heldout[:16] and task.sizes["completion"] == 48
    env = task.env(False)
    assert isinstance(env, HalvesWritingEnv) and not task.central and isinstance(task.reward(env), HalvesTeamReward)
    with pytest.raises(ValueError, match="no centralised arm"):
        task.env(True)
    prompts = [env.agent_prompt(heldout[0], i, Transcript()) for i in (0, 1)]
    assert prompts[0][0]["content"].replace("writer 1", "writer 2") == prompts[1][0]["content"]
    assert set(task.metrics(env)) == {"team_reward", "agent_0_first", "agent_0_second", "agent_1_first",
                                      "agent_1_second", "same_half", "agent_0_first_score", "agent_0_second_score",
                                      "agent_1_first_score", "agent_1_second_score"}
    text = heldout[0]["text"]
    halves = split_halves(text)
    answers = [f" {name} half: " + " ".join(half.split()[:12]) for name, half in zip(("first", "second"), halves)]
    split, collide = [[answers[0]], [answers[1]]], [[answers[0]], [answers[0]]]
    assert bench.HALVES_SUCCESS > 0.5
    assert task.success(env)(prompts=[None], completions=split[0], agent_completions=split, text=[text]) == [1.0]
    assert task.success(env)(prompts=[None], completions=collide[0], agent_completions=collide, text=[text]) == [0.0]


@pytest.mark.parametrize("name, prefill", [("writing_halves_decide", "I summarize part"),
                                           ("writing_halves_summary", "Summary of part"),
                                           ("writing_halves_summary_options", "Summary of part")])
def test_writing_halves_decide_is_the_rule_divisions_design_on_the_halves(bench: Any, name: str, prefill: str) -> None:
    """Designs 6 and 7: numbered parts, the decision naming part 2 first, the prefill up to the number, and a collision
    paying nothing in training, success and the teamwork score alike; rows and sizes as `writing_halves`."""
    from trl_marl.envs import Transcript
    from trl_marl.envs.writing_halves import split_halves

    base, task = bench.writing_halves_task(), bench.TASKS[name]()
    assert task.eval_rows("heldout", 16) == base.eval_rows("heldout", 16) and task.sizes == base.sizes
    env = task.env(False)
    row = task.eval_rows("heldout", 1)[0]
    prompt = env.agent_prompt(row, 1, Transcript())
    assert prompt[1]["content"] == prefill and "Part 1:\n" in prompt[0]["content"]
    assert "You are writer 2: decide whether you summarize part 2 or part 1" in prompt[0]["content"]
    text = row["text"]
    answers = [f" {n}: " + " ".join(half.split()[:12]) for n, half in zip((1, 2), split_halves(text))]
    for function in (task.reward(env), task.success(env)):
        split = function(prompts=[None], completions=[answers[0]], agent_completions=[[answers[0]], [answers[1]]],
                         text=[text])
        collide = function(prompts=[None], completions=[answers[0]], agent_completions=[[answers[0]], [answers[0]]],
                           text=[text])
        assert split[0] > 0.5 and collide == [0.0]


def test_halves_design_8_has_a_single_policy_arm_scored_as_the_team(bench: Any) -> None:
    """Design 8's single policy writes both headed summaries in one completion; the trained reward, success and the
    metrics score its two parts as a team's two answers (a completion without the second heading earns 0); the
    other numbered designs keep no centralised arm."""
    from trl_marl.envs.writing_halves import CentralizedHalvesEnv, split_halves

    task = bench.TASKS["writing_halves_summary_options"]()
    assert task.central and task.sizes["central_completion"] == 2 * task.sizes["completion"]
    env, team_env = task.env(True), task.env(False)
    assert isinstance(env, CentralizedHalvesEnv) and env.env.instruction == team_env.instruction
    row = task.eval_rows("heldout", 1)[0]
    text = row["text"]
    parts = [" ".join(half.split()[:12]) for half in split_halves(text)]
    completions = [f" {parts[0]}\nSummary of part 2: {parts[1]}", f" {parts[0]} {parts[1]}"]
    team = [[f" 1: {parts[0]}"], [f" 2: {parts[1]}"]]
    expected = task.reward(team_env)(prompts=[None], completions=team[0], agent_completions=team, text=[text])[0]
    for function in (task.reward(env), task.success(env)):
        assert function(prompts=[None] * 2, completions=completions, text=[text] * 2) == pytest.approx([expected, 0.0])
    metrics = task.metrics(env)
    assert set(metrics) == set(task.metrics(team_env))
    assert metrics["agent_1_second"](prompts=[None] * 2, completions=completions, text=[text] * 2) == [1.0, 0.0]
    assert not bench.TASKS["writing_halves_summary"]().central


def test_writing_halves_second_first_changes_only_the_start_clause(bench: Any) -> None:
    from trl_marl.envs import Transcript

    base, variant = bench.writing_halves_task(), bench.writing_halves_second_first_task()
    row = base.eval_rows("heldout", 1)[0]
    prompts = [task.env(False).agent_prompt(row, 1, Transcript())[0]["content"] for task in (base, variant)]
    assert prompts[1] == prompts[0].replace(bench.HALVES_START_CLAUSE, bench.HALVES_START_SECOND_FIRST) != prompts[0]
    assert variant.eval_rows("heldout", 16) == base.eval_rows("heldout", 16) and variant.sizes == base.sizes


def test_writing_halves_no_clause_drops_only_the_start_clause(bench: Any) -> None:
    from trl_marl.envs import Transcript

    base, variant = bench.writing_halves_task(), bench.writing_halves_no_clause_task()
    row = base.eval_rows("heldout", 1)[0]
    prompts = [task.env(False).agent_prompt(row, 0, Transcript()) for task in (base, variant)]
    assert prompts[1][0]["content"] == prompts[0][0]["content"].replace(" " + bench.HALVES_START_CLAUSE, "")
    assert bench.HALVES_START_CLAUSE not in prompts[1][0]["content"] and prompts[1][1] == prompts[0][1]  # prefill
    assert variant.eval_rows("heldout", 16) == base.eval_rows("heldout", 16) and variant.sizes == base.sizes


def test_coding_division_stub_tasks_change_only_the_prompt_prefill_and_temperature(bench: Any) -> None:
    """`coding_division_stubs` is `coding_division` with the stubs template and the answer prefilled up to `def`;
    `_t1` is that at T = 1; rows, sizes otherwise and metrics are the division task's."""
    from trl_marl.envs.coding_division import STUBS_DIVISION_TEMPLATE

    base, stubs = bench.coding_division_task(), bench.coding_division_stubs_task()
    hot = bench.coding_division_stubs_t1_task()
    env = stubs.env(False)
    assert env.division_template == STUBS_DIVISION_TEMPLATE and env.code_prefill == "```python\ndef"
    assert hot.env(False).code_prefill == "```python\ndef" and not stubs.central and not hot.central
    assert stubs.sizes == base.sizes and hot.sizes == {**base.sizes, "temperature": 1.0}
    assert stubs.train_rows(20, 3) == base.train_rows(20, 3) and stubs.eval_rows("heldout", 8) == base.eval_rows(
        "heldout", 8)
    assert set(stubs.metrics(env)) == set(base.metrics(base.env(False)))
    coding_pilot = load_script(PATH.with_name("coding_pilot.py"))
    m = {"agent_0_helper": 0.30, "agent_0_main": 0.055, "agent_1_helper": 0.22, "agent_1_main": 0.0625}
    gates = coding_pilot.task_gates("coding_division_stubs", m)
    assert gates["named"] == pytest.approx({0: 0.355, 1: 0.2825}) and gates["same_bias"]
    assert gates["helper_to_main"] == pytest.approx({0: 0.30 / 0.055, 1: 3.52}) and not gates["passes"]
    m = {"agent_0_helper": 0.25, "agent_0_main": 0.15, "agent_1_helper": 0.30, "agent_1_main": 0.12}
    assert coding_pilot.task_gates("coding_division_stubs_t1", m)["passes"]  # 1.67 and 2.5 to 1, minority >= 0.1
    assert not coding_pilot.task_gates("coding_division_stubs", {**m, "agent_1_main": 0.35})["passes"]  # no bias


def test_halves_pilot_gates_of_design_4(bench: Any) -> None:
    """The pilot's design-4 gates by hand: exploration (the minority half >= 0.1 per writer) and balance (second-half
    summaries score at least 0.7 of first-half ones, pooled by how often each writer chose each half)."""
    coding_pilot = load_script(PATH.with_name("coding_pilot.py"))
    m = {"agent_0_first": 0.6, "agent_0_second": 0.3, "agent_1_first": 0.7, "agent_1_second": 0.2,
         "agent_0_first_score": 0.5, "agent_0_second_score": 0.3, "agent_1_first_score": 0.4,
         "agent_1_second_score": 0.5}
    gates = coding_pilot.task_gates("writing_halves_no_clause", m)
    first = (0.6 * 0.5 + 0.7 * 0.4) / 1.3
    second = (0.3 * 0.3 + 0.2 * 0.5) / 0.5
    assert gates["half_score"] == pytest.approx({"first": first, "second": second})
    assert gates["second_to_first_score"] == pytest.approx(second / first)  # 0.38 / 0.446 = 0.85
    assert gates["minority"] == {0: 0.3, 1: 0.2} and gates["passes"]
    assert not coding_pilot.task_gates("writing_halves", {**m, "agent_1_second": 0.05})["passes"]  # exploration
    assert not coding_pilot.task_gates("writing_halves", {**m, "agent_1_second_score": 0.1})["passes"]  # balance
    assert not coding_pilot.task_gates("writing_halves", {**m, "agent_1_first": 0.25})["passes"]  # no bias biases


def test_writing_halves_named_variants_change_only_the_label_and_the_clause(bench: Any) -> None:
    from trl_marl.envs import Transcript

    base = bench.writing_halves_task()
    row = base.eval_rows("heldout", 1)[0]
    user = [base.env(False).agent_prompt(row, i, Transcript())[0]["content"] for i in (0, 1)]
    for task, clause in ((bench.writing_halves_named_task(), bench.HALVES_START_CLAUSE),
                         (bench.writing_halves_named_second_first_task(), bench.HALVES_START_SECOND_FIRST)):
        for i, name in enumerate(bench.HALVES_NAMES):
            text = task.env(False).agent_prompt(row, i, Transcript())[0]["content"]
            expected = user[i].replace(f"You are writer {i + 1}.", f"Your name is {name}.")
            assert text == expected.replace(bench.HALVES_START_CLAUSE, clause), task.name
        assert task.eval_rows("heldout", 16) == base.eval_rows("heldout", 16) and task.sizes == base.sizes


def test_writing_halves_bonus_trains_on_the_bonus_and_measures_the_share(bench: Any) -> None:
    from trl_marl.envs import Transcript
    from trl_marl.envs.writing_halves import split_halves

    task, named = bench.writing_halves_bonus_task(), bench.writing_halves_named_second_first_task()
    row = task.eval_rows("heldout", 1)[0]
    assert [task.env(False).agent_prompt(row, i, Transcript()) for i in (0, 1)] == [
        named.env(False).agent_prompt(row, i, Transcript()) for i in (0, 1)]
    env = task.env(False)
    text = row["text"]
    halves = split_halves(text)
    answers = [f" {name} half: " + " ".join(half.split()[:12]) for name, half in zip(("first", "second"), halves)]
    split = [[answers[0]], [answers[1]]]
    trained = task.reward(env)(prompts=[None], completions=split[0], agent_completions=split, text=[text])
    share = named.reward(env)(prompts=[None], completions=split[0], agent_completions=split, text=[text])
    assert task.reward(env).split_bonus == bench.HALVES_SPLIT_BONUS == 0.5 and named.reward(env).split_bonus == 0
    assert trained == pytest.approx([0.5 * share[0] + 0.5])  # both copied halves score above the gate
    success = task.success(env)(prompts=[None], completions=split[0], agent_completions=split, text=[text])
    assert success == named.success(env)(prompts=[None], completions=split[0], agent_completions=split, text=[text])


def test_tool_division_task_rows_tools_and_evaluation_tool_loop(bench: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools design of issue 55: training rows from training pairs, held-out rows from held-out pairs (the same
    16 for every seed), both agents with the calculator in training and in every evaluation, 2 rounds of calls."""
    from trl_marl.data.tool_relay import tool_relay_split
    from trl_marl.tools.loop import ToolLoop
    from trl_marl.toy import build_toy_chat_tokenizer

    train, heldout = (set(side) for side in tool_relay_split())
    task = bench.TASKS["tool_division_worked"]()
    assert task.name == "tool_division_worked" and not task.central and task.sizes["tool_rounds"] == 2
    assert bench.TASKS["tool_division"]().env(False).exchanges != task.env(False).exchanges  # the first design

    def pairs(rows: list) -> set:
        return {tuple(sorted((r[x], r[y]))) for r in rows for x, y in (("a", "b"), ("c", "d"))}

    assert pairs(task.train_rows(64, 0)) <= train and pairs(task.eval_rows("train", 16)) <= train
    held = task.eval_rows("heldout", 16)
    assert len(held) == 16 and pairs(held) <= heldout and held == task.eval_rows("heldout", 16)
    assert [t.__name__ for agent in task.tools() for t in agent] == ["calculator", "calculator"]
    team = SimpleNamespace(tokenizers=[build_toy_chat_tokenizer()] * 2)
    loop = bench.task_tool_loop(task, team)
    assert isinstance(loop, ToolLoop) and loop.max_iterations == 2
    assert [[t.__name__ for t in agent.tools] for agent in loop.agent_tools] == [["calculator"], ["calculator"]]
    assert bench.task_tool_loop(bench.TASKS["split"](), team) is None

    seen: dict = {}

    def sampled(env: Any, score: Any, team_: Any, rows: list, *args: Any, tool_loop: Any = None) -> dict:
        seen["tool_loop"] = tool_loop
        return {"success": 0.0, "reward": 0.0, "per_row": [], "joint_actions": 0, "completions": [[""] * 8, [""] * 8],
                "tool_messages": seen.get("messages")}

    monkeypatch.setattr("trl_marl.scripts.demo_real.sampled_team_success", sampled)
    result = bench.evaluate_task(task, team, False, held[:1], 0, 72)
    assert isinstance(seen["tool_loop"], ToolLoop) and result["metrics"]["collision"] == 0.0

    # the third candidate reads what each agent's calculator computed, in training and in the evaluation's metrics
    calls = bench.TASKS["tool_division_calls"]()
    assert calls.env(False).exchanges == task.env(False).exchanges and calls.reward(None).read == "calls"
    row = held[0]

    def turn(result: str) -> list:
        return [{"role": "assistant", "content": ""}, {"role": "tool", "name": "calculator", "content": result},
                {"role": "assistant", "content": ""}]

    seen["messages"] = [[turn(row["answer1"])] * 8, [turn(row["answer2"])] * 4 + [turn(row["answer1"])] * 4]
    result = bench.evaluate_task(calls, team, False, [row], 0, 72, keep_completions=True)
    assert result["metrics"]["agent_0_product1"] == 1.0 and result["metrics"]["collision"] == 0.5
    assert result["tool_results"][1] == [[row["answer2"]]] * 4 + [[row["answer1"]]] * 4


def test_tool_division_pilot_gates(bench: Any) -> None:
    """The tools design's pilot gates by hand (fixed before its pilot): states a product >= 0.2 per agent, the same
    lean >= 1.5 to 1, the less stated product >= 0.05 per agent."""
    coding_pilot = load_script(PATH.with_name("coding_pilot.py"))
    m = {"agent_0_product1": 0.2, "agent_0_product2": 0.06, "agent_1_product1": 0.15, "agent_1_product2": 0.08,
         "agent_0_states": 0.26, "agent_1_states": 0.23}
    gates = coding_pilot.task_gates("tool_division", m)
    assert gates["passes"] and gates["minority"] == {0: 0.06, 1: 0.08}
    assert gates["product1_to_product2"] == pytest.approx({0: 0.2 / 0.06, 1: 0.15 / 0.08})
    assert not coding_pilot.task_gates("tool_division", {**m, "agent_1_states": 0.19})["passes"]  # skill
    assert not coding_pilot.task_gates("tool_division", {**m, "agent_1_product2": 0.04})["passes"]  # exploration
    assert not coding_pilot.task_gates("tool_division", {**m, "agent_1_product2": 0.14})["passes"]  # no shared lean
    for later in ("tool_division_worked", "tool_division_calls", "tool_division_calls_t1"):
        assert coding_pilot.task_gates(later, m) == gates


def test_rule_division_single_policy_writes_both_functions_scored_as_the_team(bench: Any) -> None:
    """Design 9's single-policy arm: one policy writes aux1 and aux2 in one block (128 tokens, the team's 2 x 64);
    the team's pass rate scores it, and its metrics are each function right with the reference of the other."""
    from trl_marl.envs import CentralizedRuleDivisionCodingEnv, RuleDivisionCodingEnv
    from trl_marl.rewards import CentralizedReward

    task = bench.TASKS["coding_rule_division_decide_2or1_named"]()
    assert task.central and task.sizes["central_completion"] == 128
    team, central = task.env(False), task.env(True)
    assert isinstance(team, RuleDivisionCodingEnv) and isinstance(central, CentralizedRuleDivisionCodingEnv)
    assert isinstance(task.reward(central), CentralizedReward) and not isinstance(task.reward(team), CentralizedReward)
    row = task.eval_rows("train", 1)[0]
    solutions = {name: [line.strip() for line in row["canonical_solution"].split("\n\n\n") if f"def {name}(" in line]
                 for name in ("aux1", "aux2")}
    aux1, aux2 = solutions["aux1"][0].removeprefix("def aux"), solutions["aux2"][0].removeprefix("def aux")
    single = [[f"{aux1}\n\ndef aux{aux2}\n```", f"{aux1}\n```"]]  # both functions; aux1 alone
    means = bench.joint_action_means(task.metrics(central), single, [row])
    assert means == {"agent_0_right": 1.0, "agent_1_right": 0.5}
    scores = task.success(central)(prompts=[None] * 2, completions=single[0], agent_completions=single,
                                   **{key: [value] * 2 for key, value in row.items()})
    assert scores == [1.0, 0.0]
