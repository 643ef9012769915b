"""Packed scoring: every distinct prompt and every completion token runs exactly once, unpadded.

:meth:`Team.score` needs, per row, the summed log-probabilities of scored completion
tokens. One padded forward of ``[winners; losers]`` computes each prompt twice (winner and loser
share it) and pads every completion to the longest. Here the tokens are laid out as ONE sequence:
the distinct prompts, then each row's completion up to the last token it scores. Everything in a
transformer but attention works token by token, so only attention needs the structure back: a
registered attention function gathers, for every prompt and every completion, its queries and the
keys it may see (its prompt's, then its own, causally) into a small padded batch, runs SDPA on it
and scatters the result back. The model's own code does the rest (embeddings, rotary positions
from ``position_ids``, norms, MLPs, LoRA layers), and the LM head only runs on the positions that
predict a scored token (``logits_to_keep`` as indices).

It is exact up to float rounding (tested against the padded forward). Models that cannot be
scored this way (:func:`packing_refusal`: not a transformers model whose attention can be
switched per call, an encoder-decoder, a forward without keyword arguments to pass the layout
through) are known before their first call; models whose attention needs more than a mask
(soft-capping, attention sinks, a sliding window shorter than the rows) refuse at their first
call (:class:`PackingUnsupported`, nothing else is caught). Either way the model is scored the
padded way from then on, and the reason is logged once per model. Activation checkpointing
works: the recomputation of a checkpointed layer in backward switches the packed attention on
again (:func:`~comlrl_lightning.team.activation_checkpointing.recomputed_inside`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import weakref
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface

from comlrl_lightning.losses import gathered_logprobs
from comlrl_lightning.runtime.compat import attention_implementation, switches_attention
from comlrl_lightning.team.activation_checkpointing import base_model, recomputed_inside
from comlrl_lightning.team.batch_layout import completion_groups
from comlrl_lightning.team.fused_head import captured_head_if, linear_logprobs

ATTENTION_NAME = "comlrl_packed"
_UNSUPPORTED: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
"""Models (or shared models under views) scored the padded way: their reason was logged once."""
log = logging.getLogger(__name__)


class PackingUnsupported(RuntimeError):
    """The model's attention needs something the packed attention does not do."""


@dataclass
class AttentionGroup:
    """Attention rows of alike size, gathered into one padded SDPA call."""

    query_index: torch.Tensor  # [R, Q] packed position of each row's queries
    key_index: torch.Tensor  # [R, K] packed position of the keys each row sees
    mask: torch.Tensor  # [R, 1, Q, K] bool, True where a query may attend to a key
    slots: torch.Tensor  # the flat (row, query) slot of each real query
    positions: torch.Tensor  # the packed position of each real query (same order)


@dataclass
class PackedLayout:
    """Where every token of the packed sequence goes: built once per batch, shared by every layer."""

    input_ids: torch.Tensor  # [1, T] distinct prompts, then each row's fed completion tokens
    position_ids: torch.Tensor  # [1, T] each token's position in its own (prompt + completion)
    groups: List[AttentionGroup]  # the distinct prompts; the rows' completions by length (after their prompt)
    slots: torch.Tensor  # [T] every packed token's slot in the groups' concatenated outputs
    query_gather: torch.Tensor  # every group's query_index, flattened and concatenated
    query_sizes: List[int]
    key_gather: torch.Tensor  # every group's key_index, flattened and concatenated
    key_sizes: List[int]
    keep: torch.Tensor  # [S] packed positions whose logits predict a target (a completion token up to the last scored)
    targets: torch.Tensor  # [S] the token each kept position predicts
    owner: torch.Tensor  # [S] the batch row of that target
    column: torch.Tensor  # [S] its completion column
    token_groups: Optional[torch.Tensor] = None  # [T] the group of each packed token (with row_groups)


