"""The optimizer every module builds: AdamW on torch's fused kernel wherever torch has one."""

from __future__ import annotations

from typing import Any, Iterable

import torch


def adamw(params: Iterable[Any], **options: Any) -> torch.optim.AdamW:
    """``torch.optim.AdamW(params, **options)`` with ``fused=True``, else ``foreach=True``.

    The fused kernel updates every tensor of a device and dtype in one call, on the CPU too, where
    it is several times faster than the multi-tensor loop (3.2M parameters: about 2.3 ms against
    8-16 ms per step on one thread). Torch refuses it for parameters on a device without the
    kernel; those get the multi-tensor loop.
    """
    params = list(params)
    try:
        return torch.optim.AdamW(params, fused=True, **options)
    except RuntimeError:
        return torch.optim.AdamW(params, foreach=True, **options)
