"""Activation checkpointing of the agents, and the state its recomputation must see again.

A checkpointed layer (transformers' ``GradientCheckpointingLayer``) runs its forward a second time
during backward, long after the call that ran it returned. Whatever that call switched on for the
forward, the packed attention (:mod:`~comlrl_lightning.team.packed_scoring`) or a LoRA team's active
adapter, is off again by then: the recomputation would attend another way (caught by the
non-reentrant checkpoint as a mismatch) or through another agent's adapter (not caught: wrong
gradients). :func:`recomputed_inside` re-enters that state around the recomputation.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, cast

from torch import nn

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.compat import checkpoint_functions_wrapped, checkpointed_layers

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def base_model(model: nn.Module) -> PreTrainedModel:
    """The transformers model under ``model``'s adapters (``model`` itself without any)."""
    get_base_model = getattr(model, "get_base_model", None)  # a peft model's, a LoRA view's
    return get_base_model() if get_base_model is not None else cast("PreTrainedModel", model)


def is_checkpointing(model: nn.Module) -> bool:
    """Whether ``model`` (or the transformers model under its adapters) recomputes activations in backward."""
    return bool(getattr(base_model(model), "is_activation_checkpointing", False))


def enable_activation_checkpointing(model: nn.Module, every_n_layers: int = 1) -> None:
    """transformers' activation checkpointing (non-reentrant) on ``model`` or the model under its
    adapters, of every ``every_n_layers``-th decoder layer (the others keep their activations)."""
    base = base_model(model)
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ConfigurationError(
            f"gradient_checkpointing: {type(base).__name__} does not support activation checkpointing."
        )
    options = {"use_reentrant": False}
    base.activation_checkpointing_enable(activation_checkpointing_kwargs=options, every_n_layers=every_n_layers)


@contextlib.contextmanager
def recomputed_inside(model: nn.Module, state: Callable[[], ContextManager]) -> Iterator[None]:
    """Within this block, ``model``'s checkpointed layers recompute their forward inside ``state()``.

    The layers' checkpoint functions are wrapped for the block only; the recomputation captured
    the wrapped one, so it still enters ``state()`` when backward runs after the block.
    """
    layers = checkpointed_layers(model) if is_checkpointing(model) else []
    with checkpoint_functions_wrapped(
        layers, lambda checkpoint: functools.partial(_checkpoint_inside, checkpoint, state)
    ):
        yield


def _checkpoint_inside(checkpoint: Callable, state: Callable[[], ContextManager], function: Callable, *args, **kwargs):
    def inside(*inputs, **options):
        with state():
            return function(*inputs, **options)

    return checkpoint(inside, *args, **kwargs)
