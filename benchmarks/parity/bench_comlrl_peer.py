"""comlrl peer for ``bench_magrpo.py`` and ``bench_family.py``: time comlrl's ``MAGRPOTrainer`` (or, with
``--algorithm``, ``MAREINFORCETrainer`` / ``MARLOOTrainer`` / ``MAReMaxTrainer``) on the two-agent task.

Run it in the separate comlrl virtualenv (comlrl is not a dependency of trl_marl; ``python -m benchmarks`` builds
it, see ``benchmarks/peers.py``), on a model folder built with our environment, shared by both sides::

    PYTHONPATH=src python -c "from trl_marl.toy import make_toy_model; make_toy_model('/tmp/toy-qwen2')"
    $COMLRL_PYTHON benchmarks/parity/bench_comlrl_peer.py --model-dir /tmp/toy-qwen2 \
        --steps 10 --num-generations 8 --max-new-tokens 4 --prompts-per-step 4 --json /tmp/comlrl.json

Task: both agents get the prompt ``T=10:`` and answer with a number; the team reward of a joint action
(agent-1 completion, agent-2 completion) is 1 if both are integers summing to 10, -0.5 if either is not an
integer, else 0.

What one benchmark *step* is here: ``P`` dataset rows (comlrl always processes one row at a time), each
row giving ``G`` completions per agent and ``G`` aligned joint actions, followed by one AdamW step per agent
(``rollout_buffer_size = train_batch_size = P``). So a step scores ``P * G`` joint actions, the same unit as a
trl_marl step with ``P`` prompts per batch and ``num_generations = G``.

Timing is observed without changing comlrl's algorithm: the trainer instance's private
``_generate_completions``, ``_update_from_samples`` and ``_drain_ready_buffers`` are wrapped with
timers (the last marks the end of each step, i.e. each optimizer update). Everything runs through the
public ``MAGRPOTrainer.train()``.

With ``--profile`` (used by ``bench_profile.py``) the step is also split into parts by ``profile_hooks.py`` (the
same code that times trl_marl's side): forward hooks on each agent's decoder stack and ``lm_head`` (prefill /
decode inside generation, the training forwards inside ``_compute_loss_with_gradients``, with every forward's
shape), wrappers around ``_generate_completions``, ``_compute_rewards``, ``_train_step_returns``,
``_update_from_samples`` and ``_compute_loss_with_gradients``, ``torch.autograd.backward`` and the optimizers'
``step``. The JSON then has ``profile.steps``: one record per optimizer step (see ``StepProfiler.step``).
"""

from __future__ import annotations

import os

# Offline, no wandb, one thread: set before torch/transformers are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from importlib.metadata import version  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

TARGET = 10
PROMPT = f"T={TARGET}:"
_INT_RE = re.compile(r"-?\d+")


def parse_int(text: str) -> int | None:
    """The completion as an integer, or None when it is not exactly an integer (surrounding spaces allowed)."""
    text = text.strip()
    return int(text) if _INT_RE.fullmatch(text) else None


def team_reward(a: str, b: str) -> float:
    """Centralized reward of one joint action."""
    x, y = parse_int(a), parse_int(b)
    if x is None or y is None:
        return -0.5
    return 1.0 if x + y == TARGET else 0.0


