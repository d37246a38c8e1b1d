"""With one agent and one turn, MAGRPO must equal TRL's GRPOTrainer for the same rollouts.

Both trainers get identical completions (GRPO through its public `rollout_func`, MAGRPO by replacing the team's
`generate`), the same reward function, model, optimizer settings and seed. For every supported `loss_type` their
advantages, logged loss and the *gradients* accumulated before the optimizer step must agree (one Adam step moves
each weight by about lr * sign(g), so weights alone would not notice a loss scaled by a constant), with and without
gradient accumulation; the weights after the step must agree too. With two agents the team's loss is the sum of each
agent's one-agent GRPO loss and each agent's gradients are that agent's one-agent GRPO gradients.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
from trl_marl.core import SUPPORTED_LOSS_TYPES
from trl_marl.team import Generation, pad_right
from trl_marl.toy import make_toy_model

PROMPTS = ["Q:12+3=A:", "Q:4+45=A:"]
# two micro-steps of two prompts; the second one's completions are shorter (14 tokens against 18), so a loss
# normalised per micro-step instead of over the whole accumulated batch (dapo) shows in the gradients
PROMPTS_GA = ["Q:12+3=A:", "Q:4+45=A:", "Q:1+9=A:", "Q:5+9=A:"]
G = 4
MAX_LEN = 4
# On the second pass over a rollout (lr 3e-3) the negative-advantage samples have drifted by -0.17, 0.51, 0.76 and
# 0.77 nats per token: this threshold drops two of them and keeps two
OFF_POLICY_THRESHOLD = 0.6


def same_text(text: str) -> str:
    return text


def shift_digits(text: str) -> str:
    """Agent 1's script: every digit of agent 0's completion plus one (a bijection, so rewards can be undone)."""
    return "".join(str((int(c) + 1) % 10) if c.isdigit() else c for c in text)


def unshift_digits(text: str) -> str:
    return "".join(str((int(c) - 1) % 10) if c.isdigit() else c for c in text)


def scripted_completion(tokenizer, prompt: str, occurrence: int,
                        mapping: Callable[[str], str] = same_text) -> list[int]:
    """A fixed completion for the `occurrence`-th sample of `prompt`: varied lengths, with and without EOS."""
    seed = sum(map(ord, prompt)) + 7 * occurrence
    width = 1 if len(prompt) < len(PROMPTS[0]) else 1 + occurrence % 3  # short prompts get one-digit answers
    text = mapping(str(seed % 97)[:width])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if occurrence % 4 != 3:  # most completions end with EOS, one per group is truncated
        ids = ids + [tokenizer.eos_token_id]
    return ids[:MAX_LEN]


def reward_digits(prompts, completions, **kwargs) -> list[float]:
    return [0.3 * len(c) + (1.0 if "1" in c else 0.0) + (0.5 if "5" in c else 0.0) for c in completions]


def reward_unshifted(prompts, completions, **kwargs) -> list[float]:
    """GRPO on agent 1's completions with the reward its partner's (agent 0's) completions got."""
    return reward_digits(prompts, [unshift_digits(c) for c in completions])


class ScriptedGeneration:
    """Hands out the scripted completions in order of occurrence of each prompt."""

    def __init__(self, tokenizer, mapping: Callable[[str], str] = same_text) -> None:
        self.tokenizer = tokenizer
        self.mapping = mapping
        self.seen: dict[str, int] = {}

    def completion(self, prompt: str) -> list[int]:
        k = self.seen.get(prompt, 0)
        self.seen[prompt] = k + 1
        return scripted_completion(self.tokenizer, prompt, k, self.mapping)


class GradientCapture(TrainerCallback):
    """Copies the gradients right before the optimizer step (clipping is off in these tests)."""

    def __init__(self) -> None:
        self.parameters: Callable[[], list[tuple[str, torch.nn.Parameter]]] | None = None
        self.grads: dict[str, torch.Tensor] = {}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads = {name: p.grad.detach().clone() for name, p in self.parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return make_toy_model(tmp_path_factory.mktemp("toy"), task="addition", hidden_size=32, num_layers=1,
                          pretrain_steps=30, seed=3)


def common_kwargs(output_dir: str, loss_type: str, prompts: list[str], ga: int, **extra) -> dict:
    kwargs = dict(
        output_dir=output_dir, per_device_train_batch_size=len(prompts) // ga * G, num_generations=G,
        gradient_accumulation_steps=ga, max_completion_length=MAX_LEN, learning_rate=1e-2, max_steps=1,
        loss_type=loss_type, beta=0.04, scale_rewards="group", temperature=0.9, epsilon=0.2, report_to="none",
        save_strategy="no", bf16=False, gradient_checkpointing=False, logging_steps=1, seed=0, disable_tqdm=True,
        shuffle_dataset=False, max_grad_norm=0.0,
        # Adam moves a weight by lr * g / (|g| + eps) on its first step: at the default eps 1e-8 a gradient element of
        # ~1e-8 turns float-rounding noise of 1e-10 (which the gradient checks allow) into 3e-5 of weight, more than
        # `assert_same_weights` allows (seen on one CPU); at 1e-5 the same noise moves a weight by at most 3e-7
        adam_epsilon=1e-5,
    )
    kwargs.update(extra)
    return kwargs


def run_grpo(model_dir: str, out: str, loss_type: str, prompts: list[str] = PROMPTS, ga: int = 1,
             mapping: Callable[[str], str] = same_text, reward=reward_digits, **extra):
    tokenizer = load_tokenizer(model_dir)
    script = ScriptedGeneration(tokenizer, mapping)

    def rollout_func(prompts, trainer):
        return {
            "prompt_ids": [tokenizer(text=p)["input_ids"] for p in prompts],
            "completion_ids": [script.completion(p) for p in prompts],
            "logprobs": None,
        }

    capture = GradientCapture()
    trainer = GRPOTrainer(
        model=model_dir, reward_funcs=reward, processing_class=tokenizer, rollout_func=rollout_func,
        args=GRPOConfig(**common_kwargs(out, loss_type, prompts, ga, **extra)),
        train_dataset=Dataset.from_dict({"prompt": prompts}), callbacks=[capture],
    )
    capture.parameters = lambda: list(trainer.model.named_parameters())
    captured = {"capture": capture}
    original = trainer._generate_and_score_completions

    def record(inputs):
        out = original(inputs)
        captured["advantages"] = out["advantages"].detach().clone()
        captured["completion_ids"] = out["completion_ids"].clone()
        captured["completion_mask"] = out["completion_mask"].clone()
        return out

    trainer._generate_and_score_completions = record
    trainer.train()
    return trainer, captured


def run_magrpo(model_dir: str, out: str, loss_type: str, prompts: list[str] = PROMPTS, ga: int = 1,
               mappings: tuple[Callable[[str], str], ...] = (same_text,), **extra):
    tokenizer = load_tokenizer(model_dir)
    scripts = [ScriptedGeneration(tokenizer, m) for m in mappings]
    n = len(mappings)
    capture = GradientCapture()
    trainer = MAGRPOTrainer(
        model=model_dir, reward_funcs=reward_digits, processing_class=tokenizer, callbacks=[capture],
        args=MAGRPOConfig(num_agents=n, num_turns=1, team_mode="models" if n > 1 else None,
                          **common_kwargs(out, loss_type, prompts, ga, **extra)),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
    )
    capture.parameters = lambda: [(f"{a}.{name}", p) for a in range(n)
                                  for name, p in trainer.team.policy(a).named_parameters()]

    def scripted_generate(prompts, generation_config, chat_template_kwargs=None):
        return Generation(prompt_ids=[[tokenizer(text=p)["input_ids"] for p in ps] for ps in prompts],
                          completion_ids=[[scripts[a].completion(p) for p in ps] for a, ps in enumerate(prompts)])

    trainer.team.generate = scripted_generate
    trainer.train()
    return trainer, capture


def keyed_advantages(completion_ids: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor) -> list:
    keys = [tuple(ids[m.bool()].tolist()) for ids, m in zip(completion_ids, mask)]
    return sorted(zip(keys, [round(float(a), 6) for a in advantages]))


def logged(trainer, key: str) -> float:
    return next(h[key] for h in trainer.state.log_history if key in h)


def assert_same_gradients(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], prefix: str = "") -> None:
    assert theirs and max(float(g.abs().max()) for g in theirs.values()) > 1e-4  # a real gradient
    for name, grad in theirs.items():
        torch.testing.assert_close(ours[prefix + name], grad, atol=1e-6, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def assert_same_weights(magrpo: MAGRPOTrainer, grpo: GRPOTrainer, model_dir: str, agent: int = 0,
                        atol: float = 1e-5) -> None:
    initial = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    theirs = dict(grpo.model.named_parameters())
    moved = 0.0
    for name, param in magrpo.team.policy(agent).named_parameters():
        torch.testing.assert_close(param.detach(), theirs[name].detach(), atol=atol, rtol=0)
        moved = max(moved, float((param.detach() - initial[name]).abs().max()))
    assert moved > 1e-4  # the step really changed the weights


def check_one_agent(model_dir: str, tmp_path, loss_type: str, prompts: list[str], ga: int) -> None:
    warnings.filterwarnings("ignore")
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), loss_type, prompts, ga)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), loss_type, prompts, ga)

    # Advantages: the same value for the same completion (pads excluded on both sides).
    ours = magrpo.last_advantages[0].cpu()
    c_ids, c_mask = pad_right(magrpo.last_rollout.turns[0].completion_ids[0], magrpo.team.tokenizers[0].pad_token_id)
    assert keyed_advantages(c_ids, c_mask, ours) == keyed_advantages(
        captured["completion_ids"].cpu(), captured["completion_mask"].cpu(), captured["advantages"].cpu()
    )
    assert ours.abs().sum() > 0  # the scripted rewards differ within groups

    # Loss: both trainers log the loss of the single step (summed over its micro-steps).
    assert logged(magrpo, "loss") == pytest.approx(logged(grpo, "loss"), abs=1e-5)
    # Gradients accumulated over the step, before the optimizer sees them.
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    # Weights after one AdamW step. With accumulation the two trainers sum the micro-batches in a different order, and
    # Adam divides by sqrt(v) + 1e-8, which turns float-rounding noise in a ~1e-9 gradient into ~1e-4 of weight: the
    # gradients above are the exact check there.
    if ga == 1:
        assert_same_weights(magrpo, grpo, model_dir)


