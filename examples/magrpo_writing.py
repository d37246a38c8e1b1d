"""Cooperative writing with MAGRPO (arXiv 2508.04652): two agents summarize and expand the same text together.

Agent 0 writes a concise summary, agent 1 a more detailed expansion; the team is rewarded for the structure of
the *pair* (lengths, their ratio, lexical diversity, transitions, style consistency, ROUGE-L to the reference).

Needs the `rewards` extra for the ROUGE-L term (`rouge-score`): `pip install "trl-marl[rewards]"` (from a clone:
`pip install -e ".[rewards]"`).

    accelerate launch examples/magrpo_writing.py --config examples/configs/magrpo_writing.yaml

Offline smoke run (tiny toy model, synthetic rows, no network):

    python examples/magrpo_writing.py --config examples/configs/magrpo_writing.yaml \
        --model_name_or_path toy --max_steps 2 --per_device_train_batch_size 4 --num_generations 2 \
        --max_completion_length 8 --use_peft false --output_dir /tmp/magrpo-writing

Add `--centralized true` to train the baseline instead: one model writes every agent's part in tagged sections,
on the same team reward (does the task need a team at all?).
"""

from trl import ModelConfig, TrlParser, get_peft_config

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.data import load_tldr
from trl_marl.envs.writing import CooperativeWritingEnv
from trl_marl.rewards.writing import WritingTeamReward
from trl_marl.scripts.magrpo import MAGRPOScriptArguments, centralize, fit_to_toy, is_offline_toy, model_init_kwargs
from trl_marl.toy import TOY_WRITING_PROMPTS, resolve_toy_name, toy_writing_rows
from trl_marl.utils.threads import show_thread_choice


def main(script_args: MAGRPOScriptArguments, training_args: MAGRPOConfig, model_args: ModelConfig) -> None:
    offline = is_offline_toy(model_args.model_name_or_path)
    if offline:
        fit_to_toy(training_args, "max_completion_length")
        model, dataset = resolve_toy_name(model_args.model_name_or_path), toy_writing_rows(script_args.num_toy_rows)
    else:
        model = model_args.model_name_or_path
        dataset = load_tldr(split=script_args.dataset_split, max_rows=script_args.max_train_samples,
                            dataset_name=script_args.dataset_name or "trl-lib/tldr")
    training_args.model_init_kwargs = training_args.model_init_kwargs or model_init_kwargs(model_args)
    team_reward = WritingTeamReward()  # length range, length ratio, diversity, transitions, style, ROUGE-L
    training_args.reward_weights = training_args.reward_weights or team_reward.reward_weights()
    # the toy model has 128 positions: offline, the task's prompts without their instructions
    env = CooperativeWritingEnv(num_turns=training_args.num_turns, **(TOY_WRITING_PROMPTS if offline else {}))
    reward_funcs = team_reward.reward_funcs()
    if script_args.centralized:  # the baseline: one model writes both parts, scored by the same team reward
        env, reward_funcs = centralize(env, reward_funcs, training_args)
    show_thread_choice()  # on CPU the trainer picks the torch threads for the model's size and says so here
    trainer = MAGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,  # one function per term: each is logged as rewards/<term>/mean
        env=env,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),  # one LoRA adapter per agent on one base model
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)  # agent_0/, agent_1/, team_config.json, README.md


if __name__ == "__main__":
    parser = TrlParser((MAGRPOScriptArguments, MAGRPOConfig, ModelConfig))
    main(*parser.parse_args_and_config())