# --algorithm -> (config class, trainer class, advantage_mode) in comlrl.trainers.reinforce; the subclasses only
# change the default advantage_mode, which is also passed explicitly so that the mode in use is recorded.
ALGORITHMS = {
    "magrpo": ("MAGRPOConfig", "MAGRPOTrainer", "mean"),
    "mareinforce": ("MAREINFORCEConfig", "MAREINFORCETrainer", "raw"),
    "marloo": ("MARLOOConfig", "MARLOOTrainer", "rloo"),
    "maremax": ("MAReMaxConfig", "MAReMaxTrainer", "max"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark comlrl's MAGRPOTrainer (2 agents, CPU).")
    parser.add_argument(
        "--algorithm",
        choices=sorted(ALGORITHMS),
        default="magrpo",
        help="comlrl reinforce trainer to run (advantage normalization still follows --no-advantage-normalization)",
    )
    parser.add_argument("--model-dir", required=True, help="local dir with a causal LM and a tokenizer")
    parser.add_argument("--steps", type=int, default=10, help="total steps (updates per agent), warmup included")
    parser.add_argument("--warmup", type=int, default=2, help="leading steps left out of the median")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--prompts-per-step", type=int, default=4, help="dataset rows per optimizer step")
    parser.add_argument("--lr", type=float, default=3e-4, help="comlrl's agent_learning_rate (its default: 5e-6)")
    parser.add_argument("--temperature", type=float, default=1.0, help="comlrl default: 0.6")
    parser.add_argument("--top-p", type=float, default=1.0, help="comlrl default: 0.6")
    parser.add_argument("--top-k", type=int, default=0, help="0 = no top-k (comlrl default: 50)")
    parser.add_argument(
        "--no-advantage-normalization",
        action="store_true",
        help="use A = R - mean(R) only (comlrl's default also divides by the group std)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--profile", action="store_true",
                        help="split every step into parts and record every forward's shape (profile_hooks.py)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    t_import = time.perf_counter()
    import comlrl.trainers.reinforce as reinforce

    config_name, trainer_name, advantage_mode = ALGORITHMS[args.algorithm]
    config_cls, trainer_cls = getattr(reinforce, config_name), getattr(reinforce, trainer_name)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    import_s = time.perf_counter() - t_import

    # Load the tokenizer with its own class: transformers 5.x AutoTokenizer (which comlrl uses when given a
    # model *name*) swaps in Qwen2Tokenizer for any dir whose config says model_type=qwen2, replacing the
    # character-level pre-tokenizer (it drops spaces). So we load models and tokenizer ourselves and hand
    # comlrl the objects: one full model copy per agent, exactly what comlrl builds from a name.
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.model_dir)
    agents = [AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32) for _ in range(2)]
    n_params = sum(p.numel() for p in agents[0].parameters())

    P, G = args.prompts_per_step, args.num_generations
    total_steps = args.steps
    if total_steps <= args.warmup:
        parser.error("--steps must be larger than --warmup")
    train_dataset = Dataset.from_list([{"prompt": PROMPT} for _ in range(P * total_steps)])

    config = config_cls(
        num_train_epochs=1,
        agent_learning_rate=args.lr,
        num_agents=2,
        num_generations=G,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k if args.top_k > 0 else None,
        num_turns=1,
        joint_mode="aligned",
        eval_interval=0,
        rollout_buffer_size=P,
        train_batch_size=P,
        advantage_normalization=not args.no_advantage_normalization,
        advantage_mode=advantage_mode,
        reference_kl_enabled=False,
        agent_devices="cpu",
    )

    reward_log: list[float] = []

    def reward_func(completions1, completions2):
        # comlrl calls this once per joint action with one-element lists.
        rewards = [team_reward(a, b) for a, b in zip(completions1, completions2)]
        reward_log.extend(rewards)
        return rewards

    trainer = trainer_cls(
        agents=agents,
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        reward_func=reward_func,
        wandb_config=None,  # no wandb.init; wandb is only imported
        args=config,
    )
    trainer.verbose = False  # no tqdm bar

    profiler = None
    if args.profile:  # time comlrl's own methods and forwards, without changing what they do
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "speed"))
        from profile_hooks import StepProfiler, instrumentation_cost

        profiler = StepProfiler()
        for agent in trainer.agents:
            profiler.hook_causal_lm(agent)
        for method, part in (("_generate_completions", "generate"), ("_compute_rewards", "reward"),
                             ("_train_step_returns", "rollout"), ("_update_from_samples", "update"),
                             ("_compute_loss_with_gradients", "loss")):
            profiler.wrap_method(trainer, method, part)
        profiler.install_global()
    profile_steps: list[dict] = []

    # --- timers around comlrl's own methods (no behavioural change) ---
    stats = {"gen_s": 0.0, "update_s": 0.0, "gen_calls": 0, "tokens": 0, "positions": 0}
    step_ends: list[float] = []
    step_gen: list[float] = []
    step_upd: list[float] = []
    step_tokens: list[int] = []
    step_rewards: list[float] = []
    marks = {"gen": 0.0, "upd": 0.0, "tok": 0, "rew": 0}

    orig_generate = trainer._generate_completions
    orig_update = trainer._update_from_samples
    orig_drain = trainer._drain_ready_buffers

    def timed_generate(*a, **k):
        t = time.perf_counter()
        out = orig_generate(*a, **k)
        stats["gen_s"] += time.perf_counter() - t
        stats["gen_calls"] += 1
        stats["tokens"] += int(sum(out["response_lens"]))  # up to (incl.) EOS, before the first pad
        stats["positions"] += sum(int(t_.numel()) for t_ in out["completion_input_ids"][0])  # incl. pads
        return out

    def timed_update(*a, **k):
        t = time.perf_counter()
        out = orig_update(*a, **k)
        stats["update_s"] += time.perf_counter() - t
        return out

    def timed_drain(ready_agents):
        out = orig_drain(ready_agents)
        if ready_agents:
            step_ends.append(time.perf_counter())
            step_gen.append(stats["gen_s"] - marks["gen"])
            step_upd.append(stats["update_s"] - marks["upd"])
            step_tokens.append(stats["tokens"] - marks["tok"])
            step_rewards.append(float(np.mean(reward_log[marks["rew"] :])) if reward_log[marks["rew"] :] else 0.0)
            marks.update(gen=stats["gen_s"], upd=stats["update_s"], tok=stats["tokens"], rew=len(reward_log))
            if profiler is not None:
                profile_steps.append({**profiler.step(), "tokens": step_tokens[-1]})
        return out

    trainer._generate_completions = timed_generate
    trainer._update_from_samples = timed_update
    trainer._drain_ready_buffers = timed_drain

    t0 = time.perf_counter()
    if profiler is not None:
        profiler.mark()
    trainer.train()
    total_s = time.perf_counter() - t0

    if len(step_ends) != total_steps:
        raise RuntimeError(f"expected {total_steps} optimizer steps, observed {len(step_ends)}")
    step_times = [b - a for a, b in zip([t0] + step_ends[:-1], step_ends)]
    timed = step_times[args.warmup :]
    median_step = statistics.median(timed)
    joint_per_step = P * G
    joint_total = trainer.env_step  # comlrl counts every scored joint action here
    assert joint_total == joint_per_step * total_steps == len(reward_log)

    builder_info = None
    for marker in ("trl_marl_toy.json",):
        marker_path = os.path.join(args.model_dir, marker)
        if builder_info is None and os.path.exists(marker_path):
            with open(marker_path) as f:
                builder_info = json.load(f)

    result = {
        "peer": "comlrl",
        "algorithm": trainer_name,
        "advantage_mode": advantage_mode,
        "comlrl_version": version("comlrl"),
        "torch_version": torch.__version__,
        "transformers_version": version("transformers"),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "model_dir": os.path.abspath(args.model_dir),
        "model_builder": builder_info,
        "model_params_per_agent": n_params,
        "num_agents": 2,
        "num_generations": G,
        "prompts_per_step": P,
        "max_new_tokens": args.max_new_tokens,
        "lr": args.lr,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k if args.top_k > 0 else None,
        "advantage_normalization": not args.no_advantage_normalization,
        "warmup_steps": args.warmup,
        "timed_steps": len(timed),
        "joint_samples_per_step": joint_per_step,
        "median_step_s": median_step,
        "mean_step_s": statistics.fmean(timed),
        "step_times_s": step_times,
        "joint_samples_per_s": joint_per_step / median_step,
        "joint_samples_per_s_mean": joint_per_step * len(timed) / sum(timed),
        "median_generate_s_per_step": statistics.median(step_gen[args.warmup :]),
        "median_update_s_per_step": statistics.median(step_upd[args.warmup :]),
        "tokens_generated_total": stats["tokens"],
        "tokens_generated_per_step_median": statistics.median(step_tokens[args.warmup :]),
        "completion_positions_total": stats["positions"],
        "generate_calls": stats["gen_calls"],
        "joint_samples_total": joint_total,
        "train_wall_s": total_s,
        "import_s": import_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "reward_mean_per_step": step_rewards,
        "success_rate_total": sum(r == 1.0 for r in reward_log) / len(reward_log),
        "invalid_rate_total": sum(r == -0.5 for r in reward_log) / len(reward_log),
        "argv": sys.argv[1:],
    }
    if profiler is not None:
        profiler.remove()
        result["profile"] = {"steps": profile_steps, "region_cost_s": instrumentation_cost()}
    text = json.dumps(result, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    summary = {k: result[k] for k in ("median_step_s", "joint_samples_per_s", "peak_rss_mb", "tokens_generated_total")}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
