"""Comparators for iterative training: objects chosen in the config, each with its own options.

``data.init_args.comparator`` takes a ``class_path`` and ``init_args``:

* :class:`CurrentComparator` -- the live agents, with their own random stream;
* :class:`CurrentCopyComparator` -- a frozen copy of the agents, optionally on other devices;
* :class:`ModelComparator` -- fixed models (one for all agents, or one per agent);
* :class:`HistoryComparator` -- the policy from ``k`` rounds before;
* :class:`ApiComparator` -- a remote model (generic, OpenAI chat, Anthropic messages, OpenAI responses);
* :class:`CentralizedComparator` -- wraps any of these: one source writes every role in one completion.

Write your own by subclassing :class:`Comparator` (see its module, :mod:`.base`). The centralized
adapters (how a joint prompt is built and a joint completion split) live in
:mod:`comlrl_lightning.tasks.centralized_task`.

Imports: :mod:`comlrl_lightning.rounds` (the snapshots), :mod:`comlrl_lightning.tasks`, :mod:`comlrl_lightning.generation`,
:mod:`comlrl_lightning.team` and the layers below; nothing above.
"""

from __future__ import annotations

from comlrl_lightning.comparators.api import ApiComparator, ApiFormat
from comlrl_lightning.comparators.api_client import ComparatorApiError, HttpOptions
from comlrl_lightning.comparators.api_formats import API_FORMATS
from comlrl_lightning.comparators.base import Comparator, ComparatorContext
from comlrl_lightning.comparators.centralized import CentralizedComparator
from comlrl_lightning.comparators.local import (
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    ModelComparator,
)

__all__ = [
    "API_FORMATS",
    "ApiComparator",
    "ApiFormat",
    "CentralizedComparator",
    "Comparator",
    "ComparatorApiError",
    "ComparatorContext",
    "CurrentComparator",
    "CurrentCopyComparator",
    "HistoryComparator",
    "HttpOptions",
    "ModelComparator",
]
