"""Shared prompts in sampling: one prefill per prompt, the tokens plain ``generate()`` samples, and
the automatic generation batch size."""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning.generation import hf as hf_generation
from comlrl_lightning.generation import shared_prompt
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator, auto_generation_batch_size
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team

SETTINGS = GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None)
PROMPTS = ["topic: abc\nwriter:", "topic: zz\nwriter:", "topic: qwerty uiop\nwriter:"]


@pytest.fixture(scope="module")
def team():
    return Team(["embedded"])


def _ids(samples):
    return [[c.ids for c in row] for row in samples]


def _record_forward_rows(model):
    rows = []
    handle = model.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    return rows, handle


def _llama_team():
    from transformers import LlamaConfig, LlamaForCausalLM

    from comlrl_lightning.defaults import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            pad_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    )
    return Team([model.eval()], tokenizers=tokenizer)


@pytest.mark.parametrize("cache", ["static", "growing"])
@pytest.mark.parametrize("source", ["embedded", "llama"])
def test_one_prefill_per_prompt_samples_what_plain_generate_samples(source, cache, monkeypatch):
    team = Team(["embedded"]) if source == "embedded" else _llama_team()
    model = team.agents[0]
    copies = []
    static_copy = shared_prompt._static_copy

    def recorded_copy(*args):  # "growing": as if no static cache could be built
        copies.append(static_copy(*args) if cache == "static" else None)
        return copies[-1]

    monkeypatch.setattr(shared_prompt, "_static_copy", recorded_copy)
    rows, handle = _record_forward_rows(model)
    try:
        shared = HFGenerator().generate(team, 0, PROMPTS, 4, SETTINGS, RandomStream(7))
    finally:
        handle.remove()
    width = max(len(p) for p in team.encode_prompts(0, PROMPTS))
    assert (type(copies[0]).__name__ == "StaticCache") == (cache == "static")
    assert rows[0] == (3, width - 1)  # the prompts once, without their last token
    assert rows[1] == (12, 1)  # generate() goes on from the repeated cache: last prompt token only
    assert all(shape[1] == 1 for shape in rows[1:])

    monkeypatch.setattr(shared_prompt, "_prompt_prefix_cache", lambda *args: None)  # plain generate()
    rows, handle = _record_forward_rows(model)
    try:
        plain = HFGenerator().generate(team, 0, PROMPTS, 4, SETTINGS, RandomStream(7))
    finally:
        handle.remove()
    assert rows[0] == (12, width)  # num_return_sequences prefills every copy
    assert _ids(shared) == _ids(plain)
    assert len({tuple(ids) for row in _ids(shared) for ids in row}) > 3  # samples of one prompt differ


def test_single_samples_and_one_token_prompts_use_plain_generate(team):
    model = team.agents[0]
    for prompts, samples in ((PROMPTS, 1), (["a", "topic: b\nwriter:"], 3)):
        rows, handle = _record_forward_rows(model)
        try:
            out = HFGenerator().generate(team, 0, prompts, samples, SETTINGS, RandomStream(1))
        finally:
            handle.remove()
        width = max(len(p) for p in team.encode_prompts(0, prompts))
        assert rows[0] == (len(prompts) * samples, width)
        assert len(out) == len(prompts) and all(len(row) == samples for row in out)


def test_auto_batch_size_comes_from_the_cache_size_and_total_memory(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(config)
    cpu = torch.device("cpu")
    monkeypatch.setattr(hf_generation, "device_memory", lambda device: 2**30)
    cache_per_token = 2 * 2 * 2 * 16 * 4  # (key, value) x layers x kv heads x head dim x float32
    per_sequence = 2 * cache_per_token * 50 + 3 * 4 * 100
    assert auto_generation_batch_size(model, cpu, 50) == int(2**30 * 0.25 // per_sequence) == 5122
    monkeypatch.setattr(hf_generation, "device_memory", lambda device: 10**5)
    assert auto_generation_batch_size(model, cpu, 50) == 1  # never zero
    monkeypatch.setattr(hf_generation, "device_memory", lambda device: None)
    assert auto_generation_batch_size(model, cpu, 50) == hf_generation.FALLBACK_GENERATION_BATCH_SIZE
    monkeypatch.undo()
    assert hf_generation.device_memory(cpu) > 2**28


def test_generator_batch_size_splits_calls_and_auto_makes_one(team, monkeypatch):
    calls = []
    model = team.agents[0]
    original = model.generate
    monkeypatch.setattr(
        model, "generate", lambda **kwargs: calls.append(kwargs["input_ids"].shape[0]) or original(**kwargs)
    )
    auto = HFGenerator().generate(team, 0, PROMPTS, 4, SETTINGS, RandomStream(3))
    assert calls == [12]
    calls.clear()
    split = HFGenerator(batch_size=8).generate(team, 0, PROMPTS, 4, SETTINGS, RandomStream(3))
    assert calls == [8, 4]  # two prompts (8 sequences), then one
    assert len(split) == len(auto) == 3 and all(len(row) == 4 for row in split)
