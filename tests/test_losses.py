"""Loss math: hand-computed values and the single-pass MADPO gradient.

The key test compares the library's single batched pass (one forward of [winners; losers] per
agent, one backward through the joint loss) with the reference's two-pass scheme, written here
from the reference (CoMLRL): a no-grad pass of per-sequence (batch of 1, unpadded) margins as Python floats,
then per agent a loss with only its own margin differentiable.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from comlrl_lightning.defaults import build_char_tokenizer, build_tiny_model
from comlrl_lightning.losses import (
    bradley_terry_loss,
    bradley_terry_metrics,
    gathered_logprobs,
    madpo_loss,
    trajectory_margins,
)
from comlrl_lightning.team.team import Team, pack_sequences


def neg_log_sigmoid(x: float) -> float:
    """-log(sigmoid(x)) = log(1 + exp(-x)), by hand."""
    return math.log1p(math.exp(-x))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------------------------------------
# madpo_loss / bradley_terry_loss against hand values


def test_madpo_loss_hand_values():
    margins = torch.tensor([[1.0, 2.0], [-0.5, 0.25]], dtype=torch.float64)
    beta = 0.1
    # joint margins: 3.0 and -0.25
    expected = (neg_log_sigmoid(0.1 * 3.0) + neg_log_sigmoid(0.1 * -0.25)) / 2
    loss = madpo_loss(margins, beta)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_madpo_loss_default_beta_is_0_1():
    margins = torch.tensor([[4.0, -1.0, 0.5]], dtype=torch.float64)
    assert madpo_loss(margins).item() == pytest.approx(neg_log_sigmoid(0.1 * 3.5), rel=1e-12)


def test_madpo_loss_other_beta_and_three_agents():
    margins = torch.tensor([[1.0, -3.0, 0.5], [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    beta = 0.7
    expected = (neg_log_sigmoid(0.7 * -1.5) + neg_log_sigmoid(0.7 * 6.0) + neg_log_sigmoid(0.0)) / 3
    assert madpo_loss(margins, beta).item() == pytest.approx(expected, rel=1e-12)


def test_madpo_loss_one_dimensional_input_is_one_agent_per_pair():
    # A [B] tensor is B pairs of a single agent (N = 1), not one pair of B agents.
    margins = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    beta = 0.5
    expected = (neg_log_sigmoid(0.5) + neg_log_sigmoid(-1.0) + neg_log_sigmoid(0.25)) / 3
    assert madpo_loss(margins, beta).item() == pytest.approx(expected, rel=1e-12)
    assert madpo_loss(margins, beta).item() == pytest.approx(madpo_loss(margins.unsqueeze(-1), beta).item(), rel=1e-15)
    # ...which differs from reading it as one pair with joint margin -0.5
    assert madpo_loss(margins, beta).item() != pytest.approx(neg_log_sigmoid(0.5 * -0.5), rel=1e-6)


def test_madpo_loss_gradient_formula():
    """d loss / d margins[p, i] = -(beta / B) * sigmoid(-beta * Delta_p), the same for every agent i."""
    values = [[1.0, 2.0], [-0.5, 0.25], [3.0, -7.0]]
    beta = 0.3
    margins = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    madpo_loss(margins, beta).backward()
    batch = len(values)
    for p, row in enumerate(values):
        delta = sum(row)
        expected = -(beta / batch) * sigmoid(-beta * delta)
        for i in range(len(row)):
            assert margins.grad[p, i].item() == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_bradley_terry_loss_hand_values():
    chosen = torch.tensor([2.0, 0.5, -1.0], dtype=torch.float64)
    rejected = torch.tensor([1.0, 1.5, -1.0], dtype=torch.float64)
    expected = (neg_log_sigmoid(1.0) + neg_log_sigmoid(-1.0) + neg_log_sigmoid(0.0)) / 3
    loss = bradley_terry_loss(chosen, rejected)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    # swapping chosen and rejected is a different loss
    assert bradley_terry_loss(rejected, chosen).item() == pytest.approx(
        (neg_log_sigmoid(-1.0) + neg_log_sigmoid(1.0) + neg_log_sigmoid(0.0)) / 3, rel=1e-12
    )


# ---------------------------------------------------------------------------------------------
# gathered_logprobs


def test_bradley_terry_metrics_per_pair_a_tie_is_no_win():
    metrics = bradley_terry_metrics(torch.tensor([2.0, 1.0, 0.5]), torch.tensor([1.0, 1.0, 1.0]))
    assert metrics["accuracy"].tolist() == [1.0, 0.0, 0.0]
    assert metrics["margin"].tolist() == [1.0, 0.0, -0.5]


def test_gathered_logprobs_of_no_rows_is_an_empty_float32_tensor_of_the_targets_shape():
    result = gathered_logprobs(torch.zeros(2, 0, 7, dtype=torch.bfloat16), torch.zeros(2, 0, dtype=torch.long))
    assert result.shape == (2, 0) and result.dtype == torch.float32


def test_gathered_logprobs_chunks_cover_every_row_when_rows_outnumber_the_vocabulary():
    generator = torch.Generator().manual_seed(1)
    logits, targets = torch.randn(12, 3, generator=generator), torch.randint(0, 3, (12,), generator=generator)
    expected = F.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(gathered_logprobs(logits, targets, chunk_size=2), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_size", [1, 4, 7, 15, 1024])
def test_gathered_logprobs_matches_float32_log_softmax(dtype, chunk_size):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 257, generator=generator) * 6.0).to(dtype)  # 15 rows
    targets = torch.randint(0, 257, (3, 5), generator=generator)
    expected = F.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    result = gathered_logprobs(logits, targets, chunk_size=chunk_size)
    assert result.dtype == torch.float32
    assert result.shape == targets.shape
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-6)


def test_gathered_logprobs_bf16_is_not_computed_in_bf16():
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(64, 1000, generator=generator) * 8.0).to(torch.bfloat16)
    targets = torch.randint(0, 1000, (64,), generator=generator)
    in_bf16 = F.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1).float()
    in_fp32 = F.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert (in_bf16 - in_fp32).abs().max() > 1e-3  # the data does distinguish the two
    torch.testing.assert_close(gathered_logprobs(logits, targets, chunk_size=10), in_fp32, atol=1e-5, rtol=1e-6)


def test_gathered_logprobs_gradient_matches_log_softmax():
    generator = torch.Generator().manual_seed(2)
    base = torch.randn(2, 6, 33, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 33, (2, 6), generator=generator)
    a = base.clone().requires_grad_(True)
    b = base.clone().requires_grad_(True)
    weights = torch.randn(2, 6, generator=generator, dtype=torch.float64)
    (gathered_logprobs(a, targets, chunk_size=5).double() * weights).sum().backward()
    (F.log_softmax(b.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1).double() * weights).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)


def test_gathered_logprobs_empty():
    logits = torch.zeros(0, 7)
    targets = torch.zeros(0, dtype=torch.long)
    result = gathered_logprobs(logits, targets, chunk_size=3)
    assert result.shape == (0,)
    assert result.dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# Team scoring helpers


@pytest.fixture(scope="module")
def tokenizer():
    tok = build_char_tokenizer()
    tok.pad_token = tok.eos_token
    return tok


def build_agents(tokenizer, num_agents: int):
    return [build_tiny_model(len(tokenizer), tokenizer.eos_token_id, seed=i) for i in range(num_agents)]


def reference_scored_count(completion, pad_id, score_last_token):
    """Reference parity cuts at the first pad id and leaves out the last token; the full-completion
    rule cuts at the first pad id too, keeping it (here pad == eos)."""
    trimmed = completion[: completion.index(pad_id)] if pad_id in completion else completion
    if score_last_token:
        return len(trimmed) + (pad_id in completion)
    return max(len(trimmed) - 1, 0)


def reference_logprob(model, prompt, completion, pad_id, score_last_token):
    """Log-probability of one sequence alone (batch of 1, no padding), float32 log-softmax."""
    count = reference_scored_count(list(completion), pad_id, score_last_token)
    if count == 0:
        return torch.zeros(())  # constant: contributes no gradient
    input_ids = torch.tensor([list(prompt) + list(completion[:count])])
    logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits[0].float()
    start = len(prompt) - 1
    logprobs = F.log_softmax(logits[start : start + count], dim=-1)
    return logprobs.gather(-1, torch.tensor(completion[:count]).unsqueeze(-1)).sum()


def make_pairs(num_agents: int, num_pairs: int, eos: int, vocab: int, seed: int):
    """``pairs[p][i] = (prompt, winner, loser)`` token lists of varied lengths and edge cases."""
    rng = random.Random(seed)

    def tokens(low, high):
        return [rng.randrange(2, vocab) for _ in range(rng.randint(low, high))]

    pairs = []
    for _ in range(num_pairs):
        per_agent = []
        for _ in range(num_agents):
            winner = tokens(1, 8) + ([eos] if rng.random() < 0.5 else [])
            loser = tokens(1, 8) + ([eos] if rng.random() < 0.5 else [])
            per_agent.append((tokens(1, 7), winner, loser))
        pairs.append(per_agent)
    # Edge cases: a 1-token completion (parity scores nothing), a lone EOS, an EOS before the end,
    # a long completion, a 1-token prompt.
    pairs[0][0] = ([5], [7], [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, eos])
    pairs[1][0] = ([3, 4, 5, 6, 7, 8, 9, 10], [eos], [20, 21, 22])
    pairs[2][-1] = (pairs[2][-1][0], [30, eos, 31, 32], [33, 34, 35, 36, eos])
    return pairs


def single_pass_margins(team: Team, pairs, score_last_token: bool) -> torch.Tensor:
    """Library scheme: one batched [winners; losers] forward per agent -> margins [B, N]."""
    batch = len(pairs)
    columns = []
    for agent in range(team.num_agents):
        prompts = [pair[agent][0] for pair in pairs] * 2
        completions = [pair[agent][1] for pair in pairs] + [pair[agent][2] for pair in pairs]
        scored = [team.scored_length(agent, c, score_last_token) for c in completions]
        packed = pack_sequences(prompts, completions, scored, team.tokenizers[agent].pad_token_id)
        logprobs = team.score([packed], unit="sequence", agents=[agent])[0]
        columns.append(logprobs[:batch] - logprobs[batch:])
    return torch.stack(columns, dim=1)


def reference_margin(model, pair_agent, pad_id, score_last_token):
    prompt, winner, loser = pair_agent
    return reference_logprob(model, prompt, winner, pad_id, score_last_token) - reference_logprob(
        model, prompt, loser, pad_id, score_last_token
    )


def reference_frozen_margins(models, pairs, pad_id, score_last_token):
    """Pass 1 of the reference: every agent's margin as a Python float, no grad."""
    with torch.no_grad():
        return [
            [float(reference_margin(models[i], pair[i], pad_id, score_last_token)) for i in range(len(models))]
            for pair in pairs
        ]


