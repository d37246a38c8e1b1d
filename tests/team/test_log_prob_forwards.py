"""Log-prob forwards that stop before the last token, and generation / no-grad forwards under `inference_mode`.

The log-probability of token t comes from the logits at position t - 1: the forward over prompt + completion never
needs the last token as input (`trl_marl.team.forward`). Every test here checks two things: the trimmed forward
really ran (the model saw one column fewer, or ran under inference mode), and what comes out is what the full layout
(TRL's: the whole sequence in, the last position's logits thrown away) gives, gradients included.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig, PreTrainedTokenizerBase

from helpers import text_batch
from trl_marl.core import entropy_from_logits, selective_log_softmax
from trl_marl.legacy import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer
from trl_marl.team import AgentBatch, AgentTeam, pad_left, pad_right, sequence_model_inputs, tokenize_prompts
from trl_marl.team.forward import dropout_active, no_autograd
from trl_marl.team.head import head_path_checked
from trl_marl.toy import build_toy_model
from trl_marl.trainers.base import TeamTrainer
from trl_marl.trainers.ppo.value import build_value_models, response_values, sequence_scores

PROMPTS = [["Q:12+3=A:", "T:5?", "Q:7="], ["Q:1+1=A:", "Q:45+67=A:", "9"]]  # left padding
COMPLETIONS = [["15", "7 ", "1234"], ["2", "112", ""]]  # right padding (every completion ends with EOS)


def make_team(tokenizer: PreTrainedTokenizerBase, mode: str, share_prompt_prefill: bool = True) -> AgentTeam:
    torch.manual_seed(0)
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0) if mode == "adapters" else None
    team = AgentTeam.build(model, 2, mode=mode, peft_config=lora, processing_class=tokenizer)
    team.share_prompt_prefill = share_prompt_prefill
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # agents that differ (LoRA B starts at zero)
        for name, param in team.named_parameters():
            if mode == "models" or "lora_" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    return probed(team)


def probed(team: AgentTeam) -> AgentTeam:
    """`team` after the one-time probe of each of its models (`team.head`: a forward of the model and of its
    backbone on a probe input), so that the recorders below see the team's own forwards only."""
    for model in [*team.models, *team.ref_models]:
        if model is not None:
            head_path_checked(model)
    return team


class Recorder:
    """Records, for every forward of `model`'s backbone (`model.model` of a causal LM, under any PEFT wrapper), the
    width of its `input_ids` and whether it ran in inference mode. The backbone, because the log-probability forwards
    call it and then the LM head a chunk of positions at a time (`core.head_logprobs`), without the model's own
    forward; every full forward calls it too."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.widths: list[int] = []
        self.inference: list[bool] = []
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.handle = base.model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.widths.append(ids.size(1))
        self.inference.append(torch.is_inference_mode_enabled())

    def remove(self) -> None:
        self.handle.remove()


def full_layout(team: AgentTeam, agent: int, batch: AgentBatch, reference: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's layout: the whole sequence in, logits of every position out, the last one thrown away."""
    width = batch.completion_ids.size(1)
    with team.acting(agent, reference) as model:
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, -width - 1 : -1]
    logits = logits / team.temperature
    return selective_log_softmax(logits, batch.completion_ids), entropy_from_logits(logits.detach())


def grads(team: AgentTeam) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
    team.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize(("mode", "joint"), [("models", False), ("adapters", False), ("adapters", True)],
                         ids=["models", "adapters", "adapters-joint"])
