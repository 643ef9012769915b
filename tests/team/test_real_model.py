"""The team's equivalences on a real model, SmolLM2-135M-Instruct (grouped-query attention, RoPE, tied
embeddings, a 49,152-token BPE vocabulary, a chat template), where a tiny model could hide a mistake."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning.generation.base import GenerationSettings, sample_team
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.seeded_sampling import request_seeds
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team import packed_scoring
from comlrl_lightning.team.fused_head import fusable_head
from comlrl_lightning.team.loading import encode_prompt, load_tokenizer
from comlrl_lightning.team.lora import build_lora_agents
from comlrl_lightning.team.team import Team, pack_sequences

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

QUESTIONS = ["Write a haiku about rivers.", "What is 2+2?", "Name a colour."]
SETTINGS = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None)


def chat(tokenizer, question: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )


@pytest.fixture(scope="module")
def tokenizer(real_model):
    return load_tokenizer(real_model)


@pytest.fixture(scope="module")
def full_team(real_model, tokenizer):
    return Team([real_model], tokenizers=tokenizer)


@pytest.fixture(scope="module")
def lora_team(real_model, tokenizer):
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    agents = build_lora_agents(real_model, 2, config)
    with torch.no_grad():  # distinct adapters, B away from its zero start
        for agent in agents:
            for parameter in agent.trainable_parameters():
                parameter.add_(0.02 * torch.randn_like(parameter))
    return Team(agents, tokenizers=tokenizer).train()


def batch(team: Team, agent: int, answers=(" A river runs.", " Four", " Blue, I think")):
    tokenizer = team.tokenizers[agent]
    prompts = team.encode_prompts(agent, [chat(tokenizer, q) for q in QUESTIONS])
    completions = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    prompts.append(prompts[0])  # a shared prompt, as a DPO pair's winner and loser have
    completions.append(completions[2])
    return pack_sequences(prompts, completions, [len(c) for c in completions], tokenizer.pad_token_id)


def test_the_model_is_the_one_the_wheel_ships(full_team, tokenizer):
    model = full_team.agents[0]
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (30, 576, 9)
    assert config.num_key_value_heads == 3 and config.vocab_size == 49152 and config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert fusable_head(model).weight is model.get_input_embeddings().weight


def test_encode_prompt_keeps_one_bos_on_the_chat_template_and_left_padding_changes_nothing(full_team, tokenizer):
    rendered = chat(tokenizer, QUESTIONS[0])
    assert rendered.startswith(tokenizer.bos_token)  # <|im_start|>: the template writes the BOS itself
    ids = encode_prompt(tokenizer, rendered)
    assert ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id
    assert tokenizer.decode(ids) == rendered
    # greedy tokens of a prompt alone equal those it gets left-padded beside longer prompts
    greedy = GenerationSettings(max_new_tokens=8, temperature=1.0, top_k=1)
    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    together = HFGenerator().generate(full_team, 0, prompts, 1, greedy)
    alone = [HFGenerator().generate(full_team, 0, [p], 1, greedy)[0] for p in prompts]
    assert [[c.ids for c in row] for row in together] == [[c.ids for c in row] for row in alone]
    assert together[1][0].text.startswith("The answer")  # "What is 2+2?": a real model answers in words


def test_seeded_sampling_does_not_depend_on_batch_composition(full_team, tokenizer):
    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    seeds = request_seeds(RandomStream(3), len(prompts))
    encoded = full_team.encode_prompts(0, prompts)
    ids = lambda rows: [[c.ids for c in row] for row in rows]  # noqa: E731
    together = HFGenerator().sample(full_team, [0] * 3, encoded, seeds, 2, SETTINGS)
    split = HFGenerator(batch_size=2).sample(full_team, [0] * 3, encoded, seeds, 2, SETTINGS)
    reordered = HFGenerator().sample(full_team, [0] * 3, encoded[::-1], seeds[::-1], 2, SETTINGS)[::-1]
    assert ids(together) == ids(split) == ids(reordered)
    assert ids(together)[0][0] != ids(together)[0][1]  # the samples of one prompt differ


def gradients(model: torch.nn.Module) -> dict:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_packed_scoring_equals_padded_scoring(full_team):
    scored = batch(full_team, 0)
    model = full_team.agents[0]
    results = []
    for packed in (True, False):
        model.zero_grad(set_to_none=True)
        if packed:
            values = full_team.score([scored], unit="sequence", agents=[0])[0]
        else:
            token = full_team._token_logprobs(
                0, scored["input_ids"], scored["attention_mask"], scored["score_mask"].shape[1]
            )
            values = (token * scored["score_mask"]).sum(dim=-1)
        (values * torch.linspace(0.5, 1.5, values.shape[0])).sum().backward()
        results.append((values.detach(), gradients(model)))
    (packed_values, packed_grads), (padded_values, padded_grads) = results
    torch.testing.assert_close(packed_values, padded_values, rtol=1e-5, atol=1e-4)
    assert packed_grads.keys() == padded_grads.keys() and len(packed_grads) == 273 - 1  # every weight, head tied
    for name, expected in padded_grads.items():
        scale = float(expected.abs().max().clamp(min=1.0))
        torch.testing.assert_close(packed_grads[name], expected, rtol=1e-4, atol=1e-5 * scale, msg=name)
    assert model.config._attn_implementation != packed_scoring.ATTENTION_NAME


def test_the_fused_head_equals_the_materialised_logits(full_team):
    scored = batch(full_team, 0)
    results = []
    for fused in (None, False):
        team = Team(list(full_team.agents), full_team.tokenizers, fused_head=fused)
        team.zero_grad(set_to_none=True)
        token = team._token_logprobs(
            0,
            scored["input_ids"],
            scored["attention_mask"],
            scored["score_mask"].shape[1],
            score_mask=scored["score_mask"],
        )
        (token * scored["score_mask"]).sum().backward()
        embedding = team.agents[0].get_input_embeddings().weight.grad.clone()
        results.append(((token * scored["score_mask"]).detach(), embedding))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    # the tied head's gradient (the embedding's: input and output rows together), vocabulary 49,152
    scale = float(results[1][1].abs().max())
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-5 * scale)


def test_a_lora_team_in_one_pass_equals_one_pass_per_agent(lora_team):
    batches = [batch(lora_team, 0), batch(lora_team, 1, answers=(" Rain", " 4", " Red"))]
    results = []
    for one_pass in (True, False):
        lora_team.one_pass = one_pass
        lora_team.zero_grad(set_to_none=True)
        logprobs = lora_team.score(batches)
        sum(((lp * b["score_mask"]).sum() * (i + 1)) for i, (lp, b) in enumerate(zip(logprobs, batches))).backward()
        results.append(([lp.detach() for lp in logprobs], gradients(lora_team)))
    lora_team.one_pass = True
    (one, one_grads), (per_agent, grads) = results
    for ours, expected in zip(one, per_agent):
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-4)
    assert one_grads.keys() == grads.keys() and len(grads) == 2 * 30 * 4 * 2  # A and B, 4 projections, 2 agents
    for name, expected in grads.items():
        scale = float(expected.abs().max().clamp(min=1.0))
        torch.testing.assert_close(one_grads[name], expected, rtol=1e-4, atol=1e-5 * scale, msg=name)
    prompts = [[chat(lora_team.tokenizers[0], q)] * 2 for q in QUESTIONS]
    sampled = []
    for one_pass in (True, False):
        lora_team.one_pass = one_pass
        samples = sample_team(HFGenerator(), lora_team, prompts, 2, SETTINGS, RandomStream(7))
        sampled.append([[[c.ids for c in row] for row in agent] for agent in samples])
    lora_team.one_pass = True
    assert sampled[0] == sampled[1]
