"""Fast MADPO scoring: each distinct prompt runs once on a KV cache shared by its completions.

:func:`shared_prompt_logprobs` computes exactly what :meth:`Team.sequence_logprobs` computes with
one padded forward (causal attention makes it exact), with fewer FLOPs: in a MADPO batch the
winner and the loser of a pair share their prompt, and completions run in length buckets only up
to the last token they score. It is used whenever the model can reuse a KV cache.
"""

from __future__ import annotations

import functools
import inspect
from typing import List, Optional, Sequence

import torch
from torch import nn

from .losses import gathered_logprobs


def can_share_prompts(model: nn.Module) -> bool:
    """Whether ``model`` can score completions on a shared prompt KV cache (HF causal LMs can,
    unless gradient checkpointing turns the cache off)."""
    return bool(getattr(model, "_supports_cache_class", True)) and not _checkpointing(model)


def _checkpointing(model: nn.Module) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new name first (no warning)
        if hasattr(type(model), name) or name in vars(model):
            return bool(getattr(model, name))
    return False


@functools.lru_cache(maxsize=None)
def _forward_keyword(model_type: type) -> str:
    """The forward() keyword of the KV cache: ``cache`` (recent transformers) or ``past_key_values``."""
    try:
        return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def _cache_keyword(model: nn.Module) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_keyword(type(base))


CPU_CALL_COST = 5e7
"""On CPU one more stage-2 forward call costs about ``CPU_CALL_COST / parameters`` padded token
positions (a fixed per-call cost against a per-token cost that grows with the model), clamped to
``[8, 512]``; see :func:`length_buckets`."""
ACCELERATOR_CALL_COST_TOKENS = 2048
"""On accelerators kernel launches dominate small calls: bucket only when padding is large."""


def call_cost_tokens(model: nn.Module, device: torch.device) -> int:
    if device.type != "cpu":
        return ACCELERATOR_CALL_COST_TOKENS
    parameters = sum(p.numel() for p in model.parameters())
    return int(min(max(CPU_CALL_COST / max(parameters, 1), 8), 512))


def length_buckets(lengths: Sequence[int], call_cost: int = ACCELERATOR_CALL_COST_TOKENS) -> List[List[int]]:
    """Split rows into buckets (lists of row indices) that each run padded to their longest row.

    Minimises ``sum(rows * width) + call_cost * buckets`` over splits of the rows sorted by length
    (dynamic programming over the distinct lengths): one call when lengths are alike, several when
    a few long rows would otherwise pad many short ones.
    """
    order = sorted(range(len(lengths)), key=lambda r: lengths[r])
    widths = sorted(set(lengths))
    upto = [sum(1 for v in lengths if v <= w) for w in widths]  # rows with length <= widths[k]
    best, cut = [0.0] + [float("inf")] * len(widths), [0] * (len(widths) + 1)
    for end in range(1, len(widths) + 1):
        for begin in range(end):
            rows = upto[end - 1] - (upto[begin - 1] if begin else 0)
            cost = best[begin] + rows * widths[end - 1] + call_cost
            if cost < best[end]:
                best[end], cut[end] = cost, begin
    bounds, end = [], len(widths)
    while end > 0:
        bounds.append((cut[end], end))
        end = cut[end]
    buckets = []
    for begin, end in reversed(bounds):
        low, high = (upto[begin - 1] if begin else 0), upto[end - 1]
        buckets.append(order[low:high])
    return buckets


@functools.lru_cache(maxsize=None)
def _cache_data_keyword(cache_type: type) -> Optional[str]:
    """The constructor keyword that fills a cache from ``(key, value)`` per layer, if it has one."""
    try:
        parameters = inspect.signature(cache_type.__init__).parameters
    except (TypeError, ValueError):
        return None
    return next((k for k in ("ddp_cache_data", "_distributed_cache_data") if k in parameters), None)