def reference_agent_loss(models, agent, pairs, frozen, pad_id, score_last_token, beta):
    """L_i = mean_p -log sigmoid(beta (Delta_i(p) + sum_{j != i} float Delta_j(p)))."""
    losses = []
    for p, pair in enumerate(pairs):
        own = reference_margin(models[agent], pair[agent], pad_id, score_last_token)
        others = sum(frozen[p][j] for j in range(len(models)) if j != agent)
        losses.append(-F.logsigmoid(beta * (own + others)))
    return torch.stack(losses).mean()


def grads_of(model):
    return {
        name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for name, p in model.named_parameters()
    }


def assert_same_parameters(model_a, model_b, atol=0.0, rtol=0.0):
    params_b = dict(model_b.named_parameters())
    for name, param in model_a.named_parameters():
        torch.testing.assert_close(param.detach(), params_b[name].detach(), atol=atol, rtol=rtol, msg=name)


# ---------------------------------------------------------------------------------------------
# Scoring layout


def test_scored_length_parity_and_all_tokens(tokenizer):
    team = Team(agents=build_agents(tokenizer, 1), tokenizers=tokenizer)
    eos = tokenizer.eos_token_id
    assert team.tokenizers[0].pad_token_id == eos
    # parity: cut at the first pad (== eos), then drop the last token
    assert team.scored_length(0, [5, 6, 7, eos], False) == 2
    assert team.scored_length(0, [5, 6, 7], False) == 2
    assert team.scored_length(0, [5, eos, 7, 8], False) == 0
    assert team.scored_length(0, [5, 6, eos, 7], False) == 1
    assert team.scored_length(0, [5], False) == 0
    assert team.scored_length(0, [eos], False) == 0
    assert team.scored_length(0, [], False) == 0
    # every token through the first pad, which is kept as it is the EOS
    assert team.scored_length(0, [5, 6, 7, eos], True) == 4
    assert team.scored_length(0, [5, eos, 7, 8], True) == 2  # nothing after the first pad (== eos)
    assert team.scored_length(0, [eos], True) == 1
    assert team.scored_length(0, [], True) == 0