def _distinct_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_width: int, row_groups: Optional[torch.Tensor]
) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """The distinct prompts (``[P, prompt_width]``, ``-1`` at padding), each row's prompt index and,
    with ``row_groups``, each distinct prompt's group: rows of different groups never share a prompt
    (the group is the first key, so the distinct prompts come group by group)."""
    keys = input_ids[:, :prompt_width].masked_fill(attention_mask[:, :prompt_width] == 0, -1)
    if row_groups is None:
        distinct, prompt_of = torch.unique(keys, dim=0, return_inverse=True)
        return distinct, prompt_of, None
    keys = torch.cat([row_groups.to(keys).unsqueeze(1), keys], dim=1)
    distinct, prompt_of = torch.unique(keys, dim=0, return_inverse=True)
    return distinct[:, 1:], prompt_of, distinct[:, 0]


def build_layout(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor,
    row_groups: Optional[torch.Tensor] = None,
) -> Optional[PackedLayout]:
    """The packed layout of a :func:`~comlrl_lightning.team.pack_sequences` batch, or ``None`` if nothing is scored.

    Rows feed their completion only up to the token before their last scored one; a row whose
    first completion token is its last scored one only needs its prompt's last logit. With
    ``row_groups`` (``[M]``, e.g. the agent of each row of a LoRA team's one pass) a prompt is
    shared only within its group, and the layout says each packed token's group (``token_groups``).
    """
    device = input_ids.device
    rows_count, width = score_mask.shape
    prompt_width = input_ids.shape[1] - width
    scored = score_mask != 0
    if prompt_width < 1 or not bool(scored.any()):
        return None
    columns = torch.arange(width, device=device)
    needed = torch.where(scored, columns + 1, 0).amax(dim=1)  # targets per row (0: none)
    span = (needed - 1).clamp(min=0)  # completion tokens fed per row
    distinct, prompt_of, distinct_groups = _distinct_prompts(input_ids, attention_mask, prompt_width, row_groups)
    prompt_present = distinct >= 0
    prompt_length = prompt_present.sum(dim=1)
    if bool((prompt_length == 0).any()):
        return None
    # the packed sequence: prompts (row-major keeps each prompt's tokens in order), then completions
    fed = columns < span.unsqueeze(1)
    completion_ids = input_ids[:, prompt_width:]
    packed = torch.cat([distinct[prompt_present], completion_ids[fed]])
    prompt_positions = prompt_present.long().cumsum(dim=1) - 1
    completion_positions = prompt_length[prompt_of].unsqueeze(1) + columns
    position_ids = torch.cat([prompt_positions[prompt_present], completion_positions[fed]])
    prompt_start = prompt_length.cumsum(0) - prompt_length
    completion_start = int(prompt_length.sum()) + span.cumsum(0) - span

    groups, slots = _attention_groups(prompt_start, prompt_length, prompt_of, completion_start, span, packed.shape[0])

    # logits: target c of row r is predicted by its prompt's last token (c = 0) or completion token c - 1
    target_present = columns < needed.unsqueeze(1)
    last_prompt_token = (prompt_start + prompt_length - 1)[prompt_of].unsqueeze(1)
    predictor = torch.where(columns == 0, last_prompt_token, completion_start.unsqueeze(1) + columns - 1)
    owner = torch.arange(rows_count, device=device).unsqueeze(1).expand(rows_count, width)
    return PackedLayout(
        input_ids=packed.unsqueeze(0),
        position_ids=position_ids.unsqueeze(0),
        groups=groups,
        slots=slots,
        query_gather=torch.cat([g.query_index.flatten() for g in groups]),
        query_sizes=[g.query_index.numel() for g in groups],
        key_gather=torch.cat([g.key_index.flatten() for g in groups]),
        key_sizes=[g.key_index.numel() for g in groups],
        keep=predictor[target_present],
        targets=completion_ids[target_present],
        owner=owner[target_present],
        column=columns.expand(rows_count, width)[target_present],
        token_groups=_token_groups(distinct_groups, prompt_present, row_groups, fed),
    )


def _token_groups(
    prompt_groups: Optional[torch.Tensor],
    prompt_present: torch.Tensor,
    row_groups: Optional[torch.Tensor],
    fed: torch.Tensor,
) -> Optional[torch.Tensor]:
    """The group of every packed token, in the packed order: each distinct prompt's tokens (its
    group ``prompt_groups[p]``), then each row's fed completion tokens (its group ``row_groups[row]``);
    ``None`` without row groups (the prompts then have none either)."""
    if prompt_groups is None or row_groups is None:
        return None
    prompts = prompt_groups.unsqueeze(1).expand_as(prompt_present)[prompt_present]
    return torch.cat([prompts, row_groups.to(fed.device).unsqueeze(1).expand_as(fed)[fed]])