@pytest.mark.parametrize("loss_type", SUPPORTED_LOSS_TYPES)
def test_one_agent_magrpo_equals_grpo(model_dir, tmp_path, loss_type):
    check_one_agent(model_dir, tmp_path, loss_type, PROMPTS, ga=1)


# bnpo normalises by the tokens of each micro-batch, and GRPOTrainer shuffles the generation batch before splitting
# it into micro-batches: its bnpo loss depends on that random split, so only the split-independent types compare.
@pytest.mark.parametrize("loss_type", [t for t in SUPPORTED_LOSS_TYPES if t != "bnpo"])
def test_one_agent_magrpo_equals_grpo_with_gradient_accumulation(model_dir, tmp_path, loss_type):
    check_one_agent(model_dir, tmp_path, loss_type, PROMPTS_GA, ga=2)


# the last case: each agent gets its own entropy bonus, and its own adaptive coefficient (logged per agent)
ADAPTIVE = dict(use_adaptive_entropy=True, entropy_coef=0.2, entropy_target=50.0, entropy_coef_delta=0.1, max_steps=2)


@pytest.mark.parametrize(("loss_type", "ga", "mu", "settings"),
                         [("grpo", 1, 1, {}), ("dapo", 1, 1, {}), ("dapo", 2, 1, {}), ("grpo", 1, 2, {}),
                          ("grpo", 1, 1, ADAPTIVE)])
