"""How a team covers the task's roles: one model per role, or one model writing every role.

Chosen on the team module (``model.init_args.collaboration``). :class:`Decentralized` (the
default) gives every role its own agent. :class:`Centralized` gives the team ONE model that
writes all N roles in one joint completion: its prompt is built by an adapter from the roles'
prompts, and the completion is split back into role texts for the task reward. The team module
then trains a one-agent team on a :class:`CentralizedTask`, the task as that team sees it, so
collection, pairs, round files (the joint text verbatim), MADPO, MARLHF and every comparator work
unchanged: a comparator samples the joint prompt too (centralized generation from slot 0).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, Sequence, Union

from comlrl_lightning.tasks.centralized_task import (
    CentralizedAdapter,
    CentralizedTask,
    resolve_adapter,
)
from comlrl_lightning.tasks.task import Task


class Collaboration:
    """The base: how the team module's agents map onto the task's roles."""

    centralized: ClassVar[bool] = False

    def team_task(self, task: Task, tokenizers: Optional[Callable[[], Sequence[Any]]] = None) -> Task:
        """The task as this team sees it: each agent's prompt rendered with its tokenizer's chat
        template where one applies (``tokenizers`` returns one per agent; ``None``: as it is)."""
        return task if tokenizers is None else task.for_team(tokenizers)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Decentralized(Collaboration):
    """One agent per role: agent ``i`` answers role ``i``'s prompt (the default)."""


class Centralized(Collaboration):
    """One model writes every role in one joint completion.

    Args:
        adapter: builds the joint prompt from the item and the roles' prompts and splits the
            completion into role texts: a :class:`~comlrl_lightning.tasks.CentralizedAdapter`,
            or an import path of a class, factory or object with ``build_prompt`` and
            ``parse_completion`` (default: the tagged ``<agent_i>...</agent_i>`` adapter).
    """

    centralized = True

    def __init__(self, adapter: Union[CentralizedAdapter, str, None] = None) -> None:
        self.adapter = resolve_adapter(adapter)

    def team_task(self, task: Task, tokenizers: Optional[Callable[[], Sequence[Any]]] = None) -> "CentralizedTask":
        return CentralizedTask(task, self.adapter, tokenizers)

    def __repr__(self) -> str:
        return f"Centralized(adapter={type(self.adapter).__name__})"


__all__ = ["Centralized", "Collaboration", "Decentralized"]