def _attention_groups(
    prompt_start: torch.Tensor,
    prompt_length: torch.Tensor,
    prompt_of: torch.Tensor,
    completion_start: torch.Tensor,
    span: torch.Tensor,
    length: int,
) -> Tuple[List[AttentionGroup], torch.Tensor]:
    """The attention groups of a packed sequence of ``length`` tokens: the distinct prompts in one
    group, then the rows' completions (each after its prompt ``prompt_of[row]``) in groups of alike
    length; and every packed token's slot in the groups' concatenated outputs."""
    last = length - 1
    groups = [_attention_group(prompt_start, prompt_length, prompt_start, torch.zeros_like(prompt_length), last)]
    for rows in completion_groups(span.tolist()):
        index = torch.tensor(rows, device=span.device, dtype=torch.long)
        groups.append(
            _attention_group(
                completion_start[index],
                span[index],
                prompt_start[prompt_of[index]],
                prompt_length[prompt_of[index]],
                last,
            )
        )
    slots, first_slot = torch.empty(length, dtype=torch.long, device=span.device), 0
    for group in groups:
        slots[group.positions] = group.slots + first_slot
        first_slot += group.query_index.numel()
    return groups, slots


def _attention_group(
    query_start: torch.Tensor,
    query_length: torch.Tensor,
    prefix_start: torch.Tensor,
    prefix_length: torch.Tensor,
    last: int,
) -> AttentionGroup:
    """Rows whose queries are ``query_length`` packed tokens from ``query_start``, each seeing its
    ``prefix_length`` prefix tokens from ``prefix_start`` and, causally, its own queries."""
    device = query_start.device
    queries = max(int(query_length.max()), 1)
    keys = int((prefix_length + query_length).max())
    q = torch.arange(queries, device=device)
    k = torch.arange(keys, device=device)
    query_index = (query_start.unsqueeze(1) + q).clamp(max=last)
    prefix = k < prefix_length.unsqueeze(1)
    key_index = torch.where(
        prefix, prefix_start.unsqueeze(1) + k, query_start.unsqueeze(1) + k - prefix_length.unsqueeze(1)
    ).clamp(min=0, max=last)
    mask = (k.view(1, 1, keys) <= (prefix_length.view(-1, 1, 1) + q.view(1, queries, 1))).unsqueeze(1)
    real = q < query_length.unsqueeze(1)
    slots = (torch.arange(query_length.shape[0], device=device).unsqueeze(1) * queries + q)[real]
    return AttentionGroup(
        query_index=query_index, key_index=key_index, mask=mask, slots=slots, positions=query_index[real]
    )


def packed_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    packed_layout: Optional[PackedLayout] = None,
    **kwargs,
) -> tuple:
    """Attention of a packed sequence (registered with transformers' ``AttentionInterface``).

    ``query`` is ``[1, heads, T, d]``, ``key``/``value`` ``[1, kv_heads, T, d]``; returns ``[1, T, heads, d]``.
    """
    layout = packed_layout
    if layout is None:
        raise PackingUnsupported("the model does not pass attention keyword arguments through")
    window = kwargs.get("sliding_window")
    widest = max(group.mask.shape[-1] for group in layout.groups)
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None or (window and window < widest):
        raise PackingUnsupported("the attention needs soft-capping, sinks or a sliding window")
    query, key, value = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, heads, d]
    queries = _gather(query, layout.query_gather).split(layout.query_sizes)  # one gather for all groups
    keys = _gather(key, layout.key_gather).split(layout.key_sizes)
    values = _gather(value, layout.key_gather).split(layout.key_sizes)
    outputs = []
    for group, q, k, v in zip(layout.groups, queries, keys, values):
        q = q.view(*group.query_index.shape, *q.shape[1:]).transpose(1, 2)  # [R, heads, Q, d]
        k = k.view(*group.key_index.shape, *k.shape[1:]).transpose(1, 2)
        v = v.view(*group.key_index.shape, *v.shape[1:]).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=group.mask, dropout_p=dropout, scale=scaling, enable_gqa=q.shape[1] != k.shape[1]
        )
        outputs.append(out.transpose(1, 2).flatten(0, 1))  # [R * Q, heads, d]
    return _gather(torch.cat(outputs), layout.slots).unsqueeze(0), None


