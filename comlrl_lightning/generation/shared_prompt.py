"""Sampling with shared prompts: the K samples of a prompt start from one prefill, not K.

(Scoring shares prompts too, by packing: :mod:`comlrl_lightning.team.packed_scoring`.)
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from comlrl_lightning.runtime.compat import compiles_fullgraph
from comlrl_lightning.team.activation_checkpointing import base_model, is_checkpointing

if TYPE_CHECKING:
    from transformers import GenerationMixin


def can_share_prompts(model: nn.Module) -> bool:
    """Whether ``model`` can reuse a prompt's KV cache (HF causal LMs can, unless activation
    checkpointing turns the cache off: it does while training with grad enabled)."""
    checkpointing = is_checkpointing(model) and base_model(model).training and torch.is_grad_enabled()
    return not checkpointing


@functools.lru_cache(maxsize=None)
def _forward_keyword(model_type: type) -> str:
    """The forward() keyword of the KV cache: ``cache`` (recent transformers) or ``past_key_values``."""
    try:
        forward = getattr(model_type, "forward", None)
        if forward is None:
            return "past_key_values"
        return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def _cache_keyword(model: nn.Module) -> str:
    model_type: type = type(base_model(model))
    return _forward_keyword(model_type)


def sample_with_shared_prompts(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_samples: int, sampling: dict
) -> torch.Tensor:
    """``generate()`` of ``num_samples`` sequences per (left-padded) prompt row, rows in prompt order.

    Copying every prompt ``num_samples`` times would prefill all the copies. Here the prompts (all
    but their last token) are prefilled once, the KV cache is repeated per sample and
    ``generate()`` continues from it, so the prefill costs ``1 / num_samples`` as much and the
    same random draws pick the same tokens (tested). On the CPU the repeated cache is a
    preallocated ``StaticCache`` (:func:`_static_copy`). Falls back to ``generate()`` of the copies
    when the model's cache cannot be reused that way. ``model`` may be a LoRA team's
    one-pass view (its prompts' agents routed per row).
    """
    generating = cast("GenerationMixin", model)  # a transformers model, or a LoRA view with its generate()
    cache = _prompt_prefix_cache(model, input_ids, attention_mask) if num_samples > 1 else None
    rows = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(num_samples)
    if cache is None:  # every copy of a prompt prefilled (as num_return_sequences would)
        return generating.generate(input_ids=input_ids[rows], attention_mask=attention_mask[rows], **sampling)
    static = None
    if input_ids.device.type == "cpu":
        static = _static_copy(model, cache, num_samples, input_ids.shape[1] + sampling["max_new_tokens"])
    if static is None:
        cache.batch_repeat_interleave(num_samples)
    return generating.generate(
        input_ids=input_ids[rows],
        attention_mask=attention_mask[rows],
        **{_cache_keyword(model): static if static is not None else cache},
        **sampling,
    )


def _static_copy(model: nn.Module, cache, num_samples: int, length: int):
    """A ``StaticCache`` of ``length`` tokens holding every row of ``cache`` ``num_samples`` times, or ``None``.

    A growing cache is reallocated at every sampled token; on the CPU the allocator keeps the
    freed blocks, so its peak memory ends well above the cache's final size (90 MB more for 256
    sequences of the 3M-parameter benchmark model). A preallocated cache is written in place.
    """
    base = base_model(model)
    if not compiles_fullgraph(base) or any(getattr(cache, "is_sliding", None) or ()):
        return None
    try:
        from transformers import StaticCache

        static = StaticCache(config=base.config, max_cache_len=length)
        for index, layer in enumerate(cache.layers):
            static.update(
                layer.keys.repeat_interleave(num_samples, 0), layer.values.repeat_interleave(num_samples, 0), index
            )
    except (ImportError, TypeError, AttributeError, ValueError):  # another transformers' cache API
        return None
    return static


def _prompt_prefix_cache(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """The KV cache of every prompt but its last token, or ``None`` if generate() could not resume from it."""
    base = base_model(model)
    generation_config = getattr(base, "generation_config", None)
    if (
        not can_share_prompts(model)
        or getattr(base.config, "is_encoder_decoder", False)
        or getattr(generation_config, "cache_implementation", None) is not None
        or input_ids.shape[1] < 2
        or int(attention_mask.sum(dim=1).min()) < 2  # a one-token prompt has no prefix to share
    ):
        return None
    prefix_mask = attention_mask[:, :-1]
    output = model(
        input_ids=input_ids[:, :-1],
        attention_mask=prefix_mask,
        position_ids=(prefix_mask.long().cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        logits_to_keep=1,
    )
    cache = getattr(output, "cache", None) or getattr(output, "past_key_values", None)
    if not hasattr(cache, "batch_repeat_interleave") or any(getattr(cache, "is_linear", None) or ()):
        return None
    return cache
