"""PreferenceDataModule: collects preference pairs with the team being trained and serves them."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from comlrl_lightning.contracts import TeamSide, team_side
from comlrl_lightning.datamodules.loaders import TrainLoader
from comlrl_lightning.datamodules.task_data import TaskDataModule
from comlrl_lightning.rounds.collect import collect, module_setup, trained_side
from comlrl_lightning.rounds.pairing import PairsWithin
from comlrl_lightning.rounds.pairs import (
    PAIR_SELECTIONS,
    IterativePairSelection,
    PairSelection,
    PreferencePair,
    check_pair_selection,
    is_pair_selection,
)
from comlrl_lightning.rounds.result import CollectionResult
from comlrl_lightning.rounds.trajectory_pairs import pair_from_state
from comlrl_lightning.validation import OptionError, at_least


class PreferenceDataModule(TaskDataModule):
    """Collects preference pairs once with the current team, then serves them.

    The base (non-iterative) MADPO/MARLHF data flow of the seed: in the first
    ``train_dataloader()`` call every agent samples ``preference_num_candidates`` completions per
    task item, the oracle scores the joint responses (same candidate index across agents), and every
    non-tied pair is ranked by ``pair_selection``. A module that trains on pairs (MADPO) then gets
    them for the trainer's ``max_epochs`` (= ``num_train_epochs`` from the CLI) in batches of
    ``train_batch_size``, reshuffled every epoch; a module that trains on task items (MARLHF, which
    first fits its reward model on the pairs) gets the items. The pairs and all random state are
    part of the checkpoint.

    Args:
        preference_num_candidates: K, candidates per agent per item (>= 2).
        preference_pairs_per_sample: pairs kept per item (``None``: all).
        pair_selection: ``reward_gap`` (largest gap first), ``random`` (seeded), or ``all``.
        **kwargs: the options of :class:`TaskDataModule`.
    """

    state_kind = "preference"

    def __init__(
        self,
        preference_num_candidates: int = 80,
        preference_pairs_per_sample: Optional[int] = 16,
        pair_selection: PairSelection = "reward_gap",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        at_least("preference_num_candidates", preference_num_candidates, 2)
        if preference_pairs_per_sample is not None:
            at_least("preference_pairs_per_sample", preference_pairs_per_sample, 1, allow_none=True)
        self.pair_selection = check_pair_selection(
            pair_selection, preference_pairs_per_sample, self.allowed_pair_selections()
        )
        self.preference_num_candidates = preference_num_candidates
        self.preference_pairs_per_sample = preference_pairs_per_sample
        self.pairs: Optional[List[PreferencePair]] = None
        self.last_collection: Optional[CollectionResult] = None

    @classmethod
    def allowed_pair_selections(cls) -> Sequence[IterativePairSelection]:
        """The ``pair_selection`` values this data module takes (the iterative one's also ``comparator_reward``)."""
        return PAIR_SELECTIONS

    def train_dataloader(self) -> TrainLoader:
        module = team_side(self.running_trainer)
        self.check_context(module)
        if self.pairs is None:
            self.last_collection = self.collect(module)
            self.pairs = self.last_collection.pairs
            module.log_metrics_now(
                {
                    "collect/preference_pairs": float(len(self.pairs)),
                    "collect/candidate_reward_mean": self.last_collection.reward_mean,
                    **self.parse_metrics(self.last_collection),
                }
            )
        if not self.pairs:
            rank_zero_warn("no non-tied preference pairs were generated; training ends without an update.")
            self.running_trainer.should_stop = True
        return self.round_loader(module)

    def round_pairs(self) -> Tuple[Optional[int], Optional[List[PreferencePair]]]:
        """Round 0 and its pairs once collected."""
        return (None, None) if self.pairs is None else (0, self.pairs)

    def round_loader(self, module: TeamSide) -> DataLoader:
        """Pairs for a module that trains on pairs; task items (none without pairs) for one that trains on items."""
        if module.trains_on == "items":
            return self.item_loader(self.train_items if self.pairs else [])
        return self.pair_loader(self.pairs or [], module)

    # ------------------------------------------------------------------------------------------
    # Collection

    def collect(self, module: TeamSide) -> CollectionResult:
        """Sample, score and pair candidates for every training item with ``module.team``: one round of
        the collector (:func:`~comlrl_lightning.rounds.collect`), pairs within each item's candidates
        (each process collects its shard; every rank gets all pairs in item order)."""
        started = time.perf_counter()
        selection = self.pair_selection
        if not is_pair_selection(selection):  # comparator_reward: the iterative data module's own collection
            raise OptionError(
                f"pair_selection {selection!r} needs a comparator; choose one of: {', '.join(PAIR_SELECTIONS)}."
            )
        task = self.built_task
        pairing = PairsWithin(selection, self.preference_pairs_per_sample)
        setup = module_setup(module, task, pairing, self.seed, 0, "collection", self.trainer)
        result = collect(
            self.train_items, trained_side(module, self.preference_num_candidates), None, task.turns, setup
        )
        rank_zero_info(
            f"collected {len(result.pairs)} preference pairs from {len(self.train_items)} items "
            f"(candidate reward mean {result.reward_mean:.4f}) in {time.perf_counter() - started:.1f}s"
        )
        return result

    # ------------------------------------------------------------------------------------------
    # Checkpointed state

    def data_state_dict(self) -> Dict[str, Any]:
        state = super().data_state_dict()
        state["pairs"] = None if self.pairs is None else [dataclasses.asdict(pair) for pair in self.pairs]
        return state

    def load_data_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_data_state_dict(state)
        pairs = state.get("pairs")
        self.pairs = None if pairs is None else [pair_from_state(pair) for pair in pairs]