def test_two_agents_sum_one_agent_losses(model_dir, tmp_path, loss_type, ga, mu, settings):
    # Agent 0 plays the scripted completions, agent 1 the same with every digit shifted; the team reward reads agent
    # 0's completions. So each agent's advantages are GRPO's for the matching one-agent run (agent 1's with the
    # reward undone through the shift), the team loss is the sum of the two one-agent losses, and each agent's
    # gradient is its one-agent gradient (a swapped agent or a mis-scaled loss would show here).
    warnings.filterwarnings("ignore")
    # With mu = num_iterations = 2 the check is on the second step over the same rollout (each agent's own old
    # log-probs in its importance ratio).
    prompts = PROMPTS_GA if ga > 1 else PROMPTS
    extra = dict(num_iterations=2, max_steps=2) if mu == 2 else {}
    extra.update(settings)
    grpo_0, captured_0 = run_grpo(model_dir, str(tmp_path / "grpo0"), loss_type, prompts, ga, **extra)
    grpo_1, captured_1 = run_grpo(model_dir, str(tmp_path / "grpo1"), loss_type, prompts, ga,
                                  mapping=shift_digits, reward=reward_unshifted, **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), loss_type, prompts, ga,
                                 mappings=(same_text, shift_digits), **extra)
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (magrpo, grpo_0, grpo_1)]
    assert losses[0] == pytest.approx([a + b for a, b in zip(losses[1], losses[2])], abs=1e-5)
    if settings:
        for a, grpo in enumerate((grpo_0, grpo_1)):
            ours = [h[f"agent_{a}/entropy_coef"] for h in magrpo.state.log_history if f"agent_{a}/entropy_coef" in h]
            assert ours == pytest.approx([h["entropy_coef"] for h in grpo.state.log_history if "entropy_coef" in h])
    assert_same_gradients(capture.grads, captured_0["capture"].grads, prefix="0.")
    assert_same_gradients(capture.grads, captured_1["capture"].grads, prefix="1.")
    if ga == 1:
        assert_same_weights(magrpo, grpo_0, model_dir, agent=0)
        assert_same_weights(magrpo, grpo_1, model_dir, agent=1)


