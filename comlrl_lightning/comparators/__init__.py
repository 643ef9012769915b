"""Comparators for iterative training, and the validation of their options (SPEC 1.3)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Union

from ..options import OptionError, at_least, choice, require
from .local import Comparator, CurrentComparator, CurrentCopyComparator, HistoryComparator, ModelComparator

COMPARATOR_POLICIES = ("current", "current_copy", "model", "history", "api")
_POLICY_ALIASES = {
    "self": "current", "online": "current",
    "copy": "current_copy", "online_copy": "current_copy", "current-offload": "current_copy",
    "current_offload": "current_copy",
    "external": "model", "comparator": "model", "reference": "model", "ref": "model",
    "checkpoint": "history", "previous": "history", "previous_iteration": "history",
    "http": "api", "endpoint": "api",
}
GENERATION_MODES = ("decentralized", "centralized")
_GENERATION_ALIASES = {
    "decentralised": "decentralized", "multi_agent": "decentralized", "multi-agent": "decentralized",
    "centralised": "centralized", "single_agent": "centralized", "single-agent": "centralized",
}

DeviceSpec = Union[str, List[str], None]


def resolve_devices(spec: DeviceSpec, count: int, option: str, default: Sequence[str]) -> List[str]:
    """SPEC 2.1 device forms: ``None``/``auto`` -> ``default``; a string for all; a list of 1 or N."""
    if spec is None or spec == "auto":
        return list(default)
    if isinstance(spec, str):
        return [spec] * count
    devices = list(spec)
    require(len(devices) in (1, count), f"{option} length ({len(devices)}) must be 1 or {count}.")
    return devices * count if len(devices) == 1 else devices


def validate_comparator_options(
    policy: str,
    generation_mode: str,
    num_candidates: Optional[int],
    history_k: Optional[int],
    model_name: Optional[str],
    agents: Optional[List[str]],
    devices: DeviceSpec,
) -> tuple:
    """Check the comparator options in the reference's order; returns ``(policy, history_k)`` normalised."""
    policy = choice("comparator_policy", policy, COMPARATOR_POLICIES, _POLICY_ALIASES)
    generation_mode = choice("comparator_generation_mode", generation_mode, GENERATION_MODES, _GENERATION_ALIASES)
    require(
        generation_mode == "decentralized",
        "comparator_generation_mode='centralized' is not available yet in comlrl-lightning (use decentralized).",
    )
    if num_candidates is not None:
        at_least("comparator_num_candidates", num_candidates, 1, allow_none=True)
    if isinstance(devices, list):
        require(len(devices) >= 1, "comparator_devices must name at least one device.")
    has_model = bool(model_name) or bool(agents)
    if policy == "model":
        require(has_model, "comparator_model_name or comparator_agents is required when comparator_policy='model'.")
    elif has_model:
        raise OptionError("comparator_model_name and comparator_agents are only valid when comparator_policy='model'.")
    if policy == "history":
        history_k = 1 if history_k is None else history_k
        at_least("comparator_history_k", history_k, 1)
    elif history_k is not None:
        raise OptionError("comparator_history_k is only valid when comparator_policy='history'.")
    require(policy != "api", "comparator_policy='api' is not available yet in comlrl-lightning.")
    return policy, history_k


__all__ = [
    "COMPARATOR_POLICIES",
    "Comparator",
    "CurrentComparator",
    "CurrentCopyComparator",
    "HistoryComparator",
    "ModelComparator",
    "resolve_devices",
    "validate_comparator_options",
]
