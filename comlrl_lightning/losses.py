"""The math of preference learning, as small pure tensor functions.

Everything here is side-effect free and works on plain tensors, so it can be used in any
training loop (Lightning or not) and tested against hand-computed values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def madpo_loss(margins: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    """Reference-free multi-agent DPO loss.

    ``margins[p, i] = log pi_i(w_i | h_i) - log pi_i(l_i | h_i)`` is agent ``i``'s log-probability
    margin on pair ``p``. The joint margin is ``Delta(p) = sum_i margins[p, i]`` and the loss is

        L = mean_p  -log sigmoid(beta * Delta(p))

    Its gradient w.r.t. agent ``i``'s parameters is ``-(beta/B) sum_p sigma(-beta Delta(p)) grad Delta_i(p)``:
    exactly the reference's per-agent loss with the other agents' margins detached, so one backward
    through this loss trains every agent at once.

    Args:
        margins: ``[B, N]`` per-pair, per-agent margins (a ``[B]`` tensor is treated as ``N = 1``).
        beta: inverse temperature ``beta > 0``.
    """
    if margins.dim() == 1:
        margins = margins.unsqueeze(-1)
    joint = margins.sum(dim=-1)
    return -F.logsigmoid(beta * joint).mean()


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Bradley–Terry pairwise loss ``mean_b -log sigmoid(chosen_b - rejected_b)``."""
    return -F.logsigmoid(chosen - rejected).mean()


def gathered_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """Log-probabilities of ``targets`` under ``logits``, computed in float32.

    ``log p(t) = logit_t - logsumexp(logits)``, evaluated in chunks of ``chunk_size`` rows so that
    only one float32 chunk of a large vocabulary is alive at a time.

    Args:
        logits: ``[..., V]`` in any dtype.
        targets: ``[...]`` token ids.
    Returns:
        ``[...]`` float32 log-probabilities.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_targets = targets.reshape(-1)
    pieces = []
    for start in range(0, flat_logits.shape[0], chunk_size):
        rows = flat_logits[start : start + chunk_size].float()
        picked = rows.gather(-1, flat_targets[start : start + chunk_size].unsqueeze(-1)).squeeze(-1)
        pieces.append(picked - torch.logsumexp(rows, dim=-1))
    if not pieces:
        return flat_logits.new_zeros(targets.shape, dtype=torch.float32)
    return torch.cat(pieces).reshape(targets.shape)