@pytest.mark.parametrize(("mu", "loss_type", "ga"),
                         [(2, "grpo", 1), (2, "dapo", 1), (2, "dr_grpo", 2), (1, "grpo", 1)])
def test_one_agent_two_steps_equal_grpo(model_dir, tmp_path, mu, loss_type, ga):
    # num_iterations=2 (GRPO's mu): one rollout, two optimizer steps on it. The second step's importance ratio is
    # pi_theta / pi_theta_old with the log-probs kept at sampling time, so its gradients differ from a plain policy
    # gradient; they must be TRL's, and so must the weights after both steps. With mu=1 the second step plays new
    # rollouts; there the policy has left the reference, so the KL term's importance weight (TRL's default
    # `use_bias_correction_kl`) shows in the gradients.
    warnings.filterwarnings("ignore")
    prompts = PROMPTS_GA if ga > 1 else PROMPTS
    extra = dict(num_iterations=mu, max_steps=2, learning_rate=3e-2)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), loss_type, prompts, ga, **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), loss_type, prompts, ga, **extra)
    assert magrpo.state.global_step == grpo.state.global_step == 2
    if mu == 1:
        assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
        assert_same_weights(magrpo, grpo, model_dir)
        return
    losses = [h["loss"] for h in magrpo.state.log_history if "loss" in h]
    theirs = [h["loss"] for h in grpo.state.log_history if "loss" in h]
    assert losses == pytest.approx(theirs, abs=1e-5)
    # the second step clips (its ratio is not 1), as TRL's does; a step against the detached current policy never
    # clips. (With accumulation TRL shuffles the generation batch into other micro-batches: per-micro-batch means.)
    clipped = [h["agent_0/clip_ratio"] for h in magrpo.state.log_history if "agent_0/clip_ratio" in h]
    region = [v for h in grpo.state.log_history for k, v in h.items() if k == "clip_ratio/region_mean"]
    assert clipped[0] == 0 and clipped[1] > 0
    if ga == 1:
        assert clipped == pytest.approx(region, abs=1e-6)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    if ga == 1:
        assert_same_weights(magrpo, grpo, model_dir)


@pytest.mark.parametrize(("spg", "mu", "ga", "loss_type"),
                         [(2, 1, 1, "dapo"), (2, 2, 1, "grpo"), (1, 1, 2, "dapo"), (4, 1, 2, "dr_grpo")])