def test_training_forward_stops_before_the_last_token(tokenizer: PreTrainedTokenizerBase, mode: str,
                                                      joint: bool) -> None:
    team = make_team(tokenizer, mode)
    team.train()
    team.joint_adapter_forward = joint  # one forward over both agents' rows (`AgentTeam._joint_logps`), or one each
    team.temperature = 0.7
    batches = [text_batch(tokenizer, PROMPTS[a], COMPLETIONS[a]) for a in range(2)]
    recorders = [Recorder(team.base_model_of(a)) for a in range(2)] if mode == "models" else [
        Recorder(team.base_model_of(0))]
    results = team(batches, compute_entropy=True)
    for r in recorders:
        r.remove()
    widths = [w for r in recorders for w in r.widths]
    if joint:  # the widest prompt and the widest completion, one column fewer
        assert widths == [max(b.prompt_ids.size(1) for b in batches) + max(b.completion_ids.size(1) for b in batches)
                          - 1]
    else:
        assert widths == [b.input_ids.size(1) - 1 for b in batches]  # one column fewer than prompt + completion
    weights = [torch.linspace(0.5, 1.5, b.completion_ids.numel()).view_as(b.completion_ids) for b in batches]
    sum(((r[0] * w) * b.completion_mask).sum() for r, w, b in zip(results, weights, batches)).backward()
    ours = grads(team)
    expected = [full_layout(team, a, batches[a]) for a in range(2)]
    sum(((e[0] * w) * b.completion_mask).sum() for e, w, b in zip(expected, weights, batches)).backward()
    theirs = grads(team)
    for (logps, entropy), (full_logps, full_entropy), batch in zip(results, expected, batches):
        assert logps.shape == batch.completion_ids.shape
        torch.testing.assert_close(logps, full_logps, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(entropy, full_entropy, atol=1e-6, rtol=1e-5)
    assert ours.keys() == theirs.keys() and len(ours) > 0
    for name in ours:
        # An element sums terms of the tensor's scale, so the float rounding of the one-column-narrower matmuls scales
        # with the largest |g| (16 here), not with the element: one CPU put embedding-gradient elements of 4e-4 off by
        # 3e-6 (largest difference 9e-6, 5e-7 of max |g|). The tolerance is 2e-6 of max |g| on top of 1e-6.
        atol = 1e-6 + 2e-6 * float(theirs[name].abs().max())
        torch.testing.assert_close(ours[name], theirs[name], atol=atol, rtol=1e-5, msg=name)


def test_dropout_keeps_the_full_layout(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team(tokenizer, "models")
    model = team.policy(0)
    team.train()
    assert not dropout_active(model)  # the toy model has no dropout
    model.model.layers[1].self_attn.attention_dropout = 0.5  # what transformers passes to the attention kernel
    assert dropout_active(model)
    batch = text_batch(tokenizer, PROMPTS[0], COMPLETIONS[0])
    recorder = Recorder(model)
    torch.manual_seed(3)
    logps = team([batch, None])[0][0]
    recorder.remove()
    assert recorder.widths == [batch.input_ids.size(1)]  # TRL's layout, so dropout draws TRL's masks
    torch.manual_seed(3)
    full_logps, _ = full_layout(team, 0, batch)
    torch.testing.assert_close(logps, full_logps)  # the same masks: the same random draws over the same shapes
    model.eval()
    assert not dropout_active(model)
    model.train()
    model.model.layers[1].self_attn.attention_dropout = 0.0
    assert not dropout_active(model)
    other = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0).train()
    other.model.layers[0].mlp.add_module("drop", torch.nn.Dropout(0.1))  # an `nn.Dropout` module counts too
    assert dropout_active(other)
    TeamTrainer.disable_dropout([other])  # what `disable_dropout=True` does: p = 0
    assert not dropout_active(other)


@pytest.mark.parametrize("reference", [False, True])
def test_no_grad_log_probs_run_in_inference_mode_and_return_normal_tensors(
    tokenizer: PreTrainedTokenizerBase, reference: bool
) -> None:
    team = make_team(tokenizer, "models")
    team.create_reference_models()
    probed(team)
    team.train()
    batch = text_batch(tokenizer, PROMPTS[1], COMPLETIONS[1])
    with team.acting(1, reference) as model:
        recorder = Recorder(model)
    logps = team.reference_logps(1, batch) if reference else team.policy_logps(1, batch)
    recorder.remove()
    assert recorder.inference == [True] and recorder.widths == [batch.input_ids.size(1) - 1]
    assert not logps.is_inference() and not logps.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(logps, full_layout(team, 1, batch, reference)[0], atol=1e-6, rtol=1e-5)
    # a loss may save it for the backward and change it in place (inference tensors allow neither)
    current = team([None, batch])[1][0]
    (current * logps).sum().backward()
    logps.mul_(2.0)
    assert team.policy(1).model.embed_tokens.weight.grad is not None


@pytest.mark.parametrize("share_prompt_prefill", [False, True])
def test_generate_runs_in_inference_mode_samples_as_before_and_training_follows(
    tokenizer: PreTrainedTokenizerBase, share_prompt_prefill: bool
) -> None:
    team = make_team(tokenizer, "models", share_prompt_prefill)
    prompts = [["Q:1+2=A:"] * 4 + ["Q:30+4=A:"] * 2, ["Q:5+5=A:"] * 6]
    config = GenerationConfig(max_new_tokens=5, do_sample=True, temperature=1.0, top_k=None, top_p=1.0,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    recorders = [Recorder(team.policy(a)) for a in range(2)]
    torch.manual_seed(7)
    generated = team.generate(prompts, config, stop_token_ids=set())
    for r in recorders:
        r.remove()
    assert all(r.inference and all(r.inference) for r in recorders)
    if not share_prompt_prefill:  # the same draws as a plain `generate` under `no_grad`, bit for bit
        torch.manual_seed(7)
        for a in range(2):
            ids, mask = pad_left(tokenize_prompts(tokenizer, prompts[a]), tokenizer.pad_token_id)
            with torch.no_grad():
                out = team.policy(a).eval().generate(input_ids=ids, attention_mask=mask, generation_config=config)
            assert generated[a][1] == out[:, ids.size(1):].tolist()
    # the completions (token id lists) make a training batch; a training step runs after generation
    team.train()
    batches = []
    for a in range(2):
        p_ids, p_mask = pad_left(generated[a][0], tokenizer.pad_token_id)
        c_ids, c_mask = pad_right(generated[a][1], tokenizer.pad_token_id)
        batches.append(AgentBatch(p_ids, p_mask, c_ids, c_mask))
    optimizer = torch.optim.AdamW(team.parameters(), lr=1e-2)
    before = team.policy(0).lm_head.weight.detach().clone()
    loss = -sum((r[0] * b.completion_mask).sum() for r, b in zip(team(batches), batches))
    loss.backward()
    optimizer.step()
    assert not torch.equal(before, team.policy(0).lm_head.weight)
    assert not any(p.is_inference() for p in team.parameters())


@pytest.mark.parametrize("reference", [False, True])
def test_ppo_response_logits_and_values_skip_the_prompt_and_the_last_token(
    tokenizer: PreTrainedTokenizerBase, reference: bool
) -> None:
    team = make_team(tokenizer, "adapters")
    team.train()
    pad = tokenizer.pad_token_id
    queries, _ = pad_left(tokenize_prompts(tokenizer, PROMPTS[0]), pad)
    responses, _ = pad_right([tokenizer(c)["input_ids"] + [tokenizer.eos_token_id] for c in COMPLETIONS[0]], pad)
    query_responses, context = torch.cat([queries, responses], 1), queries.size(1)
    recorder = Recorder(team.base_model_of(0))
    logits = team.response_logits(0, query_responses, context, pad, reference=reference)
    recorder.remove()
    assert recorder.widths == [query_responses.size(1) - 1]
    full = team.sequence_logits(0, query_responses, pad, reference=reference)
    assert logits.shape == (len(queries), responses.size(1), full.size(-1))
    torch.testing.assert_close(logits, full[:, context - 1 : -1], atol=1e-6, rtol=1e-5)
    value_model = build_value_models(None, team)[0]
    values = response_values(value_model, query_responses, pad, context)
    full_values, _ = sequence_scores(value_model, query_responses, pad, context)
    torch.testing.assert_close(values, full_values[:, context - 1 : -1], atol=1e-6, rtol=1e-5)
    assert sequence_model_inputs(query_responses, pad)["input_ids"].size(1) == query_responses.size(1)


def test_legacy_forward_stops_before_the_last_column(tokenizer: PreTrainedTokenizerBase) -> None:
    torch.manual_seed(0)
    model = AutoModelForCausalLMWithValueHead(build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0))
    trainer = PPOTrainer(PPOConfig(batch_size=3, mini_batch_size=3), model, None, tokenizer)
    queries = [torch.tensor(tokenizer(t)["input_ids"]) for t in PROMPTS[1]]
    responses = [torch.tensor([5, 6, 2]), torch.tensor([7, 2]), torch.tensor([8, 9, 10, 11, 2])]
    layout = trainer._layout(queries, responses, None)
    model.eval()
    recorder = Recorder(model.pretrained_model)
    logps, values, logits = trainer._forward(model, layout, with_values=True, keep_logits=True)
    recorder.remove()
    assert recorder.widths == [layout.input_ids.size(1) - 1]
    with torch.no_grad():
        full_logits, _, full_values = model(input_ids=layout.input_ids, attention_mask=layout.attention_mask)
        index = layout.positions.unsqueeze(-1).expand(-1, -1, full_logits.size(-1))
        window = full_logits.gather(1, index)
        torch.testing.assert_close(logits.detach(), window, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(logps.detach(), selective_log_softmax(window, layout.targets), atol=1e-6,
                                   rtol=1e-5)
        torch.testing.assert_close(values.detach(), full_values.gather(1, layout.positions), atol=1e-6, rtol=1e-5)


class CountingTokenizer:
    """Passes calls on to a tokenizer and records the prompts of each call."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.calls: list[list] = []

    def __call__(self, text: list[str]) -> dict:
        self.calls.append(list(text))
        return self.tokenizer(text=text)

    def apply_chat_template(self, conversation: list, **kwargs: object) -> dict:
        self.calls.append(list(conversation))
        return self.tokenizer.apply_chat_template(conversation=conversation, **kwargs)


def test_repeated_prompts_are_tokenized_once(tokenizer: PreTrainedTokenizerBase) -> None:
    counting = CountingTokenizer(tokenizer)
    texts = ["T=10:", "Q:1+1=A:", "T=10:", "T=10:", "Q:1+1=A:"]
    ids = tokenize_prompts(counting, texts)
    assert counting.calls == [["T=10:", "Q:1+1=A:"]]
    assert ids == [tokenizer(t)["input_ids"] for t in texts]
    ids[0].append(99)  # every row owns its list
    assert ids[2] == tokenizer("T=10:")["input_ids"]
    chats = [[{"role": "user", "content": t}] for t in texts]
    counting.calls.clear()
    chat_ids = tokenize_prompts(counting, chats)
    assert len(counting.calls) == 1 and len(counting.calls[0]) == 2
    assert chat_ids == [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                                      return_dict=True)["input_ids"] for c in chats]
    # messages with a field that is not a string are not compared: every row is tokenized, as before
    counting.calls.clear()
    odd = [[{"role": "user", "content": "T=10:", "meta": 1}]] * 3
    tokenize_prompts(counting, odd)
    assert len(counting.calls[0]) == 3


def test_no_autograd_is_inference_mode_unless_torch_distributed_runs(tmp_path: Path) -> None:
    with no_autograd():
        assert torch.is_inference_mode_enabled()
    assert not torch.distributed.is_initialized()
    # FSDP and ZeRO-3 swap parameters in place under version-counter guards: any distributed run keeps `no_grad`
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with no_autograd():
            assert not torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
    finally:
        torch.distributed.destroy_process_group()
