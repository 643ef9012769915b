"""The written contracts between the parts: a data module and the team module it feeds, and what
the observers (callbacks) may read of either.

Lightning gives every part the trainer, and through it the others (``trainer.lightning_module``,
``trainer.datamodule``, ``trainer.callbacks``). Everything one part may use of another is named
here, with types, and crossed only through the checking functions: :func:`team_side` and
:func:`data_side` between data and team; :func:`round_source`, :func:`data_module_checks` and
:func:`evaluated_module` for observers. Each fails with a message naming what is missing when a
user's own module, data module or callback does not keep the contract. What a part reads only when
another offers it (a round schedule, a log that continues, the team's options) is a Protocol too,
asked with :func:`offers`. The members checked are the Protocols' own (:func:`members`).
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
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeGuard,
    TypeVar,
    runtime_checkable,
)

from comlrl_lightning.errors import ConfigurationTypeError

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

    from comlrl_lightning.generation.base import GenerationSettings, Generator
    from comlrl_lightning.rounds.pairs import PreferencePair
    from comlrl_lightning.rounds.result import CollectionResult
    from comlrl_lightning.tasks.oracle import Oracle
    from comlrl_lightning.tasks.task import Task
    from comlrl_lightning.team.options import TeamOptions
    from comlrl_lightning.team.team import Team


T = TypeVar("T")

TrainsOn = Literal["pairs", "items"]
"""What a team module trains on: preference pairs, or task items (it samples its own rollouts)."""


@runtime_checkable
class TeamSide(Protocol):
    """What a data module may ask of the module it feeds (``TeamModule`` keeps it).

    ``num_roles`` is the number of roles the task must have, and :meth:`team_task` the task as the
    team sees it (prompts rendered with each agent's chat template where one applies; a centralized
    team answers one joint prompt per item). ``trains_on`` says whether
    the module's training batches are preference pairs (collated by :meth:`collate_pairs`) or task items; collection samples with ``generator`` under
    ``generation_settings`` inside :meth:`generation_context` and scores with
    :meth:`collection_oracle`; :meth:`log_metrics_now` reports collection metrics. ``hparams`` are
    the options the run saves (a comparator checks that no secret of its own is among them).
    """

    trains_on: TrainsOn
    generator: "Generator"
    generation_settings: "GenerationSettings"
    num_roles: int
    hparams: Mapping[str, Any]

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


@runtime_checkable
class RoundSource(Protocol):
    """What an observer of iterative rounds may read of the data module (``IterativePreferenceDataModule`` keeps it).

    :meth:`round_collection` is the round (0-based) this process collected last and its collection
    (every item, each candidate's raw reward per side), ``(None, None)`` before the first and after
    a checkpoint restore; :meth:`round_pairs` the round built last and the pairs it trains on;
    ``reward_func`` the reward function (a callable or its import path).
    """

    reward_func: Any

    def round_pairs(self) -> "tuple[Optional[int], Optional[List[PreferencePair]]]": ...

    def round_collection(self) -> "tuple[Optional[int], Optional[CollectionResult]]": ...


@runtime_checkable
class DataModuleCheck(Protocol):
    """A callback that checks the run's data module while it is set up, before the team is loaded
    (the iterative data module asks every callback that offers it; ``RewardDistributions`` does)."""

    def check_data_module(self, datamodule: Any) -> None: ...


@runtime_checkable
class EvaluatedModule(Protocol):
    """What an observer of evaluations may read of the module (``TeamModule`` keeps it): the task
    reward of the evaluation before the first update and after the last (``None`` until one ran)."""

    initial_eval_reward: Optional[float]
    final_eval_reward: Optional[float]


@runtime_checkable
class DataState(Protocol):
    """What the data-state callback carries in and out of checkpoints (``TaskDataModule`` keeps it):
    the state itself, the files it names (kept beside the checkpoint), the folders to release when
    the run ends, and the ``trainer`` whose checkpoint path an error names."""

    trainer: Optional["Trainer"]

    def data_state_dict(self) -> Dict[str, Any]: ...

    def load_data_state_dict(self, state: Dict[str, Any]) -> None: ...

    def checkpoint_assets(self) -> List[Any]: ...

    def release_folders(self) -> None: ...


@runtime_checkable
class RoundSchedule(Protocol):
    """What the resume line reads of a data module that trains in rounds, when it offers it:
    ``num_iterations`` rounds of ``num_train_epochs`` epochs (``IterativePreferenceDataModule``)."""

    num_train_epochs: int
    num_iterations: int


@runtime_checkable
class CollectedOnce(Protocol):
    """What the seed API's checkpoint callback reads of a data module that collects once, when it
    offers it: the collection (``None`` until it ran; ``PreferenceDataModule`` keeps it)."""

    last_collection: Optional["CollectionResult"]


@runtime_checkable
class ConfiguredTeam(Protocol):
    """What the iterative data module reads of a module built from :class:`TeamOptions`, when it
    offers it (``TeamModule`` does): whether the team is LoRA adapters (``team_options.lora``).
    A module without it is taken as a team of full models."""

    team_options: "TeamOptions"


@runtime_checkable
class ContinuableLog(Protocol):
    """What the checkpoint callback reads of a logger whose log a resumed run continues, when it
    offers it (``ResumableCSVLogger`` does): where the log is, how many rows it holds once saved,
    how to drop what an interrupted run logged after its checkpoint, and how to name its run."""

    save_dir: str
    name: Optional[str]
    version: Any
    rows_logged: int

    def save(self) -> None: ...

    def keep_rows_before(self, rows: int, step: int) -> None: ...

    def claim(self, run_id: str) -> None: ...


class ContractError(ConfigurationTypeError):
    """A module or data module that does not keep the contract the other side relies on."""


def members(protocol: type) -> Tuple[str, ...]:
    """The names ``protocol`` declares, those of the Protocols it extends first: of each, its annotated
    attributes, then its properties and methods, in the order written."""
    names: List[str] = []
    for owner in reversed(protocol.__mro__):
        if Protocol in owner.__bases__:
            names += [name for name in [*inspect.get_annotations(owner), *vars(owner)] if not name.startswith("_")]
    return tuple(dict.fromkeys(names))


def offers(obj: Any, protocol: Type[T]) -> TypeGuard[T]:
    """Whether ``obj`` has every member of ``protocol`` (looked up statically: no property runs).

    A type checker takes ``obj`` as a ``protocol`` where this holds; mypy asks for a concrete class
    where ``Type[T]`` is expected, so a call passing a Protocol says ``type: ignore[type-abstract]``.
    """
    return obj is not None and all(_has(obj, name) for name in members(protocol))


def _has(obj: Any, name: str) -> bool:
    # getattr_static: a property such as ``team`` must not run (it would load the models)
    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        return False
    return True


def _takes_one_argument(function: Any) -> bool:
    try:
        inspect.signature(function).bind(None)  # TypeError: not callable, or not with one argument
    except (TypeError, ValueError):
        return False
    return True


def _check(obj: Any, protocol: type, what: str, reader: str = "") -> Any:
    if obj is None:
        raise ContractError(f"No {what} is attached to the trainer.")
    missing = [name for name in members(protocol) if not _has(obj, name)]
    if missing:
        raise ContractError(
            f"{type(obj).__name__} does not keep the {protocol.__name__} contract of comlrl_lightning.contracts "
            f"(missing: {', '.join(missing)}){reader}."
        )
    return obj


def team_side(trainer: "Trainer") -> TeamSide:
    """The (unwrapped) team module of ``trainer``, checked against :class:`TeamSide`."""
    return _check(trainer.lightning_module, TeamSide, "LightningModule")


def data_side(trainer: "Trainer") -> DataSide:
    """The data module of ``trainer``, checked against :class:`DataSide`."""
    return _check(trainer.datamodule, DataSide, "LightningDataModule")  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy


def optional_data_side(trainer: "Trainer") -> Optional[DataSide]:
    """Like :func:`data_side`, but ``None`` for a plain data module that offers none of it.

    A data module of your own that only serves training batches (no task, no evaluation items)
    trains without evaluation; one that keeps part of the contract is an error naming the rest.
    """
    datamodule = trainer.datamodule  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
    if datamodule is None or not any(_has(datamodule, name) for name in members(DataSide)):
        return None
    return _check(datamodule, DataSide, "LightningDataModule")


def round_source(datamodule: Any, reader: str) -> RoundSource:
    """``datamodule``, checked against :class:`RoundSource` for the observer named ``reader``."""
    return _check(datamodule, RoundSource, "LightningDataModule", f"; {reader} reads the rounds it builds")


def data_module_checks(callbacks: Sequence[Any]) -> List[DataModuleCheck]:
    """The callbacks that offer :class:`DataModuleCheck`, in order; one whose ``check_data_module``
    is not a method taking the data module is an error naming it."""
    offering = [callback for callback in callbacks if _has(callback, "check_data_module")]
    for callback in offering:
        if not _takes_one_argument(callback.check_data_module):
            raise ContractError(
                f"{type(callback).__name__}.check_data_module must be a method taking the data module "
                "(the DataModuleCheck contract of comlrl_lightning.contracts)."
            )
    return offering


def evaluated_module(module: Any, reader: str) -> EvaluatedModule:
    """``module``, checked against :class:`EvaluatedModule` for the observer named ``reader``."""
    return _check(module, EvaluatedModule, "LightningModule", f"; {reader} reads its evaluations")


__all__ = [
    "CollectedOnce",
    "ConfiguredTeam",
    "ContinuableLog",
    "ContractError",
    "DataModuleCheck",
    "DataSide",
    "DataState",
    "EvaluatedModule",
    "RoundSchedule",
    "RoundSource",
    "TeamSide",
    "data_module_checks",
    "data_side",
    "evaluated_module",
    "members",
    "offers",
    "optional_data_side",
    "round_source",
    "team_side",
]
