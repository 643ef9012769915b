"""The math of preference learning, as small pure tensor functions.

Everything here is side-effect free and works on plain tensors, so it can be used in any
training loop (Lightning or not) and tested against hand-computed values.
"""

from __future__ import annotations

from typing import Dict, Literal, get_args

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


def trajectory_margins(row_logprobs: torch.Tensor, owners: torch.Tensor, num_pairs: int) -> torch.Tensor:
    """One agent's margins over multi-turn trajectories, from the log-probs of its turns.

    Row ``r`` is one turn of one trajectory: ``row_logprobs[r] = log pi_i(a_{i,t} | h_{i,t})``, and
    ``owners[r]`` is ``p`` for a turn of pair ``p``'s winner, ``B + p`` for one of its loser
    (``B = num_pairs``). The margin sums each side's own turns (a trajectory that ended early has
    fewer):

        Delta_i(p) = sum_t log pi_i(a^w_{i,t} | h^w_{i,t}) - sum_t log pi_i(a^l_{i,t} | h^l_{i,t})

    With one row per side (one turn) it is the single-turn margin. Returns ``[B]``; gradients flow
    to every row.
    """
    sums = row_logprobs.new_zeros(2 * num_pairs).index_add(0, owners.to(row_logprobs.device), row_logprobs)
    return sums[:num_pairs] - sums[num_pairs:]


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Bradley–Terry pairwise loss ``mean_b -log sigmoid(chosen_b - rejected_b)``."""
    return -F.logsigmoid(chosen - rejected).mean()


def bradley_terry_metrics(chosen: torch.Tensor, rejected: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Per-pair metrics of a reward model (detached, ``[B]`` each): ``accuracy_b = [chosen_b > rejected_b]``
    and ``margin_b = chosen_b - rejected_b``; their means over the pairs are what is logged."""
    return {"accuracy": (chosen > rejected).float(), "margin": (chosen - rejected).detach()}


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


# ------------------------------------------------------------------------------------------------
# Policy-gradient pieces (MARLHF / MAGRPO family)

Baseline = Literal["mean", "raw", "max", "rloo"]
"""The group baselines of :func:`group_advantages`."""
ADVANTAGE_BASELINES = get_args(Baseline)
"""Group baselines: MAGRPO (mean), MAREINFORCE (raw), MAReMax (max), MARLOO (leave-one-out)."""


def group_advantages(
    returns: torch.Tensor, baseline: Baseline = "mean", normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages of ``G`` samples of the same prompt; ``returns`` is ``[..., G]``.

    * ``mean``: ``A_g = R_g - mean(R)``;
    * ``raw``:  ``A_g = R_g``;
    * ``max``:  ``A_g = R_g - max(R)``;
    * ``rloo``: ``A_g = R_g - mean_{h != g} R_h = (G R_g - sum R) / (G - 1)`` (``mean`` when ``G = 1``).

    With ``normalize``, ``A`` is divided by ``max(std_pop(R), eps)`` *without re-centering*, so the
    four baselines stay different algorithms (re-centering, as the reference does, maps all four to
    the same z-score).
    """
    size = returns.shape[-1]
    if baseline == "mean" or (baseline == "rloo" and size <= 1):
        advantages = returns - returns.mean(dim=-1, keepdim=True)
    elif baseline == "raw":
        advantages = returns.clone()
    elif baseline == "max":
        advantages = returns - returns.max(dim=-1, keepdim=True).values
    elif baseline == "rloo":
        advantages = (size * returns - returns.sum(dim=-1, keepdim=True)) / (size - 1)
    else:
        raise ValueError(f"baseline must be one of: {', '.join(ADVANTAGE_BASELINES)}.")
    if normalize and size > 1:
        advantages = advantages / returns.std(dim=-1, unbiased=False, keepdim=True).clamp_min(eps)
    return advantages


def policy_gradient_loss(sequence_logprobs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """REINFORCE loss ``mean_s -A_s * log pi(completion_s)`` (advantages are constants)."""
    return -(advantages.detach() * sequence_logprobs).mean()


def k3_kl(policy_logprobs: torch.Tensor, reference_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence k3 estimate of ``KL(policy || reference)`` summed over the masked tokens.

    ``k3 = exp(r) - r - 1`` with ``r = log p_ref - log p_pol`` per token (non-negative, unbiased).
    All inputs are ``[M, T]``; returns ``[M]``.
    """
    ratio = reference_logprobs - policy_logprobs
    return ((torch.exp(ratio) - ratio - 1.0) * mask).sum(dim=-1)


# ------------------------------------------------------------------------------------------------
# Actor-critic pieces (MAAC / IAC)


def actor_critic_advantages(
    returns: torch.Tensor, values: torch.Tensor, normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """One-step actor-critic advantages ``A = R̃ - V`` over a whole update batch.

    ``returns`` are the (KL-shaped) returns ``R̃``, ``values`` the critic's ``V`` (or ``Q``) of the
    same samples, any equal shapes; ``V`` is treated as a constant. With ``normalize`` (as the
    reference), ``A`` is standardised over every element: ``(A - mean A) / max(std_pop A, eps)``,
    unless it has a single element.
    """
    advantages = returns.detach().float() - values.detach().float()
    if normalize and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / advantages.std(unbiased=False).clamp_min(eps)
    return advantages


def value_loss(
    values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor | None = None, clip_range: float | None = None
) -> torch.Tensor:
    """Mean squared error of the critic, optionally clipped around the values at rollout time.

    Unclipped: ``mean (V - R)^2``. With ``old_values`` and ``clip_range = c`` (PPO-style):

        mean max( (V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2 )

    ``returns`` and ``old_values`` are constants.
    """
    returns = returns.detach().to(values.dtype)
    error = (values - returns) ** 2
    if old_values is None or clip_range is None:
        return error.mean()
    old_values = old_values.detach().to(values.dtype)
    clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    return torch.maximum(error, (clipped - returns) ** 2).mean()


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """``1 - Var(R - V) / Var(R)`` (population variances): 1 is a perfect critic, 0 no better than the
    mean, negative worse; ``nan`` when the returns do not vary."""
    values, returns = values.detach().float().reshape(-1), returns.detach().float().reshape(-1)
    variance = returns.var(unbiased=False)
    if not variance > 0:
        return torch.tensor(float("nan"))
    return 1.0 - (returns - values).var(unbiased=False) / variance
