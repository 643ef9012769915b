"""A fused, chunked LM head: token log-probabilities without ``[positions, vocabulary]`` logits.

``log p(t | h) = (h W^T + b)_t - logsumexp(h W^T + b)`` is computed a chunk of positions at a
time, keeping only each position's log-prob and logsumexp; backward recomputes each chunk's
logits and turns them into the gradients of the hidden states, of ``W`` (tied embeddings
included: it is the same parameter) and of ``b``. Peak memory is one chunk's float32 logits
instead of every scored position's logits, their float32 copies and their gradient, which is
what dominates a step with a 128k-256k vocabulary. Liger-Kernel's fused linear cross-entropy and
Apple's Cut Cross-Entropy do the same on GPU with Triton; this one is plain PyTorch, so it runs
on every device.

:func:`captured_head` runs a model with its LM head swapped for a recorder, so the model's own
forward (adapters, packed attention, activation checkpointing) runs unchanged and only the head's
matrix product is left out; :func:`fusable_head` says when that is exact.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager, Iterator, List, Optional

import torch
from torch import nn

from comlrl_lightning.team.activation_checkpointing import base_model

CHUNK_ELEMENTS = 1 << 24
"""Logit elements per chunk (64 MiB in float32): about 110 positions of a 151,936-token vocabulary."""


class _LinearLogprobs(torch.autograd.Function):
    """Float32 ``log softmax(h W^T + b)[t]`` per row, recomputing each chunk in backward."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk: int, compute_dtype):
        with torch.autocast(hidden.device.type, enabled=False):
            out = hidden.new_empty(hidden.shape[0], dtype=torch.float32)
            lse = hidden.new_empty(hidden.shape[0], dtype=torch.float32)
            w, b = _cast(weight, bias, compute_dtype)
            for start in range(0, hidden.shape[0], chunk):
                rows = slice(start, start + chunk)
                logits = _logits(hidden[rows], w, b)
                lse[rows] = torch.logsumexp(logits, dim=-1)
                out[rows] = logits.gather(-1, targets[rows].unsqueeze(-1)).squeeze(-1) - lse[rows]
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk, ctx.compute_dtype = chunk, compute_dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        chunk, dtype = ctx.chunk, ctx.compute_dtype
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        grad_bias = (
            torch.zeros_like(bias, dtype=torch.float32) if bias is not None and ctx.needs_input_grad[2] else None
        )
        with torch.autocast(hidden.device.type, enabled=False):
            w, b = _cast(weight, bias, dtype)
            for start in range(0, hidden.shape[0], chunk):
                rows = slice(start, start + chunk)
                logits = _logits(hidden[rows], w, b)
                # d out / d logits = onehot(t) - softmax, scaled by the incoming gradient
                grad_logits = torch.exp(logits - lse[rows].unsqueeze(-1)).mul_(-grad_out[rows].unsqueeze(-1).float())
                grad_logits.scatter_add_(-1, targets[rows].unsqueeze(-1), grad_out[rows].unsqueeze(-1).float())
                grad_logits = grad_logits.to(dtype)
                if grad_hidden is not None:
                    grad_hidden[rows] = (grad_logits @ w).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += (grad_logits.t() @ hidden[rows].to(dtype)).float()
                if grad_bias is not None:
                    grad_bias += grad_logits.float().sum(dim=0)
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None else None
        return grad_hidden, grad_weight, grad_bias, None, None, None


def _cast(weight: torch.Tensor, bias: Optional[torch.Tensor], dtype):
    """The head in the compute dtype, cast once per call (as ``nn.Linear`` under autocast)."""
    return weight.to(dtype), (bias.to(dtype) if bias is not None else None)


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    logits = hidden.to(weight.dtype) @ weight.t()
    if bias is not None:
        logits = logits + bias
    return logits.float()


def linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    targets: torch.Tensor,
    chunk: Optional[int] = None,
) -> torch.Tensor:
    """``[N]`` float32 ``log softmax(hidden @ weight.T + bias)[targets]`` without materialising the logits.

    Args:
        hidden: ``[N, H]`` final hidden states at the scored positions (any dtype).
        weight: ``[V, H]`` LM head (or tied embedding) weight; ``bias``: ``[V]`` or ``None``.
        targets: ``[N]`` token ids.
        chunk: positions per chunk (default: :data:`CHUNK_ELEMENTS` logits per chunk).

    The matrix product runs in the autocast dtype when autocast is on (as ``nn.Linear`` would),
    else in the weight's dtype; log-softmax is float32.
    """
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    chunk = chunk or max(1, CHUNK_ELEMENTS // max(weight.shape[0], 1))
    return _LinearLogprobs.apply(hidden, weight, bias, targets, chunk, dtype)


# ------------------------------------------------------------------------------------------------
# Using it with a Hugging Face causal LM


def output_head(model: nn.Module) -> Optional[nn.Module]:
    """The model's LM head module (through peft and LoRA-agent wrappers), or ``None``."""
    getter = getattr(base_model(model), "get_output_embeddings", None)
    return getter() if callable(getter) else None


def fusable_head(model: nn.Module) -> Optional[nn.Linear]:
    """The LM head when the fused path is exact: a plain ``nn.Linear`` and no logit soft-capping or scale."""
    head = output_head(model)
    config = getattr(model, "config", None)
    text_config_of = getattr(config, "get_text_config", None)
    text_config = text_config_of() if text_config_of is not None else config
    if type(head) is not nn.Linear:  # noqa: E721 - a subclass (e.g. a LoRA layer) computes more than x W^T + b
        return None
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(text_config, name, None) not in (None, 1, 1.0):
            return None
    return head


@contextlib.contextmanager
def captured_head(head: nn.Linear) -> Iterator[List[torch.Tensor]]:
    """Inside the block the head records its input and returns a one-wide placeholder instead of logits.

    Yields the list the inputs are appended to (one per call of the head).
    """
    inputs: List[torch.Tensor] = []

    def record(hidden: torch.Tensor) -> torch.Tensor:
        inputs.append(hidden)
        return hidden.new_zeros(*hidden.shape[:-1], 1)

    head.forward = record  # type: ignore[method-assign, assignment]  # an instance attribute wins over the class's forward
    try:
        yield inputs
    finally:
        del head.forward


def captured_head_if(head: Optional[nn.Linear]) -> ContextManager[List[torch.Tensor]]:
    """:func:`captured_head` of ``head``; without a head nothing is captured (the list stays empty)."""
    return captured_head(head) if head is not None else contextlib.nullcontext([])


__all__ = ["CHUNK_ELEMENTS", "captured_head", "captured_head_if", "fusable_head", "linear_logprobs", "output_head"]
