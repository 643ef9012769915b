"""TaskDataModule: task items, prompts, the oracle and evaluation, which every training flow needs."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lightning.pytorch import Callback, LightningDataModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from comlrl_lightning.contracts import TeamSide, team_side
from comlrl_lightning.datamodules.data_state import DataStateCallback
from comlrl_lightning.datamodules.loaders import EpochShuffleSampler, ResumablePairLoader, TrainLoader
from comlrl_lightning.datamodules.multi_turn import check_multi_turn
from comlrl_lightning.errors import DataError
from comlrl_lightning.rounds.pairs import (
    PreferencePair,
)
from comlrl_lightning.rounds.result import CollectionResult
from comlrl_lightning.runtime.compat import epoch_batches_processed
from comlrl_lightning.runtime.distributed import rank_and_world, shard
from comlrl_lightning.runtime.hparams import PlainHyperparameters, summarized
from comlrl_lightning.runtime.sharding import is_sharded
from comlrl_lightning.tasks.held_out import split_summary
from comlrl_lightning.tasks.oracle import CallableSpec
from comlrl_lightning.tasks.task import Task, TaskOptions, check_items, check_prompts_fit
from comlrl_lightning.validation import at_least, require


def total_epochs(num_train_epochs: int, num_iterations: int = 1) -> int:
    """The epochs of a run: ``num_train_epochs`` per round times ``num_iterations`` rounds (one round
    without iterations). The command line sets ``trainer.max_epochs`` from it, as does the seed's API."""
    return num_train_epochs * num_iterations


def dataloader_reload(num_iterations: Optional[int]) -> int:
    """``reload_dataloaders_every_n_epochs`` the command line and the seed API give a run: 1 for a data
    module with rounds (``num_iterations``; Lightning then asks it for the training loader at every
    epoch, where it decides whether a round starts), else Lightning's default 0. Any other value
    trains the same rounds: the iterative data module then follows the epochs itself."""
    return 1 if num_iterations is not None else 0


