"""Decoding a grouped-query model without copying its KV cache for every query head.

A grouped-query model (SmolLM2: 9 query heads over 3 key/value heads) attends with each key/value
head for several query heads. transformers' SDPA attention before 5.20 repeats every key/value
head for its query heads (``repeat_kv``) whenever a mask is given, which sampling from left-padded
prompts always does: at every decoded token, a copy of the whole KV cache, per layer, three times
its size for SmolLM2. Newer versions view the one decoded query's heads as groups under their
key/value head instead (``pack_gqa``): no copy, the same products. The vLLM environment pins
transformers below 5.20, where ``generate()`` on SmolLM2 spent more CPU time in these copies and
the wider attention than in the rest of attention together. :func:`packed_decoding` gives a
model that grouped-query decoding on those versions for the length of a sampling call.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from comlrl_lightning.runtime.compat import attention_implementation, current_attention, switches_attention
from comlrl_lightning.team.activation_checkpointing import base_model

ATTENTION_NAME = "comlrl_gqa_decode"
"""The attention registered with transformers for grouped-query decoding (SDPA otherwise)."""


def grouped_query_decode(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    **kwargs,
) -> tuple:
    """transformers' SDPA attention, except for one decoded query of a grouped-query layer under a
    mask shared by its heads: ``query`` ``[B, heads, 1, d]`` is viewed as ``[B, kv_heads, groups, d]``
    and attends to ``key``/``value`` ``[B, kv_heads, S, d]`` as they are. Returns ``[B, 1, heads, d]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, length, dim = query.shape
    plain = (
        length != 1
        or groups == 1
        or attention_mask is None  # transformers then lets SDPA group the heads itself (enable_gqa)
        or attention_mask.dim() != 4
        or attention_mask.shape[1] != 1
        or any(kwargs.get(name) is not None for name in ("position_bias", "softcap", "s_aux"))
        or kwargs.get("output_attentions", False)
    )
    if plain:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    grouped = query.reshape(batch, heads // groups, groups, dim)
    output = F.scaled_dot_product_attention(
        grouped, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return output.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def transformers_packs_decoding() -> bool:
    """Whether the installed transformers' SDPA attention groups a decoded query's heads itself (5.20 on)."""
    from transformers.integrations import sdpa_attention

    return hasattr(sdpa_attention, "pack_gqa")


def grouped_decoding_registrable() -> bool:
    """Whether transformers has an attention registry and its SDPA copies the KV cache per query
    head when decoding (transformers 5 below 5.20): where :func:`grouped_query_decode` is needed."""
    try:
        from transformers import AttentionInterface  # noqa: F401 (transformers 4 has no registry)
    except ImportError:
        return False
    return not transformers_packs_decoding()


def register_grouped_query_decode() -> None:
    """Register :func:`grouped_query_decode` (with SDPA's masks) as :data:`ATTENTION_NAME` with
    transformers. Called where a sampling call first switches to it, never on import (importing
    the package changes no registry); registering again writes the same entries."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, grouped_query_decode)
    AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def _decoder_config(model: nn.Module):
    """The config whose attention switch ``model``'s decoder layers read (a multimodal model's text config)."""
    config = getattr(base_model(model), "config", None)
    get_text_config = getattr(config, "get_text_config", None)
    return get_text_config() if callable(get_text_config) else config


def needs_packed_decoding(model: nn.Module) -> bool:
    """Whether ``model`` attends with SDPA over fewer key/value heads than query heads, on a
    transformers whose SDPA copies the KV cache per query head when decoding."""
    config = _decoder_config(model)
    if not switches_attention(config) or not grouped_decoding_registrable():
        return False
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return current_attention(config) == "sdpa" and bool(heads) and int(kv_heads or 0) < int(heads or 0)


@contextlib.contextmanager
def packed_decoding(model: nn.Module) -> Iterator[None]:
    """Within this block ``model`` decodes with :func:`grouped_query_decode` where it needs it
    (:func:`needs_packed_decoding`); otherwise nothing changes."""
    if not needs_packed_decoding(model):
        yield
        return
    register_grouped_query_decode()
    with attention_implementation(_decoder_config(model), ATTENTION_NAME):
        yield


__all__ = [
    "ATTENTION_NAME",
    "grouped_decoding_registrable",
    "grouped_query_decode",
    "needs_packed_decoding",
    "packed_decoding",
    "register_grouped_query_decode",
]
