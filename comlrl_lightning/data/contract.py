"""The written contract between a data module and the team module it feeds.

Lightning gives both sides the trainer, and through it each other (``trainer.lightning_module``,
``trainer.datamodule``). Everything either side may use of the other is named here, with types;
:func:`team_side` and :func:`data_side` are the only way across, and they fail with a message
naming what is missing when a user's own module or data module does not keep the contract.
"""

from __future__ import annotations

import inspect
from typing import (
    TYPE_CHECKING,
    Any,
    ContextManager,
    Dict,
    List,
    Literal,
    Optional,
    Protocol,
    Sequence,
    runtime_checkable,
)

from comlrl_lightning.errors import ConfigurationTypeError

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

    from comlrl_lightning.data.oracle import Oracle
    from comlrl_lightning.data.pairs import PreferencePair
    from comlrl_lightning.data.task import Task
    from comlrl_lightning.generation.base import GenerationSettings, Generator
    from comlrl_lightning.team.team import Team


@runtime_checkable
class TeamSide(Protocol):
    """What a data module may ask of the module it feeds (``TeamModule`` keeps it).

    ``num_roles`` is the number of roles the task must have, and :meth:`team_task` the task as the
    team sees it (prompts rendered with each agent's chat template where one applies; a centralized
    team answers one joint prompt per item). ``trains_on`` says whether
    the module's training batches are preference pairs (collated by :meth:`collate_pairs`) or task items; collection samples with ``generator`` under
    ``generation_settings`` inside :meth:`generation_context` and scores with
    :meth:`collection_oracle`; :meth:`log_metrics_now` reports collection metrics.
    """

    trains_on: Literal["pairs", "items"]
    generator: "Generator"
    generation_settings: "GenerationSettings"
    num_roles: int

    @property
    def team(self) -> "Team": ...

    @property
    def num_agents(self) -> int: ...

    def team_task(self, task: "Task") -> "Task": ...

    def generation_context(self) -> ContextManager[None]: ...

    def collection_oracle(self, task: "Task") -> "Oracle": ...

    def collate_pairs(self, pairs: List["PreferencePair"]) -> Any: ...

    def log_metrics_now(self, metrics: Dict[str, float]) -> None: ...


@runtime_checkable
class DataSide(Protocol):
    """What a team module may ask of its data module (``TaskDataModule`` keeps it).

    ``task`` holds the prompts and the oracle (set in ``setup``); :meth:`evaluation_items` are the
    items every evaluation uses, served ``eval_batch_size`` at a time; :meth:`round_pairs` is the
    round the data module built last (``None`` before the first) and the pairs it trains on.
    """

    eval_batch_size: int

    @property
    def task(self) -> "Task": ...

    def evaluation_items(self) -> Sequence[Dict[str, Any]]: ...

    def round_pairs(self) -> "tuple[Optional[int], Optional[List[PreferencePair]]]": ...


class ContractError(ConfigurationTypeError):
    """A module or data module that does not keep the contract the other side relies on."""


_MEMBERS = {
    "TeamSide": (
        "trains_on",
        "generator",
        "generation_settings",
        "num_roles",
        "team",
        "num_agents",
        "team_task",
        "generation_context",
        "collection_oracle",
        "collate_pairs",
        "log_metrics_now",
    ),
    "DataSide": ("eval_batch_size", "task", "evaluation_items", "round_pairs"),
}


def _has(obj: Any, name: str) -> bool:
    # getattr_static: a property such as ``team`` must not run (it would load the models)
    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        return False
    return True


def _check(obj: Any, protocol: type, what: str) -> Any:
    if obj is None:
        raise ContractError(f"No {what} is attached to the trainer.")
    missing = [name for name in _MEMBERS[protocol.__name__] if not _has(obj, name)]
    if missing:
        raise ContractError(
            f"{type(obj).__name__} does not keep the {protocol.__name__} contract of comlrl_lightning.data.contract "
            f"(missing: {', '.join(missing)})."
        )
    return obj


def team_side(trainer: "Trainer") -> TeamSide:
    """The (unwrapped) team module of ``trainer``, checked against :class:`TeamSide`."""
    return _check(trainer.lightning_module, TeamSide, "LightningModule")


def data_side(trainer: "Trainer") -> DataSide:
    """The data module of ``trainer``, checked against :class:`DataSide`."""
    return _check(trainer.datamodule, DataSide, "LightningDataModule")


def optional_data_side(trainer: "Trainer") -> Optional[DataSide]:
    """Like :func:`data_side`, but ``None`` for a plain data module that offers none of it.

    A data module of your own that only serves training batches (no task, no evaluation items)
    trains without evaluation; one that keeps part of the contract is an error naming the rest.
    """
    datamodule = trainer.datamodule
    if datamodule is None or not any(_has(datamodule, name) for name in _MEMBERS["DataSide"]):
        return None
    return _check(datamodule, DataSide, "LightningDataModule")


__all__ = ["ContractError", "DataSide", "TeamSide", "data_side", "optional_data_side", "team_side"]