class TaskDataModule(PlainHyperparameters, LightningDataModule):
    """Task items, prompts, the oracle and evaluation: what every training flow needs.

    On its own it serves shuffled batches of task items (``train_batch_size`` items per step) to
    modules that sample their own rollouts (``MAGRPOModule`` on the task reward); the preference
    data modules (:class:`~comlrl_lightning.datamodules.PreferenceDataModule` and the iterative one)
    add collection.

    Correct under a plain ``Trainer()``; ``trainer.max_epochs`` should be :attr:`total_epochs` (the
    command line links it).

    Args:
        task: what the team learns (:class:`~comlrl_lightning.tasks.TaskOptions`): ``train_dataset``,
            ``eval_dataset`` and their splits, ``formatters``, ``chat_template``, ``reward_func``,
            ``reward_processor``; the default is the embedded toy task.
        num_agents: team size (linked to the model's ``team.num_agents`` by the CLI; ``None``: the team's).
        train_batch_size: pairs (preference modules) or task items (policy-gradient modules) per step.
        num_train_epochs: epochs (the CLI sets ``trainer.max_epochs`` from it).
        eval_num_samples: evaluation items per evaluation (0: no evaluation).
        eval_batch_size: evaluation items per validation step.
        seed: seed of the data stream (sampling, random selection, shuffles).
    """

    def __init__(
        self,
        task: TaskOptions = TaskOptions(),
        num_agents: Optional[int] = None,
        train_batch_size: int = 2,
        num_train_epochs: int = 20,
        eval_num_samples: int = 4,
        eval_batch_size: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__()
        at_least("num_train_epochs", num_train_epochs, 1)
        at_least("train_batch_size", train_batch_size, 1)
        at_least("eval_num_samples", eval_num_samples, 0)
        at_least("eval_batch_size", eval_batch_size, 1)
        if num_agents is not None:
            at_least("num_agents", num_agents, 1)
        self.task_options = task
        self.num_agents = num_agents
        self.train_batch_size, self.num_train_epochs = train_batch_size, num_train_epochs
        self.eval_num_samples, self.eval_batch_size = eval_num_samples, eval_batch_size
        self.seed = seed
        self.task: Optional[Task] = None
        self.train_items: Sequence[Dict[str, Any]] = []
        self.eval_items: Sequence[Dict[str, Any]] = []
        self.state_callback = DataStateCallback(self)
        self._context_checked = False
        self.record_options()

    def record_options(self) -> None:
        """Record the options this data module was made with (every class's, as plain values) in
        its ``hparams``: checkpoints save them (a resume lists what changed), the loggers do not (the
        module's hyperparameters are the run's). A dataset given as a long list is recorded by its
        length and digest."""
        current = inspect.currentframe()
        if current is None:  # a Python without stack frames, where Lightning cannot read arguments either
            raise RuntimeError("record_options reads the options from stack frames, which this Python lacks.")
        frame = current.f_back  # TaskDataModule.__init__: its arguments and its callers'
        self.save_hyperparameters(frame=frame, logger=False)
        if isinstance(self.hparams.get("task"), dict):
            self.hparams["task"] = summarized(self.hparams["task"])

    @property
    def running_trainer(self) -> Trainer:
        """The Trainer running this data module (Lightning attaches it before calling any hook that reads it)."""
        if self.trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer: run it with one (fit, validate).")
        return self.trainer

    @property
    def built_task(self) -> Task:
        """The task :meth:`setup` builds."""
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__}.setup() builds the task first.")
        return self.task

    # ------------------------------------------------------------------------------------------
    # Lightning hooks

    def trainer_callbacks(self) -> List[Callback]:
        """The callbacks this data module needs on its Trainer: :class:`DataStateCallback` (its state in
        and out of checkpoints). :meth:`TeamModule.configure_callbacks` hands them to Lightning, which
        adds them to the Trainer's before restoring a checkpoint; the data module never changes the
        Trainer itself."""
        return [self.state_callback]

    def setup(self, stage: str) -> None:
        if self.task is not None:
            return
        num_agents = self.num_agents
        module = team_side(self.trainer) if self.trainer is not None else None
        if module is not None:
            require(
                num_agents is None or num_agents == module.num_roles,
                f"data num_agents ({num_agents}) must match the team's {module.num_roles} roles.",
            )
            num_agents = module.num_roles
        task = self.task_options.build(num_agents or 2)
        # the task as the team sees it: prompts rendered with each agent's chat template where one
        # applies; a centralized team answers one joint prompt per item
        self.task = module.team_task(task) if module is not None else task
        self.train_items, self.eval_items = self.task_options.items()
        require(bool(self.train_items), "train_dataset: training requires at least one task item.")
        if self.task_options.held_out:  # which items evaluate is said before anything runs
            options = self.task_options
            rank_zero_info(
                split_summary(self.train_items, self.eval_items, options.held_out_size, options.held_out_seed)
            )
        check_items(self.task, self.train_items, "train")
        evaluated = self.eval_items if stage in ("test", "predict") else self.eval_items[: self.eval_num_samples]
        check_items(self.task, evaluated, "eval")
        if module is not None:
            sharded = is_sharded(self.running_trainer.strategy)
            check_multi_turn(self.task, module, getattr(self, "comparator", None), sharded)

    def train_dataloader(self) -> TrainLoader:
        self.check_context(team_side(self.running_trainer))
        return self.item_loader(self.train_items)

    def check_context(self, module: TeamSide) -> None:
        """Once, before any sampling: every prompt plus ``max_new_tokens`` fits each agent's context
        (:func:`~comlrl_lightning.tasks.task.check_prompts_fit`)."""
        if not self._context_checked:
            items = {"train": self.train_items, "eval": self.evaluation_items()}
            check_prompts_fit(self.built_task, module.team, module.generation_settings.max_new_tokens, items)
            self._context_checked = True

    def val_dataloader(self) -> Union[DataLoader, List]:
        return self.evaluation_loader(self.evaluation_items())

    def test_dataloader(self) -> Union[DataLoader, List]:
        """``test``: every evaluation item (the held-out split), batched as an evaluation."""
        return self.evaluation_loader(self.test_items())

    def predict_dataloader(self) -> Union[DataLoader, List]:
        """``predict``: the items ``test`` evaluates, batched as an evaluation (the same seeds per batch)."""
        return self.evaluation_loader(self.test_items())

    def test_items(self) -> List[Dict[str, Any]]:
        """What ``test`` and ``predict`` use: every evaluation item (``eval_num_samples`` is fit's and ``validate``'s)."""
        require(bool(self.eval_items), "eval_dataset: test and predict use the evaluation items; the task has none.")
        return list(self.eval_items)

    def evaluation_loader(self, items: List[Dict[str, Any]]) -> Union[DataLoader, List]:
        """``items`` in batches of ``eval_batch_size``, this rank's share (none: no batches)."""
        if not items:
            return []
        rank, world = rank_and_world(self.trainer)
        # every rank evaluates its own items; no duplicates pad the last batch (sharded agents: the
        # ranks' shares are padded with None to one length, so every rank samples as often)
        mine: List[Optional[Dict[str, Any]]] = list(shard(items, rank, world))
        if team_side(self.running_trainer).team.synced:
            mine += [None] * (-(-len(items) // world) - len(mine))
        return DataLoader(mine, batch_size=self.eval_batch_size, shuffle=False, collate_fn=list)  # type: ignore[arg-type]  # a list is a map-style dataset; torch's hint names only Dataset

    def _loader(self, data: Sequence[Any], collate_fn: Callable) -> DataLoader:
        batches_done = lambda: epoch_batches_processed(self.running_trainer)
        rank, world = rank_and_world(self.trainer)
        sampler = EpochShuffleSampler(len(data), self.seed, num_replicas=world, rank=rank)
        return ResumablePairLoader(data, self.train_batch_size, sampler, collate_fn, batches_done)

    def item_loader(self, items: Sequence[Dict[str, Any]]) -> DataLoader:
        """Shuffled, resumable batches of task items (lists of dicts)."""
        return self._loader(items, list)

    def pair_loader(self, pairs: List[PreferencePair], module: TeamSide) -> DataLoader:
        """Shuffled, resumable batches of pairs collated by ``module.collate_pairs``."""
        return self._loader(pairs, module.collate_pairs)

    def parse_metrics(self, result: CollectionResult) -> Dict[str, float]:
        """``collect/unparsed_completions`` for a centralized team (nothing otherwise)."""
        return {"collect/unparsed_completions": float(result.unparsed)} if self.built_task.centralized else {}

    @property
    def total_epochs(self) -> int:
        """The epochs of the whole run (:func:`total_epochs`)."""
        return total_epochs(self.num_train_epochs)

    @property
    def reward_func(self) -> CallableSpec:
        """The task's reward function (the one given, or the embedded task's)."""
        return self.task_options.reward_spec

    # ------------------------------------------------------------------------------------------
    # What the team module may ask (comlrl_lightning.contracts.DataSide)

    def evaluation_items(self) -> List[Dict[str, Any]]:
        """The items every evaluation uses (the first ``eval_num_samples`` evaluation items, as a list)."""
        return list(self.eval_items[: self.eval_num_samples])

    def round_pairs(self) -> Tuple[Optional[int], Optional[List[PreferencePair]]]:
        """The round built last and its training pairs: none here (this data module serves items only)."""
        return None, None

    # ------------------------------------------------------------------------------------------
    # Checkpointed state (carried by DataStateCallback)

    def release_folders(self) -> None:
        """Release the locks on this run's folders (at the end of a run, also a failed one)."""

    def checkpoint_assets(self) -> List[Dict[str, Any]]:
        """The files the data state names (round files, snapshots), for a checkpoint to carry beside it."""
        return []

    state_kind = "task"
    """What kind of data state a checkpoint holds; another kind cannot resume this data module."""

    def data_state_dict(self) -> Dict[str, Any]:
        """Everything a resumed run needs to continue exactly (every random stream is derived
        from ``(seed, round, rank)``, so here: the format and the kind of data module)."""
        return {"version": 1, "kind": self.state_kind}

    def load_data_state_dict(self, state: Dict[str, Any]) -> None:
        kind = state.get("kind")
        if kind != self.state_kind:
            raise DataError(
                f"The checkpoint holds the data state of a {kind or 'different'} data module; "
                f"{type(self).__name__} ({self.state_kind}) cannot resume it. Resume with the kind of data module "
                "that wrote the checkpoint, or start a new run."
            )


__all__ = ["TaskDataModule", "dataloader_reload", "total_epochs"]
