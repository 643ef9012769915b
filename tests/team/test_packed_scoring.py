"""Packed scoring equals the padded forward (values and gradients), and refuses what it cannot do."""

from __future__ import annotations

import contextlib

import pytest
import torch
from peft import LoraConfig
from torch.utils.checkpoint import CheckpointError

from comlrl_lightning.defaults import build_char_tokenizer
from comlrl_lightning.team import activation_checkpointing as checkpointing
from comlrl_lightning.team import packed_scoring
from comlrl_lightning.team.team import Team, pack_sequences


def _llama(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_char_tokenizer()
    options = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    options.update(overrides)
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**options)), tokenizer


def _batch(tokenizer):
    """Shared prompts (winner/loser), distinct ones, a one-token prompt, an unscored row, a row
    whose only scored token is its first, and every-token scoring with the EOS."""
    encode = lambda text: tokenizer(text)["input_ids"]  # noqa: E731
    eos = tokenizer.eos_token_id
    prompts = [
        encode("topic: abc\nwriter:"),
        encode("topic: abc\nwriter:"),
        encode("topic: qq\nmatcher:"),
        encode("a"),
        encode("topic: abc\nwriter:"),
        encode("topic: long prompt here\nwriter:"),
    ]
    completions = [
        encode(" aeiou") + [eos],
        encode(" xy") + [eos],
        encode(" hello there") + [eos],
        encode(" b") + [eos],
        encode(" zzzz") + [eos],
        encode(" q") + [eos],
    ]
    scored = [6, 3, 12, 2, 0, 1]
    return pack_sequences(prompts, completions, scored, eos)


@contextlib.contextmanager
def _counting_packed_calls():
    from transformers import AttentionInterface

    calls, original = [], packed_scoring.packed_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    AttentionInterface.register(packed_scoring.ATTENTION_NAME, counting)
    try:
        yield calls
    finally:
        AttentionInterface.register(packed_scoring.ATTENTION_NAME, original)


def _padded(team, batch, agent=0):
    """The reference: one padded forward, no packing."""
    token = team._token_logprobs(agent, batch["input_ids"], batch["attention_mask"], batch["score_mask"].shape[1])
    return (token * batch["score_mask"]).sum(dim=-1)


@pytest.mark.parametrize("source", ["llama", "embedded"])
def test_packed_logprobs_and_gradients_equal_the_padded_forward(source):
    if source == "llama":
        model, tokenizer = _llama()
        team = Team([model], tokenizers=tokenizer)
    else:
        team = Team(["embedded"])
        tokenizer = team.tokenizers[0]
    batch = _batch(tokenizer)
    model = team.agents[0]
    with _counting_packed_calls() as calls:
        packed = team.score([batch], unit="sequence", agents=[0])[0]
    assert len(calls) == model.config.num_hidden_layers  # one packed call per layer: the packed path ran
    padded = _padded(team, batch)
    assert packed[4] == 0.0 and packed[5] != 0.0
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-4)

    weights = torch.linspace(0.5, 1.5, packed.shape[0])
    grads = []
    for scorer in (lambda: team.score([batch], unit="sequence", agents=[0])[0], lambda: _padded(team, batch)):
        model.zero_grad(set_to_none=True)
        (scorer() * weights).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-5, msg=name)
    assert model.config._attn_implementation != packed_scoring.ATTENTION_NAME  # restored


def test_token_logprobs_match_the_padded_ones_up_to_the_last_scored_token():
    model, tokenizer = _llama()
    team = Team([model], tokenizers=tokenizer)
    batch = _batch(tokenizer)
    width = batch["score_mask"].shape[1]
    packed = team._token_logprobs(0, batch["input_ids"], batch["attention_mask"], width, score_mask=batch["score_mask"])
    padded = team._token_logprobs(0, batch["input_ids"], batch["attention_mask"], width)
    fed = torch.arange(width) < torch.tensor([6, 3, 12, 2, 0, 1]).unsqueeze(1)
    torch.testing.assert_close(packed[fed], padded[fed], rtol=1e-5, atol=1e-4)
    assert bool((packed[~fed] == 0).all())


def test_the_layout_feeds_each_distinct_prompt_once_and_no_padding():
    tokenizer = build_char_tokenizer()
    batch = _batch(tokenizer)
    layout = packed_scoring.build_layout(batch["input_ids"], batch["attention_mask"], batch["score_mask"])
    width = batch["score_mask"].shape[1]
    prompts = batch["input_ids"][:, :-width]
    distinct = {tuple(row[mask.bool()].tolist()) for row, mask in zip(prompts, batch["attention_mask"][:, :-width])}
    scored = (6, 3, 12, 2, 0, 1)
    fed = [max(n - 1, 0) for n in scored]  # completion tokens up to the one before the last scored
    assert len(distinct) == 4
    assert layout.input_ids.shape[1] == sum(len(p) for p in distinct) + sum(fed)
    assert layout.keep.shape[0] == sum(scored)
    assert all(int(c) < scored[int(r)] for r, c in zip(layout.owner, layout.column))
    assert sorted(set(layout.owner.tolist())) == [0, 1, 2, 3, 5]  # row 4 scores nothing