@pytest.mark.parametrize("score_last_token", [False, True])
def test_padding_does_not_change_sequence_logprobs(tokenizer, score_last_token):
    team = Team(agents=build_agents(tokenizer, 1), tokenizers=tokenizer)
    eos = tokenizer.eos_token_id
    pairs = make_pairs(1, 6, eos, len(tokenizer), seed=11)
    prompts = [pair[0][0] for pair in pairs] * 2
    completions = [pair[0][1] for pair in pairs] + [pair[0][2] for pair in pairs]
    scored = [team.scored_length(0, c, score_last_token) for c in completions]
    with torch.no_grad():
        batched = team.score([pack_sequences(prompts, completions, scored, eos)], unit="sequence", agents=[0])[0]
        alone = torch.cat(
            [
                team.score([pack_sequences([p], [c], [s], eos)], unit="sequence", agents=[0])[0]
                for p, c, s in zip(prompts, completions, scored)
            ]
        )
        reference = torch.stack(
            [reference_logprob(team.agents[0], p, c, eos, score_last_token) for p, c in zip(prompts, completions)]
        )
    assert batched.shape == (len(prompts),)
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batched, reference, atol=1e-5, rtol=1e-5)
    # non-trivial values: most sequences are scored and the rows differ
    nonzero = [v for v in reference.tolist() if v != 0.0]
    assert len(nonzero) >= 6
    assert len({round(v, 4) for v in nonzero}) == len(nonzero)


