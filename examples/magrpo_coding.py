"""Cooperative coding with MAGRPO (arXiv 2508.04652): a helper-function agent and a main-function agent.

Agent 0 writes an auxiliary function, agent 1 the entry point, which may call it. The joint program runs against
the task's unit tests in a sandbox; between turns both agents see the test feedback and revise.

Needs the `rewards` extra for the CodeBLEU term (`codebleu`): `pip install "trl-marl[rewards]"` (from a clone:
`pip install -e ".[rewards]"`).

    accelerate launch examples/magrpo_coding.py --config examples/configs/magrpo_coding.yaml

Offline smoke run (tiny toy model, synthetic HumanEval-format rows, no network):

    python examples/magrpo_coding.py --config examples/configs/magrpo_coding.yaml \
        --model_name_or_path toy --max_steps 2 --per_device_train_batch_size 4 --num_generations 2 \
        --max_completion_length 8 --use_peft false --output_dir /tmp/magrpo-coding

Add `--centralized true` to train the baseline instead: one model writes every agent's part in tagged sections,
on the same team reward (does the task need a team at all?).
"""

from trl import ModelConfig, TrlParser, get_peft_config

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.data import load_humaneval, load_mbpp
from trl_marl.envs.coding import CooperativeCodingEnv
from trl_marl.rewards.coding import CodingTeamReward
from trl_marl.scripts.magrpo import MAGRPOScriptArguments, centralize, fit_to_toy, is_offline_toy, model_init_kwargs
from trl_marl.toy import TOY_CODING_PROMPTS, resolve_toy_name, toy_coding_rows
from trl_marl.utils.threads import show_thread_choice


def main(script_args: MAGRPOScriptArguments, training_args: MAGRPOConfig, model_args: ModelConfig) -> None:
    offline = is_offline_toy(model_args.model_name_or_path)
    if offline:
        fit_to_toy(training_args, "max_completion_length")
        model, dataset = resolve_toy_name(model_args.model_name_or_path), toy_coding_rows(script_args.num_toy_rows)
    else:
        model = model_args.model_name_or_path
        use_mbpp = script_args.dataset_name is not None and "mbpp" in script_args.dataset_name
        dataset = load_mbpp() if use_mbpp else load_humaneval()
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(len(dataset), script_args.max_train_samples)))
    # the toy model has 128 positions: offline, the task's prompts without their instructions
    env = CooperativeCodingEnv(num_turns=training_args.num_turns, **(TOY_CODING_PROMPTS if offline else {}))
    training_args.model_init_kwargs = training_args.model_init_kwargs or model_init_kwargs(model_args)
    team_reward = CodingTeamReward(env=env)  # tests passed + helper/main structure terms
    training_args.reward_weights = training_args.reward_weights or team_reward.reward_weights()
    reward_funcs = team_reward.reward_funcs()
    if script_args.centralized:  # the baseline: one model writes helper and main, scored by the same team reward
        env, reward_funcs = centralize(env, reward_funcs, training_args)
    show_thread_choice()  # on CPU the trainer picks the torch threads for the model's size and says so here
    trainer = MAGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,  # one function per term: each is logged as rewards/<term>/mean
        env=env,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    parser = TrlParser((MAGRPOScriptArguments, MAGRPOConfig, ModelConfig))
    main(*parser.parse_args_and_config())
