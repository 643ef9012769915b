"""Top-p from the top-k candidates keeps exactly the tokens transformers' full-sort warper keeps."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import TopPLogitsWarper

from comlrl_lightning.generation import seeded_sampling
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.top_p import BOUNDARY_TOLERANCE, CandidateTopP, nucleus_sizes
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team

VOCAB = 4096


def _both(scores: torch.Tensor, top_p: float, min_tokens_to_keep: int = 1, candidates: int = 64):
    """The warper's scores, the candidates' scores and how many rows the candidates sorted in full."""
    ids = torch.zeros(scores.shape[0], 1, dtype=torch.long)
    candidate = CandidateTopP(top_p, candidates=candidates, min_tokens_to_keep=min_tokens_to_keep)
    full = TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep)(ids, scores)
    return full, candidate(ids, scores), candidate.fallback_rows


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.6, 0.9, 0.95])
def test_random_logits_keep_the_warpers_tokens_bit_for_bit(top_p):
    generator = torch.Generator().manual_seed(int(top_p * 100))
    # rows from flat (most rows sorted in full) to peaked (most decided among the candidates)
    scales = torch.tensor([0.3, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]).repeat_interleave(4).unsqueeze(-1)
    scores = torch.randn(len(scales), VOCAB, generator=generator) * scales
    full, candidate, fallback = _both(scores, top_p)
    assert torch.equal(candidate, full)
    assert candidate.dtype == full.dtype


def test_both_paths_are_taken_and_agree():
    generator = torch.Generator().manual_seed(1)
    peaked = torch.randn(16, VOCAB, generator=generator) * 8.0
    flat = torch.randn(16, VOCAB, generator=generator) * 0.3
    full, candidate, fallback = _both(peaked, 0.9)
    assert torch.equal(candidate, full) and fallback < 4  # decided among the 64 candidates
    full, candidate, fallback = _both(flat, 0.9)
    assert torch.equal(candidate, full) and fallback == 16  # 64 of 4096 near-equal tokens: too little mass


def _nucleus(probabilities: list, rows: int = 1) -> torch.Tensor:
    """Rows whose first entries have ``probabilities`` and the rest of the vocabulary shares what is left."""
    head = torch.tensor(probabilities, dtype=torch.float64)
    tail = torch.full((VOCAB - len(probabilities),), (1.0 - float(head.sum())) / (VOCAB - len(probabilities)))
    return torch.cat([head, tail.double()]).log().float().expand(rows, VOCAB).clone()


@pytest.mark.parametrize(
    "top_p, kept",
    [(0.39, 1), (0.41, 2), (0.69, 2), (0.71, 3), (0.84, 3), (0.86, 4)],
)
def test_the_kept_set_ends_at_the_first_token_whose_preceding_mass_reaches_top_p(top_p, kept):
    # masses 0.4, 0.3, 0.15, 0.1: the tokens above each hold 0, 0.4, 0.7, 0.85, 0.95
    scores = _nucleus([0.4, 0.3, 0.15, 0.1])
    full, candidate, fallback = _both(scores, top_p)
    assert fallback == 0 and torch.equal(candidate, full)
    assert int(torch.isfinite(candidate).sum()) == kept


def test_tied_logits_across_the_boundary_are_the_warpers_choice():
    # 0.4 then ten tokens of 0.05 at scattered places: top-p 0.52 keeps 0.4 and two of the ten,
    # which two being the full sort's order of equal values
    generator = torch.Generator().manual_seed(3)
    scores = torch.full((8, VOCAB), -30.0)
    for row in scores:
        places = torch.randperm(VOCAB, generator=generator)[:11]
        row[places[0]] = torch.tensor(0.4).log()
        row[places[1:]] = torch.tensor(0.05).log()
    full, candidate, fallback = _both(scores, 0.52)
    assert torch.equal(candidate, full) and fallback == 8
    assert torch.isfinite(full).sum(dim=-1).tolist() == [3] * 8


def test_ties_wholly_inside_the_nucleus_are_decided_among_the_candidates():
    scores = _nucleus([0.2, 0.2, 0.2, 0.05], rows=2)
    full, candidate, fallback = _both(scores, 0.5)
    assert fallback == 0 and torch.equal(candidate, full)
    assert torch.isfinite(candidate).sum(dim=-1).tolist() == [3, 3]


@pytest.mark.parametrize("top_p", [1e-4, 0.002, 0.9995, 0.99999])
def test_top_p_near_0_and_1(top_p):
    generator = torch.Generator().manual_seed(5)
    scores = torch.randn(12, VOCAB, generator=generator) * torch.linspace(0.5, 12.0, 12).unsqueeze(-1)
    full, candidate, fallback = _both(scores, top_p)
    assert torch.equal(candidate, full)


def test_a_mass_within_rounding_of_top_p_is_left_to_the_full_sort():
    scores = _nucleus([0.4, 0.3, 0.15, 0.1])
    sizes = nucleus_sizes(*_top(scores), top_p=0.7 + BOUNDARY_TOLERANCE / 2, min_tokens_to_keep=1)
    assert sizes.tolist() == [-1]
    sizes = nucleus_sizes(*_top(scores), top_p=0.7 + 2 * BOUNDARY_TOLERANCE, min_tokens_to_keep=1)
    assert sizes.tolist() == [3]


def _top(scores: torch.Tensor, count: int = 64):
    return scores.topk(count, dim=-1).values, scores.logsumexp(dim=-1)


@pytest.mark.parametrize("min_tokens_to_keep", [1, 2, 3, 4])
def test_min_tokens_to_keep_as_the_warper(min_tokens_to_keep):
    scores = _nucleus([0.9, 0.05, 0.02, 0.01])  # top-p 0.5 alone keeps one token
    full, candidate, fallback = _both(scores, 0.5, min_tokens_to_keep=min_tokens_to_keep)
    assert fallback == 0 and torch.equal(candidate, full)
    assert int(torch.isfinite(candidate).sum()) == min_tokens_to_keep


def test_min_tokens_to_keep_ending_in_a_tie_is_the_warpers_choice():
    scores = _nucleus([0.9, 0.03, 0.03, 0.03, 0.005], rows=4)
    full, candidate, fallback = _both(scores, 0.5, min_tokens_to_keep=2)
    assert fallback == 4 and torch.equal(candidate, full)


def test_filtered_rows_from_top_k_first():
    generator = torch.Generator().manual_seed(7)
    scores = torch.randn(8, VOCAB, generator=generator) * 3.0
    ids = torch.zeros(8, 1, dtype=torch.long)
    from transformers.generation.logits_process import TopKLogitsWarper

    scores = TopKLogitsWarper(top_k=20)(ids, scores)  # 20 finite logits, the rest -inf
    for top_p in (0.5, 0.9, 0.999):
        full, candidate, fallback = _both(scores, top_p)
        assert torch.equal(candidate, full)


def test_half_precision_scores_are_sorted_in_full():
    scores = _nucleus([0.4, 0.3, 0.15, 0.1]).to(torch.bfloat16)
    full, candidate, fallback = _both(scores, 0.6)
    assert fallback == 0 and torch.equal(candidate, full)  # handed to the warper whole, not row by row


@pytest.mark.slow
def test_the_hf_path_samples_the_same_tokens_as_with_the_full_sort(monkeypatch):
    team = Team(["embedded"])
    settings = GenerationSettings(max_new_tokens=24, temperature=0.6, top_p=0.6, top_k=None)
    prompts = ["topic: abc\nwriter:", "topic: zz\nwriter:", "topic: qwerty uiop\nwriter:", "topic: k\nwriter:"]
    made: list = []

    def counted(top_p: float) -> CandidateTopP:
        made.append(CandidateTopP(top_p))
        return made[-1]

    monkeypatch.setattr(seeded_sampling, "CandidateTopP", counted)
    candidates = HFGenerator(batch_size=8).generate(team, 0, prompts, 4, settings, RandomStream(11))
    monkeypatch.setattr(seeded_sampling, "CandidateTopP", lambda top_p: TopPLogitsWarper(top_p))
    sorted_in_full = HFGenerator(batch_size=8).generate(team, 0, prompts, 4, settings, RandomStream(11))
    assert [[c.ids for c in row] for row in candidates] == [[c.ids for c in row] for row in sorted_in_full]
    rows_sampled = 16 * settings.max_new_tokens
    assert made and sum(m.fallback_rows for m in made) < rows_sampled  # the candidates decided some steps


def test_a_row_without_a_finite_logit_is_left_to_the_warper():
    scores = torch.full((2, VOCAB), float("-inf"))
    scores[1, 7] = 0.0
    sizes = nucleus_sizes(*_top(scores), top_p=0.5, min_tokens_to_keep=1)
    assert sizes.tolist()[0] == -1
    full, candidate, fallback = _both(scores, 0.5)
    assert torch.equal(candidate, full) and fallback == 1  # the second row, one finite logit, is decided