def _select_rows(cache, rows: torch.Tensor):
    """A new cache holding ``rows`` of ``cache`` (which is left as is), or ``None`` if not possible."""
    keyword = _cache_data_keyword(type(cache))
    if keyword is None:
        return None
    try:
        entries = [tuple(t[rows] if i < 2 else t for i, t in enumerate(entry)) for entry in cache]
    except (TypeError, IndexError):
        return None
    return type(cache)(**{keyword: entries})


def shared_prompt_logprobs(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, score_mask: torch.Tensor
) -> Optional[torch.Tensor]:
    """:meth:`Team.sequence_logprobs` with every distinct prompt run once and little padding.

    Stage 1 runs the distinct (left-padded) prompts with a KV cache and keeps the logits of their
    last position (they predict completion token 0). Stage 2 runs each row's completion on its
    prompt's cache rows (the gradient flows back into the shared prompt), only up to the last
    token the row scores, in length buckets (:func:`length_buckets`). In a MADPO batch the winner
    and the loser of a pair share their prompt, so prompts are computed half as often as in one
    padded forward of ``[winners; losers]``, and padding and unscored trailing columns mostly
    vanish. Causal attention makes it exact. Returns ``None`` when the cache cannot be reused.
    """
    width = score_mask.shape[1]
    prompt_width = input_ids.shape[1] - width
    scored = score_mask != 0
    if prompt_width < 1 or not bool(scored.any()):
        return None
    columns = torch.arange(width, device=score_mask.device)
    needed = (torch.where(scored, columns + 1, 0).amax(dim=1)).tolist()  # tokens to predict per row
    prompt_mask = attention_mask[:, :prompt_width]
    keys = input_ids[:, :prompt_width].masked_fill(prompt_mask == 0, -1)
    distinct, rows = torch.unique(keys, dim=0, return_inverse=True)
    live = (distinct >= 0).any(dim=0).nonzero()
    distinct = distinct[:, int(live.min()) :]  # drop columns that are padding in every distinct prompt
    distinct_mask = (distinct >= 0).to(attention_mask.dtype)
    first = model(
        input_ids=distinct.clamp(min=0),
        attention_mask=distinct_mask,
        position_ids=(distinct_mask.long().cumsum(-1) - 1).clamp(min=0),
        use_cache=max(needed) > 1,
        logits_to_keep=1,
    )
    first_logprobs = gathered_logprobs(first.logits[:, -1][rows], input_ids[:, prompt_width])
    total = first_logprobs * score_mask[:, 0]
    rest = [r for r in range(len(needed)) if needed[r] > 1]
    if not rest:
        return total
    cache = getattr(first, "cache", None) or getattr(first, "past_key_values", None)
    if cache is None:
        return None
    cache_keyword, prompt_lengths = _cache_keyword(model), distinct_mask.sum(-1).long()
    sums = []
    call_cost = call_cost_tokens(model, input_ids.device)
    buckets = [[rest[k] for k in bucket] for bucket in length_buckets([needed[r] - 1 for r in rest], call_cost)]
    for bucket in buckets:
        index = torch.tensor(bucket, device=input_ids.device)
        span = max(needed[r] for r in bucket) - 1  # completion tokens fed: c[0] .. c[span - 1]
        bucket_cache = _select_rows(cache, rows[index])
        if bucket_cache is None:
            return None
        completion = input_ids[index, prompt_width : prompt_width + span]
        second = model(
            input_ids=completion,
            attention_mask=torch.cat(
                [distinct_mask[rows[index]], attention_mask[index, prompt_width : prompt_width + span]], dim=1
            ),
            position_ids=prompt_lengths[rows[index]].unsqueeze(1) + torch.arange(span, device=input_ids.device),
            use_cache=True,
            logits_to_keep=span,
            **{cache_keyword: bucket_cache},
        )
        targets = input_ids[index, prompt_width + 1 : prompt_width + 1 + span]
        sums.append((gathered_logprobs(second.logits, targets) * score_mask[index, 1 : 1 + span]).sum(dim=-1))
    order = torch.tensor([r for bucket in buckets for r in bucket], device=input_ids.device)
    return total.index_add(0, order, torch.cat(sums))
