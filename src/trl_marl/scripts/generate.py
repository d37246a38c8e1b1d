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
import os
import sys
from typing import Any

DESCRIPTION = "Load a saved team and print each agent's answer to prompts (`--prompt`, repeatable, or stdin)."
"""What `trl-marl generate` does, in one line (its help)."""


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `trl-marl generate`."""
    parser.add_argument("--team", required=True, metavar="PATH",
                        help="A folder saved by `AgentTeam.save_pretrained` or a trainer (it holds team_config.json), "
                             "e.g. OUTPUT_DIR/final or a checkpoint-N folder.")
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


def generate_command(args: argparse.Namespace) -> int:
    """Run `trl-marl generate` (parsed `args`): print each agent's answers; 2 on a usage error."""
    prompts = args.prompt if args.prompt else [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not prompts:
        print("trl-marl generate: no prompt: pass --prompt TEXT (repeatable) or lines on stdin.", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(args.team, "team_config.json")):
        print(f"trl-marl generate: {args.team!r} holds no team_config.json: pass a folder saved by a trainer "
              "(OUTPUT_DIR/final, OUTPUT_DIR/checkpoint-N) or by `AgentTeam.save_pretrained`.", file=sys.stderr)
        return 2
    from .progress import quiet_logs

    quiet_logs()
    from ..team import AgentTeam

    team = AgentTeam.from_pretrained(args.team, is_trainable=False)
    team.eval()
    if args.agent is not None and not 0 <= args.agent < team.num_agents:
        print(f"trl-marl generate: --agent {args.agent}: the team has agents 0..{team.num_agents - 1}.",
              file=sys.stderr)
        return 2
    settings: dict[str, Any] = dict(max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                                    temperature=args.temperature, top_p=args.top_p, system_prompt=args.system,
                                    apply_chat_template=not args.raw, seed=args.seed if args.sample else None)
    agents = range(team.num_agents) if args.agent is None else [args.agent]
    if args.agent is None:
        answers = team.chat_team(prompts, **settings)
    else:
        answers = {args.agent: team.chat(args.agent, prompts, **settings)}
    for i, prompt in enumerate(prompts):
        print(f"prompt {i + 1}: {prompt}")
        for a in agents:
            print(f"  agent {a}: {answers[a][i]}")
    return 0
