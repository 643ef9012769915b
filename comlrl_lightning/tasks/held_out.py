"""Evaluation items held out of a user's own training data, and the one mix that is refused.

``eval_dataset: held_out`` evaluates on items of ``train_dataset`` that training never sees: a
seeded draw of ``held_out_size`` items (an int: that many; a float in (0, 1): that fraction, at
least one), the same for every run seed, removed from the training items. The split indexes the
items where they are (a dataset is never copied).

``eval_dataset: embedded`` (the toy task's 32 topics) beside a ``train_dataset`` of one's own is
refused: it is what a config for the embedded task gives when only ``train_dataset`` is changed,
and it would evaluate the team on items of another task.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, List, Sequence, Tuple, Union, overload

from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.errors import ConfigurationError, DataError

HELD_OUT = "held_out"
"""``eval_dataset`` value: evaluate on items held out of ``train_dataset``."""

HeldOutSize = Union[int, float]


class ItemView(Sequence[Dict[str, Any]]):
    """The items of ``items`` at ``indices``, in that order, read where they are (never copied)."""

    def __init__(self, items: Sequence[Dict[str, Any]], indices: Sequence[int]) -> None:
        self.items, self.indices = items, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, index: int) -> Dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> "ItemView": ...

    def __getitem__(self, index):  # the overloads above type it
        if isinstance(index, slice):
            return ItemView(self.items, self.indices[index])
        return self.items[self.indices[index]]

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return (self.items[index] for index in self.indices)

    def __repr__(self) -> str:
        return f"ItemView({len(self)} of {len(self.items)} items)"


def check_held_out_size(size: HeldOutSize) -> None:
    """``held_out_size`` is a count (an int >= 1) or a fraction (a float in (0, 1))."""
    if isinstance(size, bool) or not isinstance(size, (int, float)):
        raise ConfigurationError(f"held_out_size must be a count (int) or a fraction (float in (0, 1)), got {size!r}.")
    if isinstance(size, float) and not 0.0 < size < 1.0:
        raise ConfigurationError(f"held_out_size: a fraction must be in (0, 1), got {size!r}.")
    if isinstance(size, int) and size < 1:
        raise ConfigurationError(f"held_out_size: a count must be >= 1, got {size!r}.")


def held_out_count(total: int, size: HeldOutSize) -> int:
    """How many of ``total`` items ``held_out_size`` holds out: an int is a count, a float in (0, 1)
    a fraction rounded to the nearest item (at least one); at least one item must stay for training."""
    check_held_out_size(size)
    count = max(1, round(total * size)) if isinstance(size, float) else size
    if count >= total:
        raise DataError(
            f"eval_dataset: held_out: holding out {count} of train_dataset's {total} items leaves none to train on; "
            "lower held_out_size or give an eval_dataset of its own."
        )
    return count


def held_out_split(
    items: Sequence[Dict[str, Any]], size: HeldOutSize, seed: int
) -> Tuple[Sequence[Dict[str, Any]], Sequence[Dict[str, Any]]]:
    """``(training items, held-out items)`` of ``items``: ``held_out_count`` items drawn with ``seed``
    (the same draw for the same items, size and seed), the rest in their own order."""
    count = held_out_count(len(items), size)
    held = sorted(random.Random(seed).sample(range(len(items)), count))
    kept = sorted(set(range(len(items))) - set(held))
    return ItemView(items, kept), ItemView(items, held)


def check_evaluation_source(train_dataset: Any, eval_dataset: Any) -> None:
    """Refuse the embedded toy evaluation items beside a ``train_dataset`` of one's own, saying how to evaluate instead."""
    own = not (isinstance(train_dataset, str) and train_dataset == EMBEDDED)
    if own and isinstance(eval_dataset, str) and eval_dataset == EMBEDDED:
        raise ConfigurationError(
            "eval_dataset: 'embedded' is the toy task's 32 topics, but train_dataset is your own; evaluate on your "
            "items instead: eval_dataset=<file or dataset>, eval_dataset=held_out (items of train_dataset kept out "
            "of training: held_out_size, held_out_seed), or eval_dataset=null (no evaluation). On the command line: "
            "--data.init_args.task.eval_dataset held_out"
        )


def split_summary(train: Sequence[Any], held: Sequence[Any], size: HeldOutSize, seed: int) -> str:
    """The line a run prints first about its split: how many items train and how many evaluate."""
    return (
        f"eval_dataset: held_out: {len(held)} of train_dataset's {len(train) + len(held)} items held out for "
        f"evaluation (held_out_size={size!r}, held_out_seed={seed}); {len(train)} train"
    )


__all__: List[str] = [
    "HELD_OUT",
    "ItemView",
    "check_evaluation_source",
    "check_held_out_size",
    "held_out_count",
    "held_out_split",
    "split_summary",
]
