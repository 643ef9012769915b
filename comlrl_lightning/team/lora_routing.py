"""One pass for a LoRA team: every row of a batch through its own agent's adapter.

A LoRA team's agents share one base model, so N agents need not run N forwards: the rows of all
agents go through the base together and each LoRA layer adds, to each agent's rows, that agent's
low-rank product ``B_a A_a x * scaling_a`` (grouped by adapter, as serving systems batch many
adapters; the rows of an agent are consecutive, so a group is a slice). An adapter's parameters
touch only its own rows, so one backward gives every adapter exactly the gradient of its own
forward. Rows without an agent (group ``-1``) go through the base alone.

The routing is a small object set around a forward or a ``generate()`` call: which adapter each
consecutive *unit* goes through, a unit being a batch row, a prompt whose samples follow it in
the batch, or a token of a packed sequence; every token of the call belongs to one unit, the
units in order, equally many tokens each. Each LoRA layer checks that it sees every token of the
call (a layer that sees a subset, such as a LoRA LM head after ``logits_to_keep`` or an expert of
a mixture, cannot be routed and is refused by :func:`supports_mixed_adapters`).

Every peft internal read here (a LoRA layer's base layer, adapters, dropouts, scalings, variant)
goes through :mod:`comlrl_lightning.runtime.compat`, which checks at import that peft still has them.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from peft import PeftModel
from torch import nn

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.compat import (
    casts_lora_input,
    check_peft_lora,
    lora_base_layer,
    lora_parts,
    lora_plain,
    peft_tuner_classes,
)
from comlrl_lightning.team.activation_checkpointing import recomputed_inside
from comlrl_lightning.team.fused_head import output_head
from comlrl_lightning.team.lora import SharedModelView

_TUNER_MODULES: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()
_ROUTED: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
"""LoRA layers whose forward a :func:`routed` block has replaced (an inner block restores the outer one's)."""
check_peft_lora()


def tuner_modules(shared: nn.Module) -> List[nn.Module]:
    """peft's adapter layers and trained module copies in ``shared``: found once per model and
    number of adapters (a scan of every module costs milliseconds on every call otherwise)."""
    adapters = len(getattr(shared, "peft_config", {}))
    cached = _TUNER_MODULES.get(shared)
    if cached is None or cached[0] != adapters:
        kinds = peft_tuner_classes()[:2]
        cached = (adapters, [module for module in shared.modules() if isinstance(module, kinds)])
        _TUNER_MODULES[shared] = cached
    return cached[1]


def lora_layers(shared: nn.Module) -> List[nn.Module]:
    """The LoRA layers of ``shared`` (those a routing patches)."""
    lora_layer = peft_tuner_classes()[2]
    return [module for module in tuner_modules(shared) if isinstance(module, lora_layer)]


def supports_mixed_adapters(shared: nn.Module) -> bool:
    """Whether every adapter layer of ``shared`` can be routed per row: plain LoRA on linear layers
    (no DoRA or other variant, nothing merged), no trained copies of whole modules, and no adapter
    on the LM head (it sees only the scored positions)."""
    base_tuner_layer, _, _, lora_linear = peft_tuner_classes()
    modules = tuner_modules(shared)
    for module in modules:
        if type(module) is not lora_linear or not lora_plain(module):  # noqa: E721 - exact class
            return False
    return bool(modules) and not isinstance(output_head(shared), base_tuner_layer)


class Routing:
    """Which adapter each consecutive unit of a call goes through (``None``: the base alone).

    Args:
        adapters: the adapter name of each group id.
        groups: ``[units]`` group id of each unit (``-1``: no adapter).
    """

    def __init__(self, adapters: Sequence[Optional[str]], groups: torch.Tensor) -> None:
        values, counts = torch.unique_consecutive(groups.reshape(-1), return_counts=True)
        self.runs = [(adapters[g] if g >= 0 else None, n) for g, n in zip(values.tolist(), counts.tolist())]
        self.units = int(groups.numel())
        self.tokens: Optional[int] = None  # tokens of the running call (set by the model's pre-forward hook)
        self._slices: Dict[int, List[Tuple[Optional[str], int, int]]] = {}

    def slices(self, tokens: int) -> List[Tuple[Optional[str], int, int]]:
        """``(adapter, start, stop)`` over the flattened tokens of a layer's input."""
        if tokens in self._slices and tokens == self.tokens:
            return self._slices[tokens]
        if tokens != self.tokens or tokens % self.units:
            raise ConfigurationError(
                f"one-pass LoRA routing: a LoRA layer saw {tokens} tokens in a call of {self.tokens} tokens "
                f"over {self.units} units; this model's adapters cannot be routed per row "
                "(set team.lora_one_pass: false)."
            )
        per_unit, start, out = tokens // self.units, 0, []
        for adapter, count in self.runs:
            out.append((adapter, start, start + count * per_unit))
            start += count * per_unit
        self._slices[tokens] = out
        return out


def routed_lora_forward(layer: nn.Module, routing: Routing, x: torch.Tensor, *args: Any, **kwargs: Any):
    """A peft LoRA linear layer's forward with each slice of rows through its own adapter:
    ``base(x) + B_a(A_a(dropout_a(x))) * scaling_a`` per slice, as peft computes it for one adapter."""
    result = lora_base_layer(layer)(x, *args, **kwargs)
    flat = x.reshape(-1, x.shape[-1])
    slices = routing.slices(flat.shape[0])
    # split, not indexing: its backward is one concatenation, not a zero-filled input-sized gradient per slice
    parts = flat.split([stop - start for _, start, stop in slices])
    deltas: list = []
    for (adapter, _, _), part in zip(slices, parts):
        parts_of = lora_parts(layer, adapter) if adapter is not None else None
        if parts_of is None:
            deltas.append(part.shape[0])  # rows without an adapter: zeros, filled in below
            continue
        lora_a, lora_b, dropout, scaling = parts_of
        rows = cast_input(layer, part, lora_a.weight.dtype)
        deltas.append(lora_b(lora_a(dropout(rows))) * scaling)
    computed = [d for d in deltas if isinstance(d, torch.Tensor)]
    if not computed:
        return result
    like = computed[0]
    delta = torch.cat([d if isinstance(d, torch.Tensor) else like.new_zeros(d, like.shape[-1]) for d in deltas])
    return (result + delta.view(*result.shape[:-1], delta.shape[-1])).to(result.dtype)


def cast_input(layer: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in the adapter weights' ``dtype``, as peft casts a LoRA input (unless the layer's
    ``cast_input_dtype_enabled`` is off, e.g. inside ``peft.helpers.disable_input_dtype_casting``)."""
    if not casts_lora_input(layer) or x.dtype == dtype:
        return x
    return x.to(dtype=dtype)


@contextlib.contextmanager
def routed(shared: PeftModel, routing: Routing) -> Iterator[None]:
    """Inside the block every LoRA layer of ``shared`` routes its rows by ``routing``."""

    def count_tokens(module, args, kwargs) -> None:
        inputs = kwargs.get("input_ids")
        if inputs is None:
            inputs = kwargs.get("inputs_embeds")
            inputs = inputs[..., 0] if inputs is not None else args[0]
        routing.tokens = int(inputs.numel())

    layers = lora_layers(shared)
    previous = [layer.forward if layer in _ROUTED else None for layer in layers]
    hook = shared.get_base_model().register_forward_pre_hook(count_tokens, with_kwargs=True)
    for layer in layers:
        layer.forward = functools.partial(routed_lora_forward, layer, routing)  # an instance attribute wins
        _ROUTED.add(layer)
    try:
        yield
    finally:
        hook.remove()
        for layer, forward in zip(layers, previous):
            if forward is None:  # back to the class's forward
                del layer.forward
                _ROUTED.discard(layer)
            else:
                layer.forward = forward


class MixedAdapters(SharedModelView, nn.Module):
    """A LoRA team's shared model with every unit of a call through its own agent's adapter.

    ``groups`` holds the agent index of each batch row (scoring) or prompt (sampling: its samples
    follow it); a packed scoring call (``packed_layout``) routes the packed tokens by the layout's
    ``token_groups``. Checkpointed layers recompute through the same routing in backward.
    """

    def __init__(self, shared: PeftModel, adapters: Sequence[str], groups: torch.Tensor) -> None:
        super().__init__()
        self.shared = shared
        self.adapters, self.groups = list(adapters), groups

    def routing(self, packed_layout: Any = None) -> Routing:
        if packed_layout is None:
            return Routing(self.adapters, self.groups)
        if packed_layout.token_groups is None:
            raise ValueError("a packed layout for one-pass LoRA scoring needs the rows' groups (row_groups)")
        return Routing(self.adapters, packed_layout.token_groups)

    def forward(self, *args: Any, **kwargs: Any):
        state = functools.partial(routed, self.shared, self.routing(kwargs.get("packed_layout")))
        with recomputed_inside(self.shared, state), state():
            return self.shared(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any):
        with routed(self.shared, self.routing()):
            return self.shared.generate(*args, **kwargs)
