"""Grouped-query decoding without a KV-cache copy per query head, on any transformers 5.

The main environment's transformers groups a decoded query's heads itself; the vLLM environment's
(below 5.20) does not, and ``.ci/vllm`` runs this file there too, where the fix is in use.
"""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning.generation import gqa_decode
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("transformers 4 has no attention registry", allow_module_level=True)


def gqa_llama(tmp_path) -> Team:
    """A tiny Llama of 4 query heads over 2 key/value heads (32 wide), with the character tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from comlrl_lightning.defaults import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    eos = tokenizer.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return Team([str(tmp_path)])


class FakeLayer(torch.nn.Module):
    num_key_value_groups = 3


def test_one_decoded_query_attends_as_sdpa_over_repeated_heads():
    from transformers.integrations.sdpa_attention import repeat_kv

    generator = torch.Generator().manual_seed(0)
    query, key, value = (
        torch.randn(shape, generator=generator) for shape in ([2, 6, 1, 16], [2, 2, 7, 16], [2, 2, 7, 16])
    )
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7], dtype=torch.bool)[:, None, None, :]
    output, _ = gqa_decode.grouped_query_decode(FakeLayer(), query, key, value, mask, scaling=0.25)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, 3), repeat_kv(value, 3), attn_mask=mask, scale=0.25
    ).transpose(1, 2)
    assert output.shape == (2, 1, 6, 16)
    torch.testing.assert_close(output, expected, rtol=1e-6, atol=1e-6)
    wrong = torch.nn.functional.scaled_dot_product_attention(  # a negative control: another grouping of the heads
        query, key.repeat(1, 3, 1, 1), value.repeat(1, 3, 1, 1), attn_mask=mask, scale=0.25
    ).transpose(1, 2)
    assert not torch.allclose(output, wrong, atol=1e-3)


def kv_copies_while_sampling(team: Team, max_new_tokens: int, monkeypatch) -> int:
    """How often transformers' SDPA attention repeats key/value heads while ``HFGenerator`` samples."""
    from transformers.integrations import sdpa_attention

    calls = [0]
    original = sdpa_attention.repeat_kv

    def counting(hidden_states, n_rep):
        calls[0] += 1
        return original(hidden_states, n_rep)

    monkeypatch.setattr(sdpa_attention, "repeat_kv", counting)
    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=1.0, top_p=1.0, top_k=None)
    prompts = ["topic: sea\nwriter:", "hello"]  # left-padded: a mask, as every batch of prompts has
    HFGenerator().generate(team, 0, prompts, 2, settings, RandomStream(0))
    monkeypatch.undo()
    return calls[0]


def test_sampling_copies_no_kv_cache_per_decoded_token(tmp_path, monkeypatch):
    """The copies (prefill only) do not grow with the tokens decoded: on transformers below 5.20 they
    did, a copy of the whole cache per layer per token (2-2.7x the CPU time of SmolLM2's collection)."""
    team = gqa_llama(tmp_path)
    assert kv_copies_while_sampling(team, 4, monkeypatch) == kv_copies_while_sampling(team, 16, monkeypatch)


@pytest.mark.skipif(
    not gqa_decode.grouped_decoding_registrable(), reason="this transformers groups decoded queries itself"
)
def test_packed_decoding_samples_the_tokens_of_plain_sdpa(tmp_path, monkeypatch):
    """On a tiny model the sums round alike (a wrong grouping of heads would change the tokens); on
    SmolLM2 the other summation order flips some samples, as transformers 5.20's own grouping does."""
    team = gqa_llama(tmp_path)
    assert gqa_decode.needs_packed_decoding(team.agents[0])
    settings = GenerationSettings(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=None)
    prompts = ["topic: sea\nwriter:", "hello", "topic: tree\nmatcher:"]
    packed = HFGenerator().generate(team, 0, prompts, 3, settings, RandomStream(4))
    monkeypatch.setattr(gqa_decode, "grouped_decoding_registrable", lambda: False)
    plain = HFGenerator().generate(team, 0, prompts, 3, settings, RandomStream(4))
    assert [[c.ids for c in row] for row in packed] == [[c.ids for c in row] for row in plain]
    assert team.agents[0].config._attn_implementation == "sdpa"  # switched back after sampling


def test_importing_the_module_registers_nothing_and_sampling_registers_once(tmp_path, monkeypatch):
    """Issue 49: no import-time side effect. On a transformers that needs the grouped decoding
    (simulated here by hiding 5.20's own grouping), a fresh execution of the module leaves both
    registries as they were; the first packed sampling call registers it, and a second changes nothing."""
    import importlib.util

    from transformers import AttentionInterface
    from transformers.integrations import sdpa_attention
    from transformers.masking_utils import AttentionMaskInterface

    if hasattr(sdpa_attention, "pack_gqa"):
        monkeypatch.delattr(sdpa_attention, "pack_gqa")
    for registry in (AttentionInterface, AttentionMaskInterface):
        monkeypatch.setattr(registry, "_global_mapping", dict(registry._global_mapping))
        registry._global_mapping.pop(gqa_decode.ATTENTION_NAME, None)
    before = [dict(registry._global_mapping) for registry in (AttentionInterface, AttentionMaskInterface)]
    spec = importlib.util.spec_from_file_location("fresh_gqa_decode", gqa_decode.__file__)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert [dict(registry._global_mapping) for registry in (AttentionInterface, AttentionMaskInterface)] == before

    team = gqa_llama(tmp_path)
    settings = GenerationSettings(max_new_tokens=2, temperature=1.0, top_p=1.0, top_k=None)
    HFGenerator().generate(team, 0, ["hello"], 2, settings, RandomStream(0))
    assert AttentionInterface._global_mapping[gqa_decode.ATTENTION_NAME] is gqa_decode.grouped_query_decode
    registered = [dict(registry._global_mapping) for registry in (AttentionInterface, AttentionMaskInterface)]
    HFGenerator().generate(team, 0, ["hello"], 2, settings, RandomStream(0))
    assert [dict(registry._global_mapping) for registry in (AttentionInterface, AttentionMaskInterface)] == registered