def test_one_agent_steps_per_generation_equals_grpo(model_dir, tmp_path, monkeypatch, spg, mu, ga, loss_type):
    # steps_per_generation = spg micro-batches per rollout: spg > ga spreads one rollout over several optimizer steps
    # (from the second on, the importance ratio is against the log-probs kept at sampling time); spg < ga plays
    # several rollouts per optimizer step. One prompt per micro-batch. TRL shuffles a generation's completions before
    # splitting it into micro-batches, we keep whole episodes together: TRL's shuffle is turned off here so that the
    # two trainers put the same samples in each micro-batch.
    import trl.trainer.grpo_trainer as grpo_module

    monkeypatch.setattr(grpo_module, "shuffle_sequence_dict", lambda batch: batch)
    warnings.filterwarnings("ignore")
    prompts = PROMPTS_GA if ga > 1 else PROMPTS
    steps = len(prompts) * mu // ga
    extra = dict(per_device_train_batch_size=G, steps_per_generation=spg, num_iterations=mu, max_steps=steps,
                 learning_rate=3e-2)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), loss_type, prompts, ga, **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), loss_type, prompts, ga, **extra)
    assert magrpo.state.global_step == grpo.state.global_step == steps
    losses = [h["loss"] for h in magrpo.state.log_history if "loss" in h]
    assert losses == pytest.approx([h["loss"] for h in grpo.state.log_history if "loss" in h], abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    # Adam turns float-rounding noise of a ~1e-9 gradient into ~1e-5 of weight (see above); a real difference moves
    # weights by about lr = 3e-2 per step
    assert_same_weights(magrpo, grpo, model_dir, atol=1e-4)


@pytest.mark.parametrize("importance_sampling_level", ["token", "sequence"])
def test_one_agent_top_entropy_quantile_equals_grpo(model_dir, tmp_path, importance_sampling_level):
    # the policy gradient only on the 40% highest-entropy completion tokens: TRL's gradients and weights
    warnings.filterwarnings("ignore")
    extra = dict(top_entropy_quantile=0.4, importance_sampling_level=importance_sampling_level)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "grpo", **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "grpo", **extra)
    plain, plain_capture = run_magrpo(model_dir, str(tmp_path / "plain"), "grpo")
    assert logged(magrpo, "loss") == pytest.approx(logged(grpo, "loss"), abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    assert_same_weights(magrpo, grpo, model_dir, atol=1e-4)  # Adam and ~1e-9 gradients: see the test above
    # and the mask matters: the gradient without it is another
    assert max(float((plain_capture.grads[k] - g).abs().max()) for k, g in capture.grads.items()) > 1e-3


def test_one_agent_sync_ref_model_equals_grpo(model_dir, tmp_path):
    # TR-DPO's reference sync: after step 1 the reference moves half-way to the policy (alpha 0.5), so step 2's KL
    # and its gradients depend on it; they must be TRL's.
    warnings.filterwarnings("ignore")
    extra = dict(sync_ref_model=True, ref_model_sync_steps=1, ref_model_mixup_alpha=0.5, max_steps=2,
                 learning_rate=3e-2)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "grpo", **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "grpo", **extra)
    kls = [h["agent_0/kl"] for h in magrpo.state.log_history if "agent_0/kl" in h]
    assert kls == pytest.approx([h["kl"] for h in grpo.state.log_history if "kl" in h], abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    assert_same_weights(magrpo, grpo, model_dir, atol=1e-4)
    theirs = dict(grpo.ref_model.named_parameters())
    for name, ref_param in magrpo.team.ref_models[0].named_parameters():
        torch.testing.assert_close(ref_param, theirs[name])


def test_one_agent_pad_to_multiple_of_equals_grpo(model_dir, tmp_path):
    # padded to multiples of 8 (tensor cores), the training tensors are wider but the loss and gradients unchanged
    warnings.filterwarnings("ignore")
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "dapo", pad_to_multiple_of=8)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "dapo", pad_to_multiple_of=8)
    widths = []
    original = magrpo.compute_agent_loss
    magrpo.compute_agent_loss = lambda a, logps, inputs: (widths.append(logps.shape[1]), original(a, logps, inputs))[1]
    magrpo.compute_loss(magrpo.model, magrpo._make_batch([{"prompt": p} for p in PROMPTS], mode="train"))
    assert widths and all(w % 8 == 0 for w in widths)
    assert logged(magrpo, "loss") == pytest.approx(logged(grpo, "loss"), abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    assert_same_weights(magrpo, grpo, model_dir)


def no_grpo_shuffle(monkeypatch) -> None:
    """TRL shuffles a generation's completions before splitting it into micro-batches; we keep whole episodes. For
    a per-micro-batch quantity (bnpo's normaliser, the entropy bonus's token mean) the split must be the same."""
    import trl.trainer.grpo_trainer as grpo_module

    monkeypatch.setattr(grpo_module, "shuffle_sequence_dict", lambda batch: batch)


@pytest.mark.parametrize(("loss_type", "ga", "extra"), [
    ("grpo", 1, {}),
    ("dapo", 2, {}),  # the bonus is scaled for accumulation only, whatever dapo's normaliser
    ("dr_grpo", 1, {"top_entropy_quantile": 0.5}),  # the bonus on the tokens the policy loss keeps
])
def test_one_agent_entropy_bonus_equals_grpo(model_dir, tmp_path, monkeypatch, loss_type, ga, extra):
    # entropy_coef: loss - c * H with H the mean token entropy, with its gradient
    no_grpo_shuffle(monkeypatch)
    warnings.filterwarnings("ignore")
    prompts = PROMPTS_GA if ga > 1 else PROMPTS
    extra = dict(entropy_coef=0.5, **extra)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), loss_type, prompts, ga, **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), loss_type, prompts, ga, **extra)
    plain, plain_capture = run_magrpo(model_dir, str(tmp_path / "plain"), loss_type, prompts, ga,
                                      **{k: v for k, v in extra.items() if k != "entropy_coef"})
    assert logged(magrpo, "loss") == pytest.approx(logged(grpo, "loss"), abs=1e-5)
    assert logged(magrpo, "agent_0/entropy_coef") == logged(grpo, "entropy_coef") == 0.5
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    if ga == 1:
        assert_same_weights(magrpo, grpo, model_dir, atol=1e-4)
    # the bonus has a gradient: without it the gradient is another
    assert max(float((plain_capture.grads[k] - g).abs().max()) for k, g in capture.grads.items()) > 1e-3
    assert logged(magrpo, "loss") < logged(plain, "loss")  # minus a positive entropy


