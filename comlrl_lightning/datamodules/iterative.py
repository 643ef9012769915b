"""IterativePreferenceDataModule: rounds of collect -> round file -> replay -> train."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jsonargparse.typing import PositiveInt
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from comlrl_lightning.checkpoints.assets import CheckpointAssets
from comlrl_lightning.comparators import (
    CentralizedComparator,
    Comparator,
    ComparatorContext,
    CurrentComparator,
)
from comlrl_lightning.contracts import ConfiguredTeam, TeamSide, offers, team_side
from comlrl_lightning.datamodules.loaders import EpochLoaders, TrainLoader, WithoutLength
from comlrl_lightning.datamodules.preference import PreferenceDataModule
from comlrl_lightning.datamodules.round_trainer import check_round_trainer, reloads_every_epoch
from comlrl_lightning.datamodules.task_data import total_epochs
from comlrl_lightning.rounds.collect import collect, comparator_side, module_setup, trained_side
from comlrl_lightning.rounds.pairing import PairsAgainst
from comlrl_lightning.rounds.pairs import ITERATIVE_PAIR_SELECTIONS, IterativePairSelection, PreferencePair
from comlrl_lightning.rounds.records import pair_from_record
from comlrl_lightning.rounds.replay import CurrentReplay, ReplayBuffer, ReplayRule
from comlrl_lightning.rounds.result import CollectionResult
from comlrl_lightning.rounds.snapshots import PolicySnapshots
from comlrl_lightning.runtime.compat import epochs_processed
from comlrl_lightning.runtime.distributed import barrier, gather_objects, rank_and_world
from comlrl_lightning.runtime.folder_lock import FolderLock
from comlrl_lightning.runtime.paths import is_remote
from comlrl_lightning.runtime.rng import RandomStream, derived_seed
from comlrl_lightning.runtime.sharding import is_sharded
from comlrl_lightning.validation import OptionError, at_least


class IterativePreferenceDataModule(PreferenceDataModule):
    """Iterative (online) preference data: ``num_iterations`` rounds of ``num_train_epochs`` epochs.

    At the first epoch of every round the current team samples ``preference_num_candidates``
    completions per agent and item, the ``comparator`` samples its ``num_candidates`` (default the
    same K), and candidate ``j`` of each side is compared with candidate ``j`` of the other (either
    side may win, ties are dropped). The round's pairs go to
    ``<preference_replay_dir>/iteration_NNNN.json`` (atomically, also when empty), and the
    ``replay`` rule picks the round's training pairs. The round is derived from
    ``trainer.current_epoch``; the round's pairs, the replay index, the snapshot index and the
    comparator's state are in each checkpoint, and every random stream (the comparator's too) is
    derived from ``(seed, round, rank)``, so a resumed run continues exactly; raising
    ``num_iterations`` and resuming extends a finished run. Observers read each round through
    :meth:`round_collection` and :meth:`round_pairs` (the
    :class:`~comlrl_lightning.contracts.RoundSource` contract); a callback that offers
    :class:`~comlrl_lightning.contracts.DataModuleCheck` is asked in ``setup``, before the team
    is loaded (:class:`~comlrl_lightning.callbacks.RewardDistributions` checks the reward range).

    Args:
        num_iterations: rounds; the CLI sets ``trainer.max_epochs`` to :attr:`total_epochs`
            (``num_iterations * num_train_epochs``).
        comparator: the other side of every comparison (default :class:`CurrentComparator`); see
            :mod:`comlrl_lightning.comparators` for the classes and their options.
        replay: which rounds a round trains on (default :class:`CurrentReplay`); see
            :mod:`comlrl_lightning.rounds.replay`.
        preference_replay_dir: folder of the round files (default ``<default_root_dir>/preference_replay``).
            Files already there are never imported; only a checkpoint restores replay history.
        policy_checkpoint_dir: keep every round-start policy snapshot here (never pruned). Without
            it, a comparator that needs snapshots (:class:`HistoryComparator`) keeps them in
            ``<default_root_dir>/policy_snapshots`` and deletes those no later round (or a resume
            from the previous round) can use.
        **kwargs: the options of :class:`PreferenceDataModule`; here ``pair_selection`` may also be
            ``comparator_reward`` (the default: highest comparator score first).
    """

    state_kind = "iterative"

    def __init__(
        self,
        num_iterations: PositiveInt = 6,
        comparator: Optional[Comparator] = None,
        replay: Optional[ReplayRule] = None,
        preference_replay_dir: Optional[str] = None,
        policy_checkpoint_dir: Optional[str] = None,
        num_train_epochs: PositiveInt = 1,
        preference_num_candidates: int = 20,
        preference_pairs_per_sample: Optional[PositiveInt] = 4,
        pair_selection: IterativePairSelection = "comparator_reward",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            num_train_epochs=num_train_epochs,
            preference_num_candidates=preference_num_candidates,
            preference_pairs_per_sample=preference_pairs_per_sample,
            # the base's hint is its own command-line choices; comparator_reward passes the base's check,
            # which asks allowed_pair_selections() (this class's)
            pair_selection=pair_selection,  # type: ignore[arg-type]
            **kwargs,
        )
        at_least("num_iterations", num_iterations, 1)
        self.num_iterations = num_iterations
        self.comparator = comparator if comparator is not None else CurrentComparator()
        if self.num_agents is not None:  # the CLI links it from the model: per-agent options fail at parse time
            self.comparator.check_team(self.num_agents)
        self.replay_rule = replay if replay is not None else CurrentReplay()
        self.preference_replay_dir, self.policy_checkpoint_dir = preference_replay_dir, policy_checkpoint_dir
        # one stream shared by the comparator's parts, re-seeded from (seed, round, rank) every round
        self.comparator_stream = RandomStream(self.seed)
        self.built_round: Optional[int] = None
        self.replay: Optional[ReplayBuffer] = None
        self.snapshots: Optional[PolicySnapshots] = None
        self.folder_locks: List[FolderLock] = []

    @classmethod
    def allowed_pair_selections(cls) -> Sequence[IterativePairSelection]:
        return ITERATIVE_PAIR_SELECTIONS

    @property
    def built_replay(self) -> ReplayBuffer:
        """The replay buffer :meth:`setup` makes (in this run's folder)."""
        if self.replay is None:
            raise RuntimeError(f"{type(self).__name__}.setup() makes the replay buffer first.")
        return self.replay

    @property
    def total_epochs(self) -> int:
        return total_epochs(self.num_train_epochs, self.num_iterations)

    # ------------------------------------------------------------------------------------------
    # Lightning hooks

    def setup(self, stage: str) -> None:
        """Everything this Trainer needs, on every ``setup`` of every Trainer (a validation or an
        evaluation before ``fit``, or a later ``fit`` on a new Trainer, must not leave a Trainer
        without it): its callbacks' checks, the run's folders and their locks, and the comparator
        bound to this Trainer's team. The task is built once; the Trainer is left as given."""
        super().setup(stage)
        trainer = self.running_trainer
        # before the comparator binding below loads the team: a callback that cannot work here fails first
        check_round_trainer(trainer, self)
        if self.built_round is None:  # nothing collected yet: the folders are this Trainer's
            self._make_folders(Path(trainer.default_root_dir))
        module = team_side(trainer)
        # before the folders are locked and the binding below loads the team: FSDP2 cannot gather a LoRA
        # team's snapshots (a module that is not built from TeamOptions is taken as full models)
        lora = module.team_options.lora if offers(module, ConfiguredTeam) else None  # type: ignore[type-abstract]
        if self.snapshots is not None and is_sharded(trainer.strategy) and lora is not None:
            raise OptionError(
                "comparator / policy_checkpoint_dir: policy snapshots (HistoryComparator, policy_checkpoint_dir) "
                "of a LoRA team are not supported under ModelParallelStrategy; use another comparator, "
                "full models (no team.lora), or DDP for this team."
            )
        if trainer.is_global_zero and not self.folder_locks:  # one run per folder; other ranks are this run
            folders = [self.built_replay.directory] + ([self.snapshots.directory] if self.snapshots is not None else [])
            self.folder_locks = [FolderLock(folder).acquire() for folder in folders]
        if self.built_task.centralized and isinstance(self.comparator, CentralizedComparator):
            raise OptionError(
                "comparator: a centralized team already writes every role in one completion, and so "
                "does every comparator of its joint prompt; give CentralizedComparator's source directly."
            )
        # what the run saves (hparams.yaml, checkpoints, W&B): no secret of the comparator's in it
        self.comparator.check_saved_options({"model": dict(module.hparams), "data": dict(self.hparams)})
        self.comparator.bind(
            ComparatorContext(
                actors=lambda: module.team,
                generator=module.generator,
                stream=self.comparator_stream,
                agent_devices=[str(module.team.device_of(i)) for i in range(module.num_agents)],
                snapshots=self.snapshots,
            )
        )

    def _make_folders(self, root: Path) -> None:
        """The replay buffer and (when the comparator or ``policy_checkpoint_dir`` needs them) the
        policy snapshots, in their options' folders or under ``root``."""
        replay_dir = Path(self.preference_replay_dir) if self.preference_replay_dir else root / "preference_replay"
        self.replay = ReplayBuffer(replay_dir.absolute(), self.replay_rule)
        self.snapshots = None
        if self.comparator.snapshot_round(0) is not None or self.policy_checkpoint_dir:
            directory = Path(self.policy_checkpoint_dir) if self.policy_checkpoint_dir else root / "policy_snapshots"
            self.snapshots = PolicySnapshots(directory.absolute(), keep_all=self.policy_checkpoint_dir is not None)

    def train_dataloader(self) -> TrainLoader:
        """The epoch's round (collected at the first epoch of a round) as a loader. A Trainer that
        reloads its dataloaders every epoch (the command line's and the seed API's) asks for it at
        every epoch; any other Trainer (a plain ``Trainer()``) gets :class:`EpochLoaders`, which asks
        at every epoch itself, for the epoch the fit loop is about to train (also right after a
        resume, before ``trainer.current_epoch`` has caught up). An epoch without batches (a round
        without pairs) gets its loader :class:`WithoutLength`, so the run goes on to the next round."""
        if reloads_every_epoch(self.trainer):
            loader = self.epoch_loader(self.running_trainer.current_epoch)
            return loader if len(loader) else WithoutLength(loader)
        return EpochLoaders(self.epoch_loader, epoch=lambda: epochs_processed(self.running_trainer))

    def epoch_loader(self, epoch: int) -> DataLoader:
        """Epoch ``epoch``'s batches: its round, built first when the epoch starts one."""
        module = team_side(self.running_trainer)
        self.check_context(module)
        round_index = epoch // self.num_train_epochs
        if round_index != self.built_round:
            self.build_round(round_index, module)
        if not self.pairs:
            rank_zero_warn(f"no replay preference pairs for iteration {round_index + 1}; the round trains nothing.")
        return self.round_loader(module)

    def release_folders(self) -> None:
        for lock in self.folder_locks:
            lock.release()
        self.folder_locks = []

    def teardown(self, stage: str) -> None:
        # The reference also snapshots the policy after the last round when asked to keep snapshots.
        trainer = self.trainer
        if stage != "fit" or trainer is None or not self.policy_checkpoint_dir:
            return
        if trainer.current_epoch >= self.total_epochs:  # finished
            if self.snapshots is None:  # setup makes them whenever policy_checkpoint_dir is given
                raise RuntimeError(f"{type(self).__name__}.setup() makes the policy snapshots first.")
            self.snapshots.save(self.num_iterations, team_side(trainer).team, write=trainer.is_global_zero)

    # ------------------------------------------------------------------------------------------
    # One round

    def build_round(self, round_index: int, module: TeamSide) -> None:
        """Collect the round's pairs, write its round file and draw its training pairs.

        Each process collects its shard of the items (streams derived from ``(seed, round, rank)``);
        the pairs are gathered in item order on every rank; rank 0 alone writes the round file and
        the snapshots; every rank then draws the same replay sample from ``(seed, round)``.
        """
        started = time.perf_counter()
        result = self.collect_round(round_index, module)
        records = [pair.to_record() for pair in result.pairs]
        is_global_zero = self.running_trainer.is_global_zero
        path = self.built_replay.write_round(round_index + 1, records, publish=is_global_zero)
        barrier(self.trainer)  # the round file is in place before any rank reads it
        if not self.replay_rule.uses_history:
            training = result.pairs
        else:
            replay_rng = RandomStream.derive(self.seed, "replay", round_index).python
            training = [
                pair_from_record(r, module.team) for r in self.built_replay.sample(len(result.pairs), replay_rng)
            ]
        needed = self.comparator.snapshot_round(round_index + 1)
        if self.snapshots is not None and needed is not None and is_global_zero:
            # keep what the next round needs, plus one round more so a resume from the previous round works
            self.snapshots.prune(needed - 1)
        self.last_collection, self.pairs, self.built_round = result, training, round_index
        self.log_round(module, round_index, result, training)
        rank_zero_info(
            f"round {round_index + 1}/{self.num_iterations}: {len(result.pairs)} pairs ({path.name}), "
            f"{len(training)} for training, candidate reward mean {result.reward_mean:.4f}, "
            f"{time.perf_counter() - started:.1f}s"
        )

    def collect_round(self, round_index: int, module: TeamSide) -> CollectionResult:
        """The round's collection: the team against the comparator (:func:`~comlrl_lightning.rounds.collect`),
        after the comparator is made ready for the round (its stream re-seeded from ``(seed, round, rank)``,
        the round-start policy snapshot saved); every rank gets the result of all."""
        team = module.team
        self.comparator_stream.reseed(
            derived_seed(self.seed, "comparator", round_index, rank_and_world(self.trainer)[0])
        )
        if self.snapshots is not None:
            self.snapshots.save(round_index, team, write=self.running_trainer.is_global_zero)
            barrier(self.trainer)
        self.comparator.start_round(round_index)
        task, label = self.built_task, f"round {round_index + 1}/{self.num_iterations}"
        pairing = PairsAgainst(self.pair_selection, self.preference_pairs_per_sample)
        setup = module_setup(module, task, pairing, self.seed, round_index, label, self.trainer)
        num_comparator = self.comparator.num_candidates or self.preference_num_candidates
        comparator = comparator_side(self.comparator, module.generation_settings, num_comparator)
        result = collect(
            self.train_items, trained_side(module, self.preference_num_candidates), comparator, task.turns, setup
        )
        self.comparator.end_round()
        return result

    def log_round(
        self, module: TeamSide, round_index: int, result: CollectionResult, training: List[PreferencePair]
    ) -> None:
        """The round's metrics (``iter/*``, ``collect/*`` and the comparator's, summed over the ranks)."""
        comparator_metrics: Dict[str, float] = {}
        for part in gather_objects(self.comparator.metrics(), rank_and_world(self.trainer)[1]):
            for key, value in part.items():
                comparator_metrics[key] = comparator_metrics.get(key, 0.0) + value
        module.log_metrics_now(
            {
                "iter/current_iteration": float(round_index + 1),
                "iter/current_preference_pairs": float(len(result.pairs)),
                "iter/total_preference_pairs": float(self.built_replay.total_pairs),
                "iter/train_preference_pairs": float(len(training)),
                "collect/candidate_reward_mean": result.reward_mean,
                **self.parse_metrics(result),
                **comparator_metrics,
            }
        )

    # ------------------------------------------------------------------------------------------
    # Checkpointed state

    def round_pairs(self) -> Tuple[Optional[int], Optional[List[PreferencePair]]]:
        """The round built last and the pairs it trains on."""
        return self.built_round, self.pairs

    def round_collection(self) -> Tuple[Optional[int], Optional[CollectionResult]]:
        """The round (0-based) this process collected last and its collection (every item, gathered
        from every rank, with each candidate's raw reward per side).

        ``(None, None)`` before the first collection and after a checkpoint restore: a checkpoint
        keeps a round's training pairs but not its candidates, so whoever observes rounds sees each
        one once, in the process that collected it, and never again after a resume inside it.
        """
        return (None, None) if self.last_collection is None else (self.built_round, self.last_collection)

    def checkpoint_assets(self) -> List[Dict[str, Any]]:
        """The indexed round files and the indexed policy snapshots."""
        assets = self.replay.assets() if self.replay is not None else []
        return assets + (self.snapshots.assets() if self.snapshots is not None else [])

    def data_state_dict(self) -> Dict[str, Any]:
        state = super().data_state_dict()
        state.update(
            built_round=self.built_round,
            replay=self.replay.state_dict() if self.replay is not None else None,
            snapshots=self.snapshots.state_dict() if self.snapshots is not None else None,
            comparator=self.comparator.state_dict(),
        )
        return state

    def load_data_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_data_state_dict(state)
        self.built_round = state["built_round"]
        self.last_collection = None  # the restored round was collected by another process
        # files missing here (another machine, another replay folder) come back from the checkpoint's assets
        path = self.trainer.ckpt_path if self.trainer is not None else None
        assets = CheckpointAssets.of_checkpoint(None if path is None or is_remote(str(path)) else path)
        if state.get("replay") is not None:
            self.built_replay.load_state_dict(state["replay"], assets)
        self.comparator.load_state_dict(state.get("comparator") or {})
        if state.get("snapshots") is not None and self.snapshots is not None:
            self.snapshots.load_state_dict(state["snapshots"], assets)
            needed = self.comparator.snapshot_round(self.built_round + 1) if self.built_round is not None else None
            if needed is not None:
                self.snapshots.require(needed)
        if assets.restored:
            rank_zero_info(f"restored {len(assets.restored)} files of the run from {assets.folder}")


__all__ = ["IterativePreferenceDataModule"]
