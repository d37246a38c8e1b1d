"""Pilot rates of the issue-55 designs (coding and writing) on TRAINING rows only (item 3), before any seed:
the untrained SmolLM2-135M team of `learning_real.py`'s task, sampled as its evaluation samples (8 joint actions per
row, T = 0.7, stop at the closing fence). Held-out rows are never sampled here. The gates, fixed before the pilots
(the teamwork analysis notes, section 3):

- `--task coding_division` (roles the agents choose): both agents write the same function with probability
  b >= 0.6;
- `--task coding_private` (a rule only the helper reads): the helper right with a reference main in 0.2 to 0.6 of
  answers, the main right with a reference helper in 0.1 to 0.3;
- `--task writing_halves` (the writers choose who summarizes which half; fixed before its pilot): each writer names
  a half in at least 0.3 of its answers, and both prefer the same half by at least 1.5 to 1 (the bias under which
  agents trained alone against an untrained partner both learn the other half and collide);
- all: the untrained success leaves room to learn (< 0.3).

Design 4 of the halves task (fixed before its pilots, after design 2's team saw the second half in 1.6% of its
answers and design 3's writers drifted to the first half): the candidates `writing_halves_no_clause` and
`writing_halves_second_first` (first round), `writing_halves_named` and `writing_halves_named_second_first` (second
round, after neither of the first passed) must also pass
- exploration: each writer's less chosen half in at least 0.1 of its answers (a group of 8 holds it at least half
  the time);
- balance: the mean score of the second-half summaries at least 0.7 of the first-half ones, pooled over both writers
  (else each writer's own gradient pulls it to the easier half, whatever its partner does).
The candidate that passes every gate is trained; if both do, the one with the higher minority rate. The sampled
answers are kept in the record (`completions`) for writing and tool tasks.

`--task coding_division_stubs` (2026-12-03, fixed before its pilot; both functions shown as stubs, answers prefilled
up to `def`): the halves task's gates, for functions instead of halves: each programmer writes one of the two
functions first in at least 0.3 of its answers, both prefer the same function by at least 1.5 to 1, and each
programmer's less chosen function in at least 0.1 of its answers; untrained success below 0.3. It failed them
(minority 0.055 and 0.063, programmer 2 named a function in 0.28). `--task coding_division_stubs_t1` (the same at
T = 1, as the split game samples; fixed before its pilot): the same gates.

`--task coding_private_mixed` (2026-12-03, the seventh design, fixed before its pilot: the private rule drawn from
forms the untrained helper often gets wrong, so that both agents' right answers are rare and each one's learning
signal grows as the other learns): the helper right with a reference main in 0.2 to 0.6 of answers; the main (the
first design's prompt and functions) right with a reference helper in at least 0.02; untrained success below 0.3.

`--task coding_naming` (2026-12-03, the eighth design, fixed before its pilot: the first design's rows, the helper
names its function `aux` or `code` and the main agent calls one, each prompt listing the names in the opposite order):
each agent chooses one of the two names in at least 0.3 of its answers; each leans to its own first name by at least
1.5 to 1 (the helper to `aux`, the main agent to `code`: the crossing under which agents trained against an untrained
partner each learn the other's habit); each agent's less chosen name in at least 0.05 of its answers (a group of 8
holds it a third of the time); the helper right with a reference main in at least 0.2, the main right with a
reference helper in at least 0.02; untrained success below 0.3.

`--task coding_rule_division` (2026-12-03, the ninth design, fixed before its pilot: two rules, two one-expression
functions `aux1` and `aux2`, the same prompt for both programmers, each answer prefilled up to `def aux`): the halves
task's gates for the two functions (each programmer writes one of them in at least 0.3 of its answers, both prefer
the same one by at least 1.5 to 1, each programmer's less chosen one in at least 0.1), each programmer's function
right with the reference of the other in at least 0.3 of its answers, untrained success below 0.3.

The ninth design failed its pilot (minority 0.023 and 0.055, right 0.27 and 0.27). Two candidates of it, fixed
before their pilots (2026-12-03): `--task coding_rule_division_decide` (the programmer's number last, and asked to
decide which function it writes; T = 0.7) and `coding_rule_division_decide_t1` (the same at T = 1, the split game's
temperature): the same choice gates, each programmer's function right in at least 0.2 of its answers (the other
designs' helper gate), untrained success below 0.3. The candidate that passes every gate is trained; if both do, the
one with the higher minority rate.

Both candidates failed (minority 0.070/0.094 at T = 0.7; 0.086/0.063 and right 0.13/0.14 at T = 1). The next,
fixed before its pilot (2026-12-03, chosen by next-token probes on training rows of four decision sentences):
`--task coding_rule_division_decide_2or1` (the decision names function 2 first: "decide whether you write function 2
or function 1"; T = 0.7): the same gates as the two candidates before it (each programmer names a function in at
least 0.3 of its answers, both prefer the same one by at least 1.5 to 1, each programmer's less chosen one in at
least 0.1, each programmer's function right with the reference of the other in at least 0.2, untrained success below
0.3). If it passes, it is trained.

It failed (`pilot_coding_rule_division_decide_2or1.json`: minority 0.102 and 0.086, bias 5.7 and 5.7 to 1, named
0.68 and 0.58, right 0.30 and 0.23, untrained success 0.039). The next, fixed before its pilot (2026-12-03, chosen
by next-token probes on training rows of five sentences): `--task coding_rule_division_decide_2or1_named` ("decide
whether you write function 2 (`aux2`) or function 1 (`aux1`)"; T = 0.7): the same gates. If it passes, it is
trained.

It passed every gate (`pilot_coding_rule_division_decide_2or1_named.json`: named 0.74 and 0.69, bias 2.5 and 2.1
to 1 for `aux1`, minority 0.21 and 0.22, right 0.28 and 0.27, untrained success 0.039): it is trained.

`--task tool_division` (2026-12-04, fixed before its pilot: issue 55's tools design, two agents with calculators
and two products, one each; `ToolDivisionEnv`): each agent states one of the two products in at least 0.2 of its
answers (the designs' skill gate; the tool relay's untrained calculator agent stated its one product in 0.14), both
prefer the same product by at least 1.5 to 1, each agent's less stated product in at least 0.05 of its answers (a
group of 8 holds it a third of the time, the `coding_naming` gate), untrained success below 0.3.
It failed (`pilot_tool_division.json`: a product stated in 0.008 and 0.000 of the answers; the untrained model
discusses the two-product instruction instead of calling the calculator).
The second candidate, fixed before its pilot (2026-12-04, chosen by next-token probes on 16 training rows of eight
prompts, the probability that the answer starts with a tool call 0.02-0.73): `--task tool_division_worked` (the
team's rule and the agent's number in the system message, two worked exchanges of the two-product question, one
computing product 2 and one product 1; a call began 0.73 of the answers, its first factor product 1's 0.82 and product
2's 0.15 for both agents): the same gates. If it passes, it is trained.
It failed (`pilot_tool_division_worked.json`: a product stated in 0.133 and 0.141 of the answers, product 2 in
0.008 and 0.008; after a call the model restates the result wrongly or not at all).
The third candidate, fixed before its pilot (2026-12-04): `--task tool_division_calls` (the second's prompt, but an
agent's product is the one its calculator computed, read from the tool loop's messages; the answer is not read):
the same gates, on the computed products. If it passes, it is trained.
It failed (`pilot_tool_division_calls.json`: a product computed in 0.50 and 0.55 of the answers, but product 2 in
0.016 and 0.008, leans of 31 and 70 to 1; at T = 0.7 the probes' 0.15 for product 2's first factor, measured at
T = 1, nearly vanishes). The fourth candidate, fixed before its pilot (2026-12-04): `--task tool_division_calls_t1`,
the third at T = 1 in training and evaluation: the same gates. If it passes, it is trained.
It failed (`pilot_tool_division_calls_t1.json`: a product computed in 0.24 and 0.20, product 2 in 0.016 and 0.000).

The writing task is piloted here too: one script for every issue-55 design with a choice to gate.

- `--task writing_halves_decide` (design 6 of the halves: the coding rule division's design carried over, parts by
  number, "decide whether you summarize part 2 or part 1", answers prefilled up to "I summarize part", a collision
  paying nothing; gates fixed before its pilot): the halves' gates (each writer names a part in at least 0.3 of its
  answers, both prefer the same part by at least 1.5 to 1, each writer's less chosen part in at least 0.1, second-part
  summaries scoring at least 0.7 of first-part ones) and the rule division's skill gate carried over: each part's
  summaries (pooled over the writers) score at least 0.15 on average. If it passes, it is trained.
  It failed (`pilot_writing_halves_decide.json`: no shared lean, 0.92 and 1.15 to 1; summaries 0.05 and 0.10).
- `--task writing_halves_summary` (design 7: design 6 with the answer as a heading, "Summary of part N: <one
  sentence>", prefilled up to "Summary of part"; fixed before its pilot): design 6's gates. If it passes, it is
  trained. It failed (`pilot_writing_halves_summary.json`: a part named in 0.08 of the answers; the model wrote "N").
- `--task writing_halves_summary_options` (design 8: design 7 with both headings written out, "Summary of part 2:"
  or "Summary of part 1:"): design 6's gates. If it passes, it is trained. It passed
  (`pilot_writing_halves_summary_options.json`: named 1.00 and 0.99, 3.7 to 1 for part 2, minority 0.21 and 0.21,
  summaries 0.35 and 0.35).

    python benchmarks/learning/coding_pilot.py --task coding_private --rows 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def choice_gates(m: dict[str, Any], options: tuple[str, str]) -> dict[str, Any]:
    """The gates of a two-option choice (`agent_<a>_<option>` rates in `m`): named, shared bias, minority."""
    first, second = options
    named = {a: m[f"agent_{a}_{first}"] + m[f"agent_{a}_{second}"] for a in (0, 1)}
    ratio = {a: max(m[f"agent_{a}_{first}"], 1e-9) / max(m[f"agent_{a}_{second}"], 1e-9) for a in (0, 1)}
    same_bias = all(r >= 1.5 for r in ratio.values()) or all(r <= 1 / 1.5 for r in ratio.values())
    minority = {a: min(m[f"agent_{a}_{first}"], m[f"agent_{a}_{second}"]) for a in (0, 1)}
    return {"named": named, "named_gate": ">= 0.3 per agent", f"{first}_to_{second}": ratio,
            "bias_gate": "both >= 1.5 or both <= 1/1.5", "same_bias": same_bias, "minority": minority,
            "minority_gate": ">= 0.1 per agent",
            "passes": bool(min(named.values()) >= 0.3 and same_bias and min(minority.values()) >= 0.1)}


def naming_gates(m: dict[str, Any]) -> dict[str, Any]:
    """The gates of `coding_naming` (fixed before its pilot): named, opposite leanings, minority, skills."""
    own = {0: ("aux", "code"), 1: ("code", "aux")}  # each agent's (first, second) name in its prompt
    named = {a: m[f"agent_{a}_aux"] + m[f"agent_{a}_code"] for a in (0, 1)}
    lean = {a: max(m[f"agent_{a}_{own[a][0]}"], 1e-9) / max(m[f"agent_{a}_{own[a][1]}"], 1e-9) for a in (0, 1)}
    minority = {a: min(m[f"agent_{a}_aux"], m[f"agent_{a}_code"]) for a in (0, 1)}
    helper, main_right = m["helper_with_reference_main"], m["main_with_reference_helper"]
    return {"named": named, "named_gate": ">= 0.3 per agent", "own_first_to_other": lean,
            "lean_gate": ">= 1.5 per agent (opposite names)", "minority": minority, "minority_gate": ">= 0.05",
            "helper_right": helper, "helper_gate": ">= 0.2", "main_right": main_right, "main_gate": ">= 0.02",
            "passes": bool(min(named.values()) >= 0.3 and min(lean.values()) >= 1.5
                           and min(minority.values()) >= 0.05 and helper >= 0.2 and main_right >= 0.02)}


def task_gates(task: str, m: dict[str, Any]) -> dict[str, Any]:
    """The pilot gates of `task` (fixed before its pilot) on the untrained team's metrics `m`."""
    if task == "coding_division":
        return {"b_same_function": m.get("collision"), "b_gate": ">= 0.6"}
    if task in ("coding_division_stubs", "coding_division_stubs_t1"):
        return choice_gates(m, ("helper", "main"))
    if task == "coding_private":
        return {"helper_right": m.get("helper_with_reference_main"), "helper_gate": "0.2 to 0.6",
                "main_right": m.get("main_with_reference_helper"), "main_gate": "0.1 to 0.3"}
    if task == "coding_private_mixed":
        helper, main_right = m["helper_with_reference_main"], m["main_with_reference_helper"]
        return {"helper_right": helper, "helper_gate": "0.2 to 0.6", "main_right": main_right,
                "main_gate": ">= 0.02 (the first design's main, 0.04 untrained, learned to 0.40 on seeds 0 and 1)",
                "passes": bool(0.2 <= helper <= 0.6 and main_right >= 0.02)}
    if task == "coding_naming":
        return naming_gates(m)
    if task.startswith("tool_division"):
        gates = choice_gates(m, ("product1", "product2"))
        states = {a: m[f"agent_{a}_states"] for a in (0, 1)}
        return gates | {"named_gate": ">= 0.2 per agent", "minority_gate": ">= 0.05 per agent",
                        "passes": bool(min(states.values()) >= 0.2 and gates["same_bias"]
                                       and min(gates["minority"].values()) >= 0.05)}
    if task.startswith("coding_rule_division"):
        gates = choice_gates(m, ("aux1", "aux2"))
        right = {a: m[f"agent_{a}_right"] for a in (0, 1)}
        least = 0.3 if task == "coding_rule_division" else 0.2
        return gates | {"right": right, "right_gate": f">= {least} per programmer",
                        "passes": bool(gates["passes"] and min(right.values()) >= least)}
    gates = choice_gates(m, ("first", "second"))
    named, minority, same_bias = gates["named"], gates["minority"], gates["same_bias"]
    half_score = {}
    for half in ("first", "second"):  # pooled over the writers: each writer's mean weighted by how often it chose
        chose = [m[f"agent_{a}_{half}"] for a in (0, 1)]
        scores = [m.get(f"agent_{a}_{half}_score") for a in (0, 1)]
        pairs = [(c, s) for c, s in zip(chose, scores) if s is not None and c > 0]
        half_score[half] = sum(c * s for c, s in pairs) / sum(c for c, _ in pairs) if pairs else None
    balance = (half_score["second"] / half_score["first"] if half_score["first"] and half_score["second"] is not None
               else None)
    gates |= {"half_score": half_score, "second_to_first_score": balance, "balance_gate": ">= 0.7 (design 4)"}
    gates["passes"] = bool(min(named.values()) >= 0.3 and same_bias and min(minority.values()) >= 0.1
                           and balance is not None and balance >= 0.7)
    if task.startswith(("writing_halves_decide", "writing_halves_summary")):  # designs 6-8: the skill gate too
        skilled = all(score is not None and score >= 0.15 for score in half_score.values())
        gates |= {"skill_gate": ">= 0.15 per part (pooled half score)", "passes": gates["passes"] and skilled}
    return gates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--task", default="coding_division",
                        choices=("coding_division", "coding_division_stubs", "coding_division_stubs_t1",
                                 "coding_private", "coding_private_mixed", "coding_naming",
                                 "coding_rule_division", "coding_rule_division_decide",
                                 "coding_rule_division_decide_t1", "coding_rule_division_decide_2or1",
                                 "coding_rule_division_decide_2or1_named", "tool_division",
                                 "tool_division_worked", "tool_division_calls", "tool_division_calls_t1",
                                 "writing_halves",
                                 "writing_halves_second_first",
                                 "writing_halves_no_clause", "writing_halves_named",
                                 "writing_halves_named_second_first", "writing_halves_decide",
                                 "writing_halves_summary", "writing_halves_summary_options"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="default benchmarks/results/pilot_<task>.json")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    import learning_real as lr
    from benchmarks.provenance import git_state, machine_info

    task = lr.TASKS[args.task]()
    sizes = {**lr.SIZES["magrpo"], **(task.sizes or {})}
    rows = task.eval_rows("train", args.rows)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        trainer = lr.build_magrpo(task, "team", args.seed, 1, sizes, os.path.join(work, "pilot"), lr.MODEL)
        result = lr.evaluate_task(task, trainer.team, False, rows, 20_000 + args.seed, sizes["completion"],
                                  keep_completions=args.task.startswith(("writing", "tool")))
    seconds = time.perf_counter() - start
    m = result["metrics"]
    record = {
        "command": "python " + " ".join(sys.argv), "git": git_state(), "machine": machine_info(),
        "rows": len(rows), "joint_actions": result["joint_actions"], "seconds": round(seconds, 1),
        "success": result["success"], "team_reward": result["reward"], "metrics": m,
        "gates": task_gates(args.task, m) | {"untrained_success": result["success"], "success_gate": "< 0.3"},
    }
    if "completions" in result:
        record["completions"] = result["completions"]
    Path(args.output or f"benchmarks/results/pilot_{args.task}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("success", "team_reward", "metrics", "seconds")}, indent=1))


if __name__ == "__main__":
    main()
