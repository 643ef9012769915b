"""Device specs of the seed: ``None``/``"auto"``, one device, or a list of 1 or N."""

from __future__ import annotations

from typing import List, Sequence, Union

from comlrl_lightning.validation import require

DeviceSpec = Union[str, List[str], None]


def resolve_devices(
    spec: Union[str, Sequence[str], None], count: int, option: str, default: Sequence[str]
) -> List[str]:
    """``None``/``auto`` -> ``default``; a string for every one of ``count``; a list of 1 (broadcast) or ``count``."""
    if spec is None or spec == "auto":
        return list(default)
    if isinstance(spec, str):
        return [spec] * count
    devices = list(spec)
    require(len(devices) in (1, count), f"{option} length ({len(devices)}) must be 1 or {count}.")
    return devices * count if len(devices) == 1 else devices