def test_one_agent_adaptive_entropy_equals_grpo(model_dir, tmp_path):
    # Skywork-OR1's controller: no bonus at step 1 (no measurement yet); every step's entropy is below the target,
    # so the coefficient grows by delta per step and steps 2 and 3 get the bonus, with TRL's gradients and weights
    warnings.filterwarnings("ignore")
    extra = dict(use_adaptive_entropy=True, entropy_coef=0.2, entropy_target=50.0, entropy_coef_delta=0.1,
                 entropy_coef_max=0.35, max_steps=3, learning_rate=3e-2)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "grpo", **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "grpo", **extra)
    coefs = [h["agent_0/entropy_coef"] for h in magrpo.state.log_history if "agent_0/entropy_coef" in h]
    assert coefs == pytest.approx([h["entropy_coef"] for h in grpo.state.log_history if "entropy_coef" in h])
    assert coefs == pytest.approx([0.3, 0.35, 0.35])  # + delta per step, capped at entropy_coef_max
    losses = [h["loss"] for h in magrpo.state.log_history if "loss" in h]
    assert losses == pytest.approx([h["loss"] for h in grpo.state.log_history if "loss" in h], abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    assert_same_weights(magrpo, grpo, model_dir, atol=1e-4)


@pytest.mark.parametrize("importance_sampling_level", ["token", "sequence"])
def test_one_agent_off_policy_mask_equals_grpo(model_dir, tmp_path, importance_sampling_level):
    # num_iterations=2: on the second pass over the rollout the policy has moved, and the negative-advantage
    # samples that drifted further than the threshold leave the loss (DeepSeek-V3.2's mask), as in TRL. A wide clip
    # range (epsilon 0.9), or the clip alone would already zero the gradient of most drifted samples.
    warnings.filterwarnings("ignore")
    extra = dict(num_iterations=2, max_steps=2, learning_rate=3e-3, epsilon=0.9,
                 off_policy_mask_threshold=OFF_POLICY_THRESHOLD, importance_sampling_level=importance_sampling_level)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "grpo", **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "grpo", **extra)
    plain, plain_capture = run_magrpo(model_dir, str(tmp_path / "plain"), "grpo",
                                      **{k: v for k, v in extra.items() if k != "off_policy_mask_threshold"})
    losses = [h["loss"] for h in magrpo.state.log_history if "loss" in h]
    assert losses == pytest.approx([h["loss"] for h in grpo.state.log_history if "loss" in h], abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    assert_same_weights(magrpo, grpo, model_dir, atol=1e-4)
    # the mask dropped something at step 2 (the first step is on-policy: nothing drifted, nothing dropped)
    assert max(float((plain_capture.grads[k] - g).abs().max()) for k, g in capture.grads.items()) > 1e-3


def test_one_agent_cast_lm_head_to_fp32_equals_grpo(model_dir, tmp_path):
    # a bf16 model whose LM head (tied to the embeddings here) is kept and computed in float32 (ScaleRL), policy and
    # reference alike: TRL's loss and gradients (the bf16 layers' exactly), another gradient than a bf16 head gives
    warnings.filterwarnings("ignore")
    extra = dict(cast_lm_head_to_fp32=True, model_init_kwargs={"dtype": torch.bfloat16})
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "grpo", **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "grpo", **extra)
    plain, plain_capture = run_magrpo(model_dir, str(tmp_path / "plain"), "grpo",
                                      model_init_kwargs={"dtype": torch.bfloat16})
    for model in (magrpo.team.models[0], magrpo.team.ref_models[0]):
        assert model.lm_head.weight.dtype == torch.float32
        assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert logged(magrpo, "loss") == pytest.approx(logged(grpo, "loss"), abs=1e-5)
    assert_same_gradients(capture.grads, captured["capture"].grads, prefix="0.")
    assert_same_weights(magrpo, grpo, model_dir)
    differences = [float((plain_capture.grads[k].float() - g.float()).abs().max()) for k, g in capture.grads.items()]
    assert max(differences) > 1e-3


