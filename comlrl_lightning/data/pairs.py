"""The names of :mod:`comlrl_lightning.rounds.pairs` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.rounds.pairs import (
    ITERATIVE_PAIR_SELECTIONS,
    PAIR_SELECTIONS,
    IterativePairSelection,
    PairSelection,
    PreferencePair,
    Selection,
    check_pair_selection,
    is_pair_selection,
    ordered_pairs,
    select_pairs,
)

__all__ = [
    "ITERATIVE_PAIR_SELECTIONS",
    "IterativePairSelection",
    "PAIR_SELECTIONS",
    "PairSelection",
    "PreferencePair",
    "Selection",
    "check_pair_selection",
    "is_pair_selection",
    "ordered_pairs",
    "select_pairs",
]
