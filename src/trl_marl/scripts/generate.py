"""`trl-marl generate --team PATH --prompt TEXT`: try a saved team on prompts, each agent's answer printed.

The team is loaded with `AgentTeam.from_pretrained` and answers through `AgentTeam.chat_team` (or `AgentTeam.chat` for
one `--agent`): each prompt is a user message rendered with the agent's chat template, decoded greedily unless
`--sample`. The output is one block per prompt, one line per agent:

```
prompt 1: What is 2 + 3?
  agent 0: 2 + 3 = 5.
  agent 1: The answer is 5.
```
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

DESCRIPTION = "Load a saved team and print each agent's answer to prompts (`--prompt`, repeatable, or stdin)."
"""What `trl-marl generate` does, in one line (its help)."""


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `trl-marl generate`."""
    parser.add_argument("--team", required=True, metavar="PATH",
                        help="A folder that holds team_config.json: the `output_dir` of a finished run (where "
                             "`trl-marl magrpo|maporl` and `trainer.save_model()` save the team), one of its "
                             "checkpoint-N folders, or a folder saved by `AgentTeam.save_pretrained`.")
    parser.add_argument("--prompt", action="append", metavar="TEXT",
                        help="A prompt (repeat for several). Without --prompt, one prompt per line of stdin.")
    parser.add_argument("--agent", type=int, default=None, metavar="N",
                        help="Only agent N (0-based); default: every agent.")
    parser.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="Longest answer in tokens.")
    parser.add_argument("--system", default=None, metavar="TEXT", help="A system message before each prompt.")
    parser.add_argument("--raw", action="store_true",
                        help="Feed the prompt text as it is, without the chat template.")
    parser.add_argument("--sample", action="store_true", help="Sample instead of greedy decoding.")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (with --sample).")
    parser.add_argument("--top-p", type=float, default=1.0, help="Nucleus sampling mass (with --sample).")
    parser.add_argument("--seed", type=int, default=0, help="Seed for --sample.")


def team_folder_problem(path: str) -> str | None:
    """Why `path` is no saved team, as one sentence naming what to pass instead; `None` when it holds one.

    A trainer saves the team in its `output_dir` (`trainer.save_model()`, which `trl-marl magrpo|maporl` call at the
    end of training) and in every `checkpoint-<step>` folder; a run that stopped early has its checkpoints only, and
    the newest of them is named.
    """
    from ..utils.checkpoint_files import CHECKPOINT_RE, TEAM_CONFIG_FILE

    if os.path.isfile(os.path.join(path, TEAM_CONFIG_FILE)):
        return None
    where = ("the `output_dir` of a finished run (where `trl-marl magrpo|maporl` and `trainer.save_model()` save "
             "the team), one of its checkpoint-N folders, or a folder saved by `AgentTeam.save_pretrained`")
    if not os.path.isdir(path):
        return f"--team {path!r} is not a folder: pass {where}."
    steps = sorted((int(m.group(1)), name) for name in os.listdir(path) if (m := CHECKPOINT_RE.match(name))
                   and os.path.isfile(os.path.join(path, name, TEAM_CONFIG_FILE)))
    if steps:
        newest = os.path.join(path, steps[-1][1])
        return (f"{path!r} holds no {TEAM_CONFIG_FILE} (its run did not finish: the team is saved there at the end "
                f"of training), but its checkpoints do: pass the newest, `--team {newest}`.")
    return f"{path!r} holds no {TEAM_CONFIG_FILE}: pass {where}."


SEED_LIMIT = 2**32 - 1
"""The largest `--seed` (numpy's and `transformers.set_seed`'s range)."""


def flag_problem(args: argparse.Namespace) -> str | None:
    """Why the sampling flags of `args` cannot be used, naming the flag and the fix; `None` when they can."""
    if args.max_new_tokens < 1:
        return f"--max-new-tokens {args.max_new_tokens}: pass a positive number of tokens."
    if args.sample and not (math.isfinite(args.temperature) and args.temperature > 0):
        return (f"--temperature {args.temperature} with --sample: pass a temperature > 0, or drop --sample for "
                "greedy decoding.")
    if not 0 < args.top_p <= 1:
        return f"--top-p {args.top_p}: pass a probability mass in (0, 1]."
    if not 0 <= args.seed <= SEED_LIMIT:
        return f"--seed {args.seed}: pass a seed in 0..{SEED_LIMIT}."
    return None


def damage_problem(path: str) -> str | None:
    """What is wrong with a saved checkpoint's files, checked against its manifest (sizes, SHA-256, structure) before
    anything is loaded; `None` when nothing is, or when the folder has no manifest (a team saved by `save_model`)."""
    from ..utils.checkpoint_checks import checkpoint_problem
    from ..utils.checkpoint_files import MANIFEST_FILE, CheckpointSpec

    if not os.path.lexists(os.path.join(path, MANIFEST_FILE)):
        return None
    problem = checkpoint_problem(path, checksums=True, spec=CheckpointSpec(required=()))
    return None if problem is None else f"--team {path!r} is damaged: {problem}."


def generate_command(args: argparse.Namespace) -> int:
    """Run `trl-marl generate` (parsed `args`): print each agent's answers; 2 on a usage error, a damaged or unloadable
    team, or a prompt longer than the model's context window."""
    problem = flag_problem(args)
    if problem is not None:
        print(f"trl-marl generate: {problem}", file=sys.stderr)
        return 2
    prompts = args.prompt if args.prompt else [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not prompts:
        print("trl-marl generate: no prompt: pass --prompt TEXT (repeatable) or lines on stdin.", file=sys.stderr)
        return 2
    problem = team_folder_problem(args.team) or damage_problem(args.team)
    if problem is not None:
        print(f"trl-marl generate: {problem}", file=sys.stderr)
        return 2
    from .progress import quiet_logs

    quiet_logs()
    from ..team import AgentTeam

    try:
        team = AgentTeam.from_pretrained(args.team, is_trainable=False)
    except Exception as error:  # noqa: BLE001 - any file the team cannot be built from is the user's folder's fault
        print(f"trl-marl generate: --team {args.team!r} could not be loaded ({type(error).__name__}: "
              f"{str(error).splitlines()[0] if str(error) else ''}): pass a folder saved by a trainer or "
              "`AgentTeam.save_pretrained`, whole.", file=sys.stderr)
        return 2
    team.eval()
    if args.agent is not None and not 0 <= args.agent < team.num_agents:
        print(f"trl-marl generate: --agent {args.agent}: the team has agents 0..{team.num_agents - 1}.",
              file=sys.stderr)
        return 2
    settings: dict[str, Any] = dict(max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                                    temperature=args.temperature, top_p=args.top_p, system_prompt=args.system,
                                    apply_chat_template=not args.raw, seed=args.seed if args.sample else None)
    agents = range(team.num_agents) if args.agent is None else [args.agent]
    answers: list[list[str]] | dict[int, list[str]]
    try:
        if args.agent is None:
            answers = team.chat_team(prompts, **settings)
        else:
            answers = {args.agent: team.chat(args.agent, prompts, **settings)}
    except ValueError as error:  # a prompt longer than the context window (the flags were checked above)
        print(f"trl-marl generate: {error}", file=sys.stderr)
        return 2
    for i, prompt in enumerate(prompts):
        print(f"prompt {i + 1}: {prompt}")
        for a in agents:
            print(f"  agent {a}: {answers[a][i]}")
    return 0
