"""The TRL 1.12 side of ``bench_ppo.py``: ``trl.experimental.ppo.PPOTrainer`` on the same models, data and settings.

Runs in the TRL 1.12 virtualenv (``trl==1.12.0``, ``$TRL112_PYTHON``: see ``benchmarks/peers.py``); ``bench_ppo.py``
starts it::

    $TRL112_PYTHON benchmarks/parity/bench_ppo_trl112_peer.py --role equiv --workdir /tmp/bench_ppo --out x.json
    $TRL112_PYTHON benchmarks/parity/bench_ppo_trl112_peer.py --role train --workdir /tmp/bench_ppo --out y.json

Settings, models and helpers come from ``bench_ppo.py`` (which imports neither ``trl`` nor ``trl_marl`` at import
time), so both sides are configured by the same code.

``--role equiv`` replays the recorded rollouts: ``trl.experimental.ppo.ppo_trainer.batch_generation`` (a module
global that ``PPOTrainer.train`` calls) is replaced by a function that returns the recorded query + response tokens,
as wide as ``generate`` would have made them (the longest recorded completion, which includes its EOS), and as
generation scores the logits of a full forward of the policy on those tokens divided by the temperature (what the
sampling temperature warper hands back as scores). The trainer's dataloader is replaced by one that yields the
recorded prompts in order (a prepared ``DataLoader`` with ``shuffle=False``).

``--role train`` runs ``--updates`` updates with normal sampling (``--seed``), timed per update. With
``--no-gc-collect`` (a diagnostic) the two ``gc.collect()`` calls of every update of TRL 1.12's loop are no-ops; the
results are the same, only faster on a small model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ppo as common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def make_replay(by_prompt: dict[tuple[int, ...], list[int]], widths: list[int]) -> Any:
    """A stand-in for TRL 1.12's `batch_generation(model, queries, local_rollout_forward_batch_size, pad, config)`."""
    import trl.experimental.ppo.ppo_trainer as ppo_module

    @torch.no_grad()
    def batch_generation(
        model: torch.nn.Module,
        queries: torch.Tensor,
        local_rollout_forward_batch_size: int,
        pad_token_id: int,
        generation_config: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        prompts = [tuple(int(t) for t in row if t != pad_token_id) for row in queries.tolist()]
        completions = [by_prompt[p] for p in prompts]
        width = max(len(c) for c in completions)  # `generate` stops once every row has its EOS
        responses = torch.full((len(completions), width), pad_token_id, dtype=torch.long, device=queries.device)
        for i, c in enumerate(completions):
            responses[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        query_responses = torch.cat([queries, responses], 1)
        context = queries.size(1)
        logits = ppo_module.forward(model, query_responses, pad_token_id).logits[:, context - 1 : -1]
        widths.append(width)
        return query_responses, logits / generation_config.temperature

    return batch_generation


def equivalence(workdir: Path, case_set: str = "default") -> dict[str, Any]:
    import trl.experimental.ppo.ppo_trainer as ppo_module
    from torch.utils.data import DataLoader
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    fixture = common.read_fixture(workdir)
    original = ppo_module.batch_generation
    results: dict[str, Any] = {}
    for case in common.CASE_SETS[case_set]:
        rows = common.case_rows(fixture, case)
        by_prompt = {tuple(r["prompt_ids"]): list(r["completion_ids"]) for r in rows}
        dataset = common.replay_dataset(rows)
        tokenizer, policy, ref_policy, reward_model, value_model = common.load_models(workdir, perturbed_ref=True)
        n = common.local_batch_size(case)
        args = PPOConfig(**common.ppo_config_kwargs(case, str(workdir / "out-trl"), n))
        peft_config = common.lora_config(case)
        torch.manual_seed(args.seed)  # LoRA weights: the same draw on both sides
        trainer = PPOTrainer(
            args=args,
            processing_class=tokenizer,
            model=policy,
            ref_model=None if peft_config is not None else ref_policy,
            reward_model=reward_model,
            train_dataset=dataset,
            value_model=value_model,
            eval_dataset=dataset,
            peft_config=peft_config,
        )
        common.quiet(trainer)
        ordered = DataLoader(dataset, batch_size=n, shuffle=False, collate_fn=trainer.data_collator, drop_last=True)
        trainer.dataloader = trainer.accelerator.prepare(ordered)
        widths: list[int] = []
        ppo_module.batch_generation = make_replay(by_prompt, widths)
        try:
            with common.recorded_permutations() as permutations:
                trainer.train()
        finally:
            ppo_module.batch_generation = original
        results[case["name"]] = {
            "metrics": common.first_log(trainer),
            "permutations": permutations,
            "response_width": widths[0],
        }
    results["versions"] = common.versions()
    return results


def train(
    workdir: Path, updates: int, profile_path: Path | None, no_gc_collect: bool, seed: int = common.SEED
) -> dict[str, Any]:
    import trl.experimental.ppo.ppo_trainer as ppo_module
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    if no_gc_collect:  # a diagnostic variant: TRL 1.12's PPO loop calls gc.collect() twice per update
        ppo_module.gc = types.SimpleNamespace(collect=lambda *args: 0)

    fixture = common.read_fixture(workdir)
    dataset = common.train_dataset(fixture)
    tokenizer, policy, ref_policy, reward_model, value_model = common.load_models(workdir, perturbed_ref=False)
    total = updates * common.local_batch_size(common.TRAIN_CASE)
    args = PPOConfig(**{**common.ppo_config_kwargs(common.TRAIN_CASE, str(workdir / "out-trl"), total), "seed": seed})
    timer = common.StepTimer()
    trainer = PPOTrainer(
        args=args,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref_policy,
        reward_model=reward_model,
        train_dataset=dataset,
        value_model=value_model,
        eval_dataset=dataset,
        callbacks=[timer],
    )
    common.quiet(trainer)
    np.random.seed(seed)
    start = time.perf_counter()
    _, profile = common.profiled(trainer.train, profile_path)
    return common.train_result(trainer, timer, time.perf_counter() - start, profile)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("equiv", "train"), required=True)
    parser.add_argument("--cases", choices=sorted(common.CASE_SETS), default="default")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--profile-out", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=common.SEED)
    parser.add_argument("--no-gc-collect", action="store_true", help="make TRL's per-update gc.collect() a no-op")
    args = parser.parse_args(argv)
    common.setup_child()
    if args.role == "equiv":
        result = equivalence(args.workdir, args.cases)
    else:
        result = train(args.workdir, args.updates, args.profile_out, args.no_gc_collect, args.seed)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