# ---------------------------------------------------------------------------------------------
# THE KEY TEST: single pass == reference two-pass scheme


@pytest.mark.parametrize("num_agents", [2, 3])
@pytest.mark.parametrize("score_last_token", [False, True])
@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_single_pass_gradients_equal_reference_two_pass(tokenizer, num_agents, score_last_token, beta):
    eos = tokenizer.eos_token_id
    pairs = make_pairs(num_agents, 5, eos, len(tokenizer), seed=100 + num_agents)

    # Library: one batched pass per agent, one backward of the joint loss.
    team = Team(agents=build_agents(tokenizer, num_agents), tokenizers=tokenizer)
    margins = single_pass_margins(team, pairs, score_last_token)
    assert margins.shape == (len(pairs), num_agents)
    madpo_loss(margins, beta).backward()
    single = [grads_of(agent) for agent in team.agents]

    # Reference: frozen float margins, then per-agent losses, each backward to its own agent only.
    models = build_agents(tokenizer, num_agents)
    for ours, theirs in zip(team.agents, models):
        assert_same_parameters(ours, theirs)
    frozen = reference_frozen_margins(models, pairs, eos, score_last_token)
    torch.testing.assert_close(margins.detach(), torch.tensor(frozen), atol=1e-5, rtol=1e-5)
    reference = []
    for agent in range(num_agents):
        for model in models:
            model.zero_grad(set_to_none=True)
        reference_agent_loss(models, agent, pairs, frozen, eos, score_last_token, beta).backward()
        for other in range(num_agents):
            if other != agent:
                assert all(p.grad is None for p in models[other].parameters())
        reference.append(grads_of(models[agent]))

    # The data must exercise the coupling: the team-margin weights differ from own-margin weights.
    team_weights = [sigmoid(-beta * sum(row)) for row in frozen]
    own_weights = [sigmoid(-beta * row[0]) for row in frozen]
    assert max(abs(a - b) for a, b in zip(team_weights, own_weights)) > 0.01

    for agent in range(num_agents):
        total = sum(g.abs().sum().item() for g in reference[agent].values())
        assert total > 1e-3, "reference gradient is trivially zero"
        for name, grad in reference[agent].items():
            torch.testing.assert_close(single[agent][name], grad, atol=1e-6, rtol=1e-4, msg=f"agent {agent} {name}")


def test_one_adamw_with_param_group_per_agent_equals_one_adamw_per_agent(tokenizer):
    """Given the same gradients, one AdamW with a param group per agent (own lr) == N AdamWs, exactly."""
    num_agents, lrs = 3, [1e-3, 5e-4, 2e-3]
    grouped = build_agents(tokenizer, num_agents)
    separate = build_agents(tokenizer, num_agents)
    optimizer = torch.optim.AdamW([{"params": list(m.parameters()), "lr": lr} for m, lr in zip(grouped, lrs)])
    optimizers = [torch.optim.AdamW(m.parameters(), lr=lr) for m, lr in zip(separate, lrs)]
    generator = torch.Generator().manual_seed(3)
    for _step in range(3):
        for a, b in zip(grouped, separate):
            for p, q in zip(a.parameters(), b.parameters()):
                grad = torch.randn(p.shape, generator=generator)
                p.grad, q.grad = grad.clone(), grad.clone()
        optimizer.step()
        for opt in optimizers:
            opt.step()
    initial = build_agents(tokenizer, num_agents)
    for agent in range(num_agents):
        assert_same_parameters(grouped[agent], separate[agent])  # exactly equal
        moved = max(
            (p - q).abs().max().item() for p, q in zip(grouped[agent].parameters(), initial[agent].parameters())
        )
        assert moved == pytest.approx(3 * lrs[agent], rel=0.2)