def _gather(tokens: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``tokens[index]`` with ``index_select``: its backward adds repeated rows in a fixed order,
    where advanced indexing's backward (an accumulating ``index_put``) adds them in thread order
    on the CPU, and runs would not repeat bit for bit."""
    return tokens.index_select(0, index)


AttentionInterface.register(ATTENTION_NAME, packed_attention)


@contextlib.contextmanager
def _packed_attention(model: nn.Module, config) -> Iterator[None]:
    """The packed attention for this call, and for the recomputation of its checkpointed layers."""
    switched = functools.partial(attention_implementation, config, ATTENTION_NAME)
    with recomputed_inside(model, switched), switched():
        yield


def _packing_key(model: nn.Module) -> nn.Module:
    """What a refusal is remembered for: the model, or the shared model under a view of it (views
    of one LoRA team's model, made per call, refuse alike)."""
    return getattr(model, "shared", model)


def takes_extra_keywords(model: nn.Module) -> bool:
    """Whether the forward of the transformers model under ``model`` takes keyword arguments it
    does not name (``**kwargs``), through which the packed layout reaches the attention."""
    try:
        parameters = inspect.signature(base_model(model).forward).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume not
        return False
    return any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters)


def packing_refusal(model: nn.Module) -> Optional[str]:
    """Why ``model`` cannot be scored packed, known before any call, or ``None`` when it may be."""
    config = getattr(model, "config", None)
    if not switches_attention(config):
        return "it is not a transformers model whose attention implementation can be switched per call"
    if getattr(config, "is_encoder_decoder", False):
        return "it is an encoder-decoder model"
    if not takes_extra_keywords(model):
        return "its forward takes no keyword arguments beyond those it names"
    return None


def fall_back(model: nn.Module, reason: str) -> None:
    """Score ``model`` the padded way from now on, saying why once."""
    key = _packing_key(model)
    if key in _UNSUPPORTED:
        return
    _UNSUPPORTED.add(key)
    log.warning("%s is scored with padded forwards, not packed: %s.", type(key).__name__, reason)


def packed_token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor,
    head: Optional[nn.Linear] = None,
    row_groups: Optional[torch.Tensor] = None,
) -> Optional[torch.Tensor]:
    """``[M, C]`` float32 log-probabilities of each row's completion tokens up to its last scored
    one (0 after it), computed packed; ``None`` when the model cannot be scored that way.

    With ``head`` (the model's LM head) the log-probs come from the fused, chunked head
    (:func:`~comlrl_lightning.team.fused_head.linear_logprobs`) instead of materialised logits.
    ``row_groups`` (``[M]``): rows of different groups never share a prompt (see :func:`build_layout`).
    """
    if _packing_key(model) in _UNSUPPORTED:
        return None
    refusal = packing_refusal(model)
    if refusal is not None:
        fall_back(model, refusal)
        return None
    layout = build_layout(input_ids, attention_mask, score_mask, row_groups)
    if layout is None:
        return None
    # the model indexes its hidden states with logits_to_keep: distinct positions keep that deterministic
    positions, position_of = torch.unique(layout.keep, return_inverse=True)
    try:
        with (
            _packed_attention(model, model.config),
            captured_head_if(head) as captured,
        ):
            output = model(
                input_ids=layout.input_ids,
                position_ids=layout.position_ids,
                use_cache=False,
                logits_to_keep=positions,
                packed_layout=layout,
            )
    except PackingUnsupported as refusal:
        fall_back(model, str(refusal))
        return None
    if head is None:
        logprobs = gathered_logprobs(output.logits[0].index_select(0, position_of), layout.targets)
    else:
        logprobs = linear_logprobs(captured[-1][0].index_select(0, position_of), head.weight, head.bias, layout.targets)
    return logprobs.new_zeros(score_mask.shape).index_put((layout.owner, layout.column), logprobs)
