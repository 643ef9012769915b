"""Comparators for iterative training: objects chosen in the config, each with its own options.

``data.init_args.comparator`` takes a ``class_path`` and ``init_args``:

* :class:`CurrentComparator` -- the live agents, with their own random stream;
* :class:`CurrentCopyComparator` -- a frozen copy of the agents, optionally on other devices;
* :class:`ModelComparator` -- fixed models (one for all agents, or one per agent);
* :class:`HistoryComparator` -- the policy from ``k`` rounds before;
* :class:`ApiComparator` -- a remote model (generic, OpenAI chat, Anthropic messages, OpenAI responses);
* :class:`CentralizedComparator` -- wraps any of these: one source writes every role in one completion.

Write your own by subclassing :class:`Comparator` (see its module, :mod:`.base`).
"""

from __future__ import annotations

from .api import ApiComparator, ApiFormat
from .api_client import ComparatorApiError
from .api_formats import API_FORMATS
from .base import Comparator, ComparatorContext
from .centralized import (
    AdapterError,
    CentralizedAdapter,
    CentralizedComparator,
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
    resolve_adapter,
)
from .local import CurrentComparator, CurrentCopyComparator, HistoryComparator, ModelComparator

__all__ = [
    "API_FORMATS",
    "AdapterError",
    "ApiComparator",
    "ApiFormat",
    "CentralizedAdapter",
    "CentralizedComparator",
    "CentralizedComparatorParseError",
    "Comparator",
    "ComparatorApiError",
    "ComparatorContext",
    "CurrentComparator",
    "CurrentCopyComparator",
    "HistoryComparator",
    "ModelComparator",
    "TaggedCentralizedComparatorAdapter",
    "resolve_adapter",
]