@pytest.mark.parametrize("num_agents", [2, 3])
@pytest.mark.parametrize("score_last_token", [False, True])
def test_single_pass_adamw_steps_equal_reference_per_agent_optimizers(tokenizer, num_agents, score_last_token):
    """End to end: single pass + one grouped AdamW == reference two-pass + one AdamW per agent.

    float64 models: Adam divides by sqrt(v), so it blows float noise in mathematically-zero
    gradients (e.g. the key bias) up to O(lr); in float64 (log-softmax still float32) the
    difference stays ~5e-6 while any wrong weighting of the pairs moves parameters by ~2 * lr.
    """
    eos = tokenizer.eos_token_id
    beta, lr = 0.5, 1e-3
    pairs = make_pairs(num_agents, 4, eos, len(tokenizer), seed=200 + num_agents)

    team = Team(agents=[m.double() for m in build_agents(tokenizer, num_agents)], tokenizers=tokenizer)
    optimizer = torch.optim.AdamW([{"params": list(agent.parameters()), "lr": lr} for agent in team.agents])

    models = [m.double() for m in build_agents(tokenizer, num_agents)]
    optimizers = [torch.optim.AdamW(model.parameters(), lr=lr) for model in models]
    initial = [m.double() for m in build_agents(tokenizer, num_agents)]

    for _step in range(2):
        optimizer.zero_grad(set_to_none=True)
        madpo_loss(single_pass_margins(team, pairs, score_last_token), beta).backward()
        optimizer.step()

        # Reference: all agents' pre-update margins first, then each agent in order 0..N-1.
        frozen = reference_frozen_margins(models, pairs, eos, score_last_token)
        for agent in range(num_agents):
            optimizers[agent].zero_grad(set_to_none=True)
            reference_agent_loss(models, agent, pairs, frozen, eos, score_last_token, beta).backward()
            optimizers[agent].step()

        for agent in range(num_agents):
            assert_same_parameters(team.agents[agent], models[agent], atol=2e-5, rtol=0.0)

    for agent in range(num_agents):
        moved = max(
            (p - q).abs().max().item() for p, q in zip(team.agents[agent].parameters(), initial[agent].parameters())
        )
        assert moved > 1e-3, "the optimizer steps did not change the parameters"


# ------------------------------------------------------------------------------------------------
# Multi-turn margins


def test_trajectory_margins_hand_values_two_turns():
    # B = 2 pairs, H = 2: rows are (pair 0 winner t0, t1), (pair 1 winner t0, t1), then the losers'
    rows = torch.tensor([-1.0, -2.0, -0.5, -0.25, -3.0, -1.5, -2.0, -0.75])
    owners = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    margins = trajectory_margins(rows, owners, 2)
    # pair 0: (-1 - 2) - (-3 - 1.5) = 1.5 ; pair 1: (-0.5 - 0.25) - (-2 - 0.75) = 2.0
    assert margins.tolist() == [1.5, 2.0]


def test_trajectory_margins_early_stopped_side_sums_only_its_turns():
    # pair 0's winner stopped after turn 0 (one row); its loser has two turns
    rows = torch.tensor([-0.5, -1.0, -2.0])
    owners = torch.tensor([0, 1, 1])
    assert trajectory_margins(rows, owners, 1).tolist() == [-0.5 - (-1.0 - 2.0)]


def test_trajectory_margins_one_turn_is_the_single_turn_margin():
    rows = torch.tensor([-1.25, -0.5, -2.0, -0.75])
    margins = trajectory_margins(rows, torch.arange(4), 2)
    assert torch.equal(margins, rows[:2] - rows[2:])


def test_multi_turn_madpo_gradient_equals_the_direct_computation():
    beta = 0.1
    rows = torch.tensor([-1.0, -2.0, -0.5, -3.0, -1.5], requires_grad=True)
    owners = torch.tensor([0, 0, 1, 1, 1])  # one pair: winner 2 turns, loser 3 turns
    madpo_loss(trajectory_margins(rows, owners, 1).unsqueeze(-1), beta).backward()
    delta = (-1.0 - 2.0) - (-0.5 - 3.0 - 1.5)
    weight = beta * torch.sigmoid(torch.tensor(-beta * delta))  # -d/dDelta log sigmoid(beta Delta)
    expected = torch.tensor([-1.0, -1.0, 1.0, 1.0, 1.0]) * weight
    torch.testing.assert_close(rows.grad, expected)