def test_one_agent_bf16_autocast_equals_grpo(model_dir, tmp_path):
    # float32 weights under bf16 autocast (CPU), num_iterations=2 and beta > 0: TRL computes the old-policy and
    # reference log-probs under the same autocast as the training forward, so its first step has ratio 1 and KL 0;
    # so must ours. The two then differ by the precision of the log-softmax only (TRL's of the bf16 logits, ours in
    # float32 from the same bf16 logits): 6e-5 in the second step's loss, 4% of the largest gradient element here.
    # Old-policy and reference forwards outside autocast gave a KL of 3e-6 and a loss of 6e-4 at the first step,
    # a second-step loss 6e-4 off and gradients 19% off.
    warnings.filterwarnings("ignore")
    extra = dict(num_iterations=2, max_steps=2, learning_rate=3e-2, bf16=True, use_cpu=True)
    grpo, captured = run_grpo(model_dir, str(tmp_path / "grpo"), "grpo", **extra)
    magrpo, capture = run_magrpo(model_dir, str(tmp_path / "magrpo"), "grpo", **extra)
    assert magrpo.accelerator.mixed_precision == grpo.accelerator.mixed_precision == "bf16"
    ours = [h for h in magrpo.state.log_history if "loss" in h]
    theirs = [h for h in grpo.state.log_history if "loss" in h]
    assert [h["agent_0/kl"] for h in ours][0] == pytest.approx(0.0, abs=1e-9) == theirs[0]["kl"]
    assert [h["loss"] for h in ours] == pytest.approx([h["loss"] for h in theirs], abs=2e-4)
    assert ours[1]["agent_0/kl"] == pytest.approx(theirs[1]["kl"], abs=5e-4) and theirs[1]["kl"] > 0.1
    assert [h["agent_0/clip_ratio"] for h in ours] == pytest.approx(
        [h["clip_ratio/region_mean"] for h in theirs], abs=1e-6)
    largest = max(float(g.abs().max()) for g in captured["capture"].grads.values())
    assert largest > 1e-3
    for name, grad in captured["capture"].grads.items():
        torch.testing.assert_close(capture.grads["0." + name], grad, atol=0.1 * largest, rtol=0, msg=name)
