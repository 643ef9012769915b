"""The fused, chunked LM head: the log-probs and gradients of materialised logits, without them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig
from torch import nn

from comlrl_lightning.team.fused_head import (
    captured_head,
    fusable_head,
    linear_logprobs,
)
from comlrl_lightning.team.lora import build_lora_agents
from comlrl_lightning.team.team import Team
from tests.team.test_packed_scoring import _batch, _llama


def _materialised(hidden, weight, bias, targets):
    logits = F.linear(hidden, weight, bias).float()
    return F.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_values_and_gradients_equal_the_materialised_head(dtype, tolerance, with_bias):
    torch.manual_seed(0)
    hidden = torch.randn(11, 16, dtype=dtype, requires_grad=True)
    weight = torch.randn(40, 16, dtype=dtype, requires_grad=True)
    bias = torch.randn(40, dtype=dtype, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 40, (11,))
    upstream = torch.randn(11)
    ours = linear_logprobs(hidden, weight, bias, targets, chunk=3)  # chunks of 3, 3, 3, 2
    assert ours.dtype == torch.float32
    grads = torch.autograd.grad((ours * upstream).sum(), [hidden, weight] + ([bias] if with_bias else []))
    expected = _materialised(hidden, weight, bias, targets)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), [hidden, weight] + ([bias] if with_bias else []))
    torch.testing.assert_close(ours, expected, rtol=tolerance, atol=tolerance)
    for got, want in zip(grads, expected_grads):
        assert got.dtype == want.dtype
        # bf16 gradients are sums of rounded terms: compare against the gradient's own scale
        scale = float(want.float().abs().max())
        torch.testing.assert_close(got.float(), want.float(), rtol=tolerance, atol=tolerance * max(scale, 1.0) * 2)


def test_autocast_runs_the_product_in_the_autocast_dtype_like_a_linear_layer():
    torch.manual_seed(1)
    hidden, weight = torch.randn(5, 8, requires_grad=True), torch.randn(30, 8, requires_grad=True)
    targets = torch.randint(0, 30, (5,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = linear_logprobs(hidden, weight, None, targets)
        expected = F.log_softmax(F.linear(hidden, weight).float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    ours.sum().backward()
    assert hidden.grad.dtype == weight.grad.dtype == torch.float32


def _team(kind: str, dtype=torch.float32):
    if kind == "gpt2":  # the embedded default: tied input and output embeddings
        return Team(["embedded"], dtype="float32" if dtype == torch.float32 else "bfloat16")
    model, tokenizer = _llama(tie_word_embeddings=False)
    return Team([model.to(dtype)], tokenizers=tokenizer)


def _with_head(team, fused):
    """The same agents and tokenizers as ``team``, scored with the ``fused_head`` option ``fused``."""
    return Team(list(team.agents), team.tokenizers, fused_head=fused)


def _scores_and_grads(team, fused, packed):
    team = _with_head(team, fused)
    team.zero_grad()
    batch = _batch(team.tokenizers[0])
    score_mask = batch["score_mask"] if packed else None
    logprobs = team._token_logprobs(
        0, batch["input_ids"], batch["attention_mask"], batch["score_mask"].shape[1], score_mask=score_mask
    )
    (logprobs * batch["score_mask"]).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in team.named_parameters() if p.grad is not None}
    return (logprobs * batch["score_mask"]).detach(), grads


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize(
    "kind, dtype, tolerance",
    [
        ("gpt2", torch.float32, 1e-5),
        ("llama", torch.float32, 1e-5),
        ("gpt2", torch.bfloat16, 3e-2),
        ("llama", torch.bfloat16, 3e-2),
    ],
    ids=["gpt2-fp32", "llama-fp32", "gpt2-bf16", "llama-bf16"],
)
def test_team_scoring_with_the_fused_head_equals_the_materialised_logits(kind, dtype, tolerance, packed):
    team = _team(kind, dtype)
    head = fusable_head(team.agents[0])
    assert head is not None
    if kind == "gpt2":  # tied: the head's weight is the input embedding, one parameter
        assert head.weight is team.agents[0].get_input_embeddings().weight
    fused, fused_grads = _scores_and_grads(team, None, packed)
    materialised, grads = _scores_and_grads(team, False, packed)
    torch.testing.assert_close(fused, materialised, rtol=tolerance, atol=tolerance)
    assert fused_grads.keys() == grads.keys() and any("wte" in n or "lm_head" in n or "embed" in n for n in grads)
    for name in grads:
        torch.testing.assert_close(
            fused_grads[name].float(), grads[name].float(), rtol=tolerance, atol=tolerance, msg=name
        )


def test_lora_agents_score_with_the_fused_head():
    agents = build_lora_agents("embedded", 2, LoraConfig(r=4, lora_alpha=8))
    team = Team(agents, tokenizers=Team(["embedded"]).tokenizers[0])
    for parameter in team.parameters():
        if parameter.requires_grad:
            parameter.data.add_(0.01 * torch.randn_like(parameter))  # LoRA B starts at zero: make it count
    assert fusable_head(team.agents[1]) is not None
    for packed in (True, False):
        fused, fused_grads = _scores_and_grads(team, None, packed)
        materialised, grads = _scores_and_grads(team, False, packed)
        torch.testing.assert_close(fused, materialised, rtol=1e-5, atol=1e-5)
        assert any("lora_" in name for name in grads)
        for name in grads:
            torch.testing.assert_close(fused_grads[name], grads[name], rtol=1e-5, atol=1e-6, msg=name)


def test_heads_that_are_not_a_plain_linear_map_fall_back_or_are_refused():
    team = _team("llama")
    model = team.agents[0]
    model.config.final_logit_softcapping = 30.0  # Gemma 2 style: the fused path would be wrong
    assert fusable_head(model) is None
    batch = _batch(team.tokenizers[0])
    width = batch["score_mask"].shape[1]
    automatic = _with_head(team, None)  # falls back to the materialised logits
    assert automatic._token_logprobs(0, batch["input_ids"], batch["attention_mask"], width).shape == (6, width)
    with pytest.raises(ValueError, match="fused_lm_head: true needs a plain linear LM head"):
        _with_head(team, True)._token_logprobs(0, batch["input_ids"], batch["attention_mask"], width)

    class ScaledHead(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    model.config.final_logit_softcapping = None
    model.lm_head = ScaledHead(32, model.config.vocab_size, bias=False)
    assert fusable_head(model) is None


def test_the_captured_head_is_restored_even_after_an_error():
    head = nn.Linear(4, 7)
    with pytest.raises(RuntimeError):
        with captured_head(head) as inputs:
            assert head(torch.ones(2, 4)).shape == (2, 1) and len(inputs) == 1
            raise RuntimeError("boom")
    assert head(torch.ones(2, 4)).shape == (2, 7)


@pytest.mark.parametrize("option", [None, True, False])
def test_the_module_option_reaches_every_scoring_path(option):
    from comlrl_lightning import MADPOModule, MemoryOptions, TeamOptions

    module = MADPOModule(team=TeamOptions(memory=MemoryOptions(fused_lm_head=option)))
    assert module.team.fused_head is option
    head = module.team.agents[0].get_output_embeddings()
    widths = []
    hook = head.register_forward_hook(lambda _module, _inputs, output: widths.append(output.shape[-1]))
    try:
        batch = _batch(module.team.tokenizers[0])
        module.team.score([batch], unit="sequence", agents=[0])[0]
    finally:
        hook.remove()
    # materialised: vocabulary-wide logits; fused: the head's one-wide placeholder
    assert widths == ([head.out_features] if option is False else [1])
