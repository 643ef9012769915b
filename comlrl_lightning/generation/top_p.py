"""Top-p (nucleus) filtering from the top-k candidates, the same kept tokens as a full sort.

transformers' ``TopPLogitsWarper`` sorts every row of ``[B, vocab]`` logits at every decoded token
(49,152 entries a row for SmolLM2), to keep the smallest set of most probable tokens whose mass
reaches ``top_p``. That set almost always lies among a few dozen tokens. :class:`CandidateTopP`
takes the ``candidates`` most probable tokens of each row (``torch.topk``), finds the kept set
among them, and hands a row to ``TopPLogitsWarper`` itself only where the answer could differ
from the warper's (:func:`nucleus_sizes`): the candidates' mass does not reach ``top_p``, the
boundary falls within rounding of ``top_p``, or tied logits straddle it (the warper then keeps
whichever of the tied tokens its sort puts last). So the filtered scores are the warper's, and
a seeded sampler draws the same tokens.
"""

from __future__ import annotations

import torch

DEFAULT_CANDIDATES = 64
"""Candidates per row: SmolLM2's top-p 0.9 nucleus lies within them on most decoded tokens."""
BOUNDARY_TOLERANCE = 1e-3
"""How far above or below ``top_p`` a candidate's preceding mass must be to be decided here: the
warper's float32 softmax and cumulative sum over the whole vocabulary may round a mass within
this of ``top_p`` to the other side (their error on 49,152 probabilities is far below it)."""


def nucleus_sizes(
    top_logits: torch.Tensor, log_normalizer: torch.Tensor, top_p: float, min_tokens_to_keep: int
) -> torch.Tensor:
    """How many of each row's candidates top-p keeps, or ``-1`` where this cannot be decided exactly.

    ``top_logits`` ``[B, k]`` are each row's ``k`` largest logits in descending order and
    ``log_normalizer`` ``[B]`` the log-sum-exp of the whole row. ``TopPLogitsWarper`` keeps a
    token when the mass of the tokens sorted above it is below ``top_p`` (its cumulative sum from
    the least probable token exceeds ``1 - top_p``), and always the ``min_tokens_to_keep`` most
    probable. A row is undecided (``-1``) when every candidate is kept (their mass does not reach
    ``top_p``, so the nucleus may go on past them), a candidate's preceding mass lies within
    :data:`BOUNDARY_TOLERANCE` of ``top_p`` (which also covers a mass that passes ``top_p`` by less),
    or the last kept and first dropped candidates tie. Whether a mass equal to ``top_p`` counts
    as below it never matters: such a row is undecided.
    """
    probabilities = (top_logits.double() - log_normalizer.double().unsqueeze(-1)).exp()
    above = probabilities.cumsum(dim=-1) - probabilities  # mass sorted strictly above each candidate
    kept = (above < top_p).sum(dim=-1).clamp(min=min_tokens_to_keep)
    count = top_logits.shape[-1]
    # NaN masses (a row of -inf logits) compare False: undecided
    clear = ((above - top_p).abs() >= BOUNDARY_TOLERANCE).all(dim=-1)
    inside = kept < count
    last_kept = top_logits.gather(1, (kept - 1).clamp(max=count - 1).unsqueeze(-1)).squeeze(-1)
    first_dropped = top_logits.gather(1, kept.clamp(max=count - 1).unsqueeze(-1)).squeeze(-1)
    untied = last_kept != first_dropped
    decided = clear & inside & untied
    return torch.where(decided, kept, torch.full_like(kept, -1))


class CandidateTopP:
    """A logits processor that filters as ``TopPLogitsWarper(top_p, filter_value, min_tokens_to_keep)``
    from each row's ``candidates`` largest logits, sorting only the rows :func:`nucleus_sizes`
    leaves undecided (through the warper itself).

    Args:
        top_p: the mass to keep, in ``[0, 1]``.
        candidates: logits taken per row before falling back to the full sort (at least
            ``min_tokens_to_keep + 1``).
        filter_value: the score of a filtered token.
        min_tokens_to_keep: tokens always kept, as the warper's.
    """

    def __init__(
        self,
        top_p: float,
        candidates: int = DEFAULT_CANDIDATES,
        filter_value: float = -float("inf"),
        min_tokens_to_keep: int = 1,
    ) -> None:
        from transformers.generation.logits_process import TopPLogitsWarper

        self.full_sort = TopPLogitsWarper(top_p, filter_value=filter_value, min_tokens_to_keep=min_tokens_to_keep)
        if candidates <= min_tokens_to_keep:
            raise ValueError(f"candidates must be > min_tokens_to_keep ({min_tokens_to_keep}), got {candidates}.")
        self.top_p, self.candidates = float(top_p), candidates
        self.filter_value, self.min_tokens_to_keep = filter_value, min_tokens_to_keep
        self.fallback_rows = 0
        """Rows sorted in full so far (a measure of how often the candidates did not decide)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        count = min(self.candidates, scores.shape[-1])
        if count <= self.min_tokens_to_keep or scores.dtype not in (torch.float32, torch.float64):
            # half-precision scores: the warper's own softmax rounds far more than BOUNDARY_TOLERANCE
            return self.full_sort(input_ids, scores)
        top_logits, top_indices = scores.topk(count, dim=-1)
        sizes = nucleus_sizes(top_logits, scores.logsumexp(dim=-1), self.top_p, self.min_tokens_to_keep)
        keep = torch.arange(count, device=scores.device).unsqueeze(0) < sizes.unsqueeze(-1)
        filtered = torch.full_like(scores, self.filter_value)
        filtered.scatter_(1, top_indices, torch.where(keep, top_logits, self.filter_value))
        undecided = (sizes < 0).nonzero().squeeze(-1)
        if undecided.numel():
            self.fallback_rows += int(undecided.numel())
            filtered[undecided] = self.full_sort(input_ids[undecided], scores[undecided])
        return filtered


__all__ = ["BOUNDARY_TOLERANCE", "DEFAULT_CANDIDATES", "CandidateTopP", "nucleus_sizes"]
