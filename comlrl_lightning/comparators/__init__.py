"""Comparators for iterative training, and the validation of their options (SPEC 1.3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from ..devices import DeviceSpec, resolve_devices
from ..options import OptionError, at_least, choice, require
from .api import ApiComparator, ApiOptions, validate_api_options
from .api_client import ComparatorApiError
from .api_formats import API_FORMATS
from .centralized import (
    CentralizedComparator,
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
    build_centralized_comparator,
    resolve_adapter,
)
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



@dataclass
class ComparatorOptions:
    """The comparator options after validation and normalisation."""

    policy: str
    generation_mode: str
    history_k: Optional[int]
    api: ApiOptions
    centralized_agent_index: int = 0
    adapter: Any = None
    """The resolved centralized adapter (``None`` when decentralized)."""


def validate_comparator_options(
    policy: str,
    generation_mode: str,
    num_candidates: Optional[int],
    history_k: Optional[int],
    model_name: Optional[str],
    agents: Optional[List[str]],
    devices: DeviceSpec,
    num_agents: Optional[int] = None,
    centralized_agent_index: int = 0,
    centralized_adapter: Any = None,
    **api: Any,
) -> ComparatorOptions:
    """Check the comparator options in the reference's order (SPEC 1.3), at parse time.

    ``api`` holds the ``comparator_api_*`` options without their prefix (``url``, ``format``, ...).
    The centralized index is checked against ``num_agents`` when it is known here, else when the
    comparator is built. Beyond the reference: an unknown ``comparator_api_format`` is an error, and
    the centralized adapter is imported and checked now.
    """
    policy = choice("comparator_policy", policy, COMPARATOR_POLICIES, _POLICY_ALIASES)
    generation_mode = choice("comparator_generation_mode", generation_mode, GENERATION_MODES, _GENERATION_ALIASES)
    if generation_mode == "centralized":
        at_least("comparator_centralized_agent_index", centralized_agent_index, 0)
        require(
            num_agents is None or centralized_agent_index < num_agents,
            "comparator_centralized_agent_index must be smaller than num_agents.",
        )
        require(
            policy != "model" or not agents or num_agents is None or len(agents) in (1, num_agents),
            "comparator_agents length must be 1 or num_agents when comparator_generation_mode='centralized'.",
        )
    else:
        require(
            centralized_adapter is None,
            "comparator_centralized_adapter is only valid when comparator_generation_mode='centralized'.",
        )
    if num_candidates is not None:
        at_least("comparator_num_candidates", num_candidates, 1, allow_none=True)
    api_options = validate_api_options(**api)
    if isinstance(devices, list):
        require(len(devices) >= 1, "comparator_devices must name at least one device.")
    has_model = bool(model_name) or bool(agents)
    if policy == "model":
        require(has_model, "comparator_model_name or comparator_agents is required when comparator_policy='model'.")
    elif has_model and policy != "api":  # the reference accepts (and ignores) them with api
        raise OptionError("comparator_model_name and comparator_agents are only valid when comparator_policy='model'.")
    if policy == "history":
        history_k = 1 if history_k is None else history_k
        at_least("comparator_history_k", history_k, 1)
    elif history_k is not None:
        raise OptionError("comparator_history_k is only valid when comparator_policy='history'.")
    require(policy != "api" or bool(api_options.url), "comparator_api_url is required when comparator_policy='api'.")
    adapter = resolve_adapter(centralized_adapter) if generation_mode == "centralized" else None
    return ComparatorOptions(policy, generation_mode, history_k, api_options, centralized_agent_index, adapter)


__all__ = [
    "API_FORMATS",
    "COMPARATOR_POLICIES",
    "ApiComparator",
    "ApiOptions",
    "CentralizedComparator",
    "CentralizedComparatorParseError",
    "Comparator",
    "ComparatorApiError",
    "ComparatorOptions",
    "CurrentComparator",
    "CurrentCopyComparator",
    "HistoryComparator",
    "ModelComparator",
    "TaggedCentralizedComparatorAdapter",
    "build_centralized_comparator",
    "resolve_devices",
    "validate_comparator_options",
]