def test_a_short_sliding_window_falls_back_to_the_padded_forward():
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = MistralForCausalLM(
        MistralConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=4,
            pad_token_id=tokenizer.eos_token_id,
        )
    )
    team = Team([model], tokenizers=tokenizer)
    batch = _batch(tokenizer)
    assert packed_scoring.packed_token_logprobs(model, **batch) is None and model in packed_scoring._UNSUPPORTED
    torch.testing.assert_close(team.score([batch], unit="sequence", agents=[0])[0], _padded(team, batch))
    assert model.config._attn_implementation != packed_scoring.ATTENTION_NAME


def test_nothing_scored_or_no_prompt_means_no_layout():
    tokenizer = build_char_tokenizer()
    batch = pack_sequences([[1, 2]], [[3, 4]], [0], tokenizer.eos_token_id)
    assert packed_scoring.build_layout(**batch) is None


def test_lora_agents_are_scored_packed_through_their_adapter():
    from comlrl_lightning.team.lora import build_lora_agents

    team = Team(
        build_lora_agents("embedded", 2, LoraConfig(r=4, lora_alpha=16)), tokenizers=Team(["embedded"]).tokenizers[0]
    )
    batch = _batch(team.tokenizers[0])
    with torch.no_grad():
        for adapter in team.agents[1].trainable_parameters():
            adapter.add_(0.05)  # agent 1's adapter differs from agent 0's
    for agent in range(2):
        packed = packed_scoring.packed_token_logprobs(team.agents[agent], **batch)
        assert packed is not None and team.agents[agent] not in packed_scoring._UNSUPPORTED
        packed = (packed * batch["score_mask"]).sum(dim=-1)
        torch.testing.assert_close(packed, _padded(team, batch, agent), rtol=1e-5, atol=1e-4)
    # the reference policy of a LoRA team (adapters disabled) is scored packed too
    view, width = team.agents[1].base_model_view(), batch["score_mask"].shape[1]
    args = (1, batch["input_ids"], batch["attention_mask"], width)
    packed = team._token_logprobs(*args, model=view, score_mask=batch["score_mask"])
    padded = team._token_logprobs(*args, model=view)
    assert view not in packed_scoring._UNSUPPORTED
    torch.testing.assert_close(
        (packed * batch["score_mask"]).sum(-1), (padded * batch["score_mask"]).sum(-1), rtol=1e-5, atol=1e-4
    )
    assert not torch.allclose((padded * batch["score_mask"]).sum(-1), _padded(team, batch, 1))  # the adapter mattered


def _gradients(team, batch):
    model = team.agents[0]
    model.zero_grad(set_to_none=True)
    team.score([batch], unit="sequence", agents=[0])[0].sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_packed_with_the_same_gradients(monkeypatch, reentrant):
    model, tokenizer = _llama()
    batch = _batch(tokenizer)
    team = Team([model], tokenizers=tokenizer)
    model.train()
    packed = _gradients(team, batch)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    with _counting_packed_calls() as calls:
        checkpointed = _gradients(team, batch)
    assert len(calls) == 2 * 2  # two layers, each attended in the forward and again in its recomputation
    assert model not in packed_scoring._UNSUPPORTED
    for name, grad in checkpointed.items():
        torch.testing.assert_close(grad, packed[name], rtol=1e-4, atol=1e-5, msg=name)
    for layer in model.model.layers:  # the call leaves the model's own checkpoint function in place
        assert layer._gradient_checkpointing_func.func is not checkpointing._checkpoint_inside
    if reentrant:
        return
    # negative control: a recomputation that does not attend packed is caught (it saves other tensors)
    monkeypatch.setattr(
        checkpointing, "_checkpoint_inside", lambda checkpoint, state, function, *args: checkpoint(function, *args)
    )
    with pytest.raises(CheckpointError, match="different number of tensors"):
        _gradients(team, batch)


def _repeated_gradients(team, batch, runs):
    model, grads = team.agents[0], []
    for _ in range(runs):
        model.zero_grad(set_to_none=True)
        team.score([batch], unit="sequence", agents=[0])[0].sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return grads


@pytest.mark.slow  # 18 backward passes of 128 rows on two threads
def test_packed_gradients_repeat_bit_for_bit_on_several_threads(monkeypatch):
    """Sixteen rows share each prompt (pairs of one item), so the same keys are gathered into many
    rows; their gradients must add up in a fixed order for runs to repeat (and resume) exactly."""
    team = Team(["embedded"])
    tokenizer = team.tokenizers[0]
    encode = lambda text: tokenizer(text)["input_ids"]  # noqa: E731
    prompts = [encode(f"topic: {'abcdefgh'[k % 8] * (3 + k % 5)}\nwriter:") for k in range(8)] * 16
    completions = [encode(" " + "aeiouxyz"[k % 8] * (5 + k % 27)) + [tokenizer.eos_token_id] for k in range(128)]
    batch = pack_sequences(prompts, completions, [len(c) - 1 for c in completions], tokenizer.eos_token_id)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = _repeated_gradients(team, batch, runs=6)
        assert all(torch.equal(grads[0], g) for g in grads[1:])
        # the check can fail: gathering with advanced indexing (an accumulating index_put in backward) does
        monkeypatch.setattr(packed_scoring, "_gather", lambda tokens, index: tokens[index])
        grads = _repeated_gradients(team, batch, runs=12)  # differed in 20 of 20 trials
        assert not all(torch.equal(grads[0], g) for g in grads[1:])
    finally:
        torch.set_num_threads(threads)
