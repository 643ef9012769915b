"""Loaders that resume exactly: an epoch's order from ``(seed, epoch)``, and mid-epoch skipping."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Union

import torch
from torch.utils.data import DataLoader, DistributedSampler

from comlrl_lightning.runtime.rng import epoch_order_seed


class EpochShuffleSampler(DistributedSampler):
    """This rank's share of a permutation of ``range(size)`` that depends only on ``(seed, epoch)``.

    Lightning calls :meth:`set_epoch` at the start of every epoch, so a resumed run shuffles
    exactly as the uninterrupted one did (a plain ``shuffle=True`` loader would not). With several
    processes every rank takes every ``num_replicas``-th index of the same permutation; the
    ``size % num_replicas`` last indices of the epoch are left out rather than padded with
    duplicates (which would bias metrics), and they differ from epoch to epoch. ``skip`` drops the
    first indices of the next iteration only (mid-epoch resume). Being a ``DistributedSampler``,
    Lightning leaves it in place under DDP.
    """

    def __init__(self, size: int, seed: int, num_replicas: int = 1, rank: int = 0, shuffle: bool = True) -> None:
        # any sized sequence works (the sampler takes only its length); torch's hint names only Dataset
        super().__init__(range(size), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=True)  # type: ignore[arg-type]
        self.size, self.skip = size, 0

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(epoch_order_seed(self.seed, self.epoch))
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        order = order[: self.size - self.size % self.num_replicas][self.rank :: self.num_replicas]
        start, self.skip = self.skip, 0
        return iter(order[start:])

    def __len__(self) -> int:
        return self.size // self.num_replicas


class ResumablePairLoader(DataLoader):
    """Batches in an :class:`EpochShuffleSampler` order that resumes mid-epoch exactly.

    Lightning saves ``state_dict()`` of a loader that has one into every checkpoint and hands it
    back on resume; the state is how many batches of the epoch were trained (``batches_done``,
    read from the trainer's progress, not from the loader, which prefetches ahead).
    """

    def __init__(
        self,
        data: Sequence[Any],
        batch_size: int,
        sampler: EpochShuffleSampler,
        collate_fn: Callable,
        batches_done: Callable[[], int],
    ) -> None:
        self.shuffle_sampler = sampler
        super().__init__(data, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn)  # type: ignore[arg-type]  # a sequence is a map-style dataset; torch's hint names only Dataset
        self._batches_done = batches_done

    def state_dict(self) -> Dict[str, int]:
        return {"epoch": self.shuffle_sampler.epoch, "batches_done": int(self._batches_done())}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.shuffle_sampler.skip = state["batches_done"] * int(self.batch_size or 0)  # always given here


class EpochLoaders:
    """The batches of the loader ``current(epoch)`` returns, asked anew at every pass (every epoch).

    A Trainer that does not reload its dataloaders every epoch (Lightning's default) asks for the
    training loader once; a data module whose batches change from epoch to epoch (a new round of
    pairs) hands such a Trainer this object, which asks the data module again whenever an epoch
    starts drawing batches. ``epoch()`` names the epoch about to draw: Lightning draws the first
    batch of a resumed run before it moves ``trainer.current_epoch`` on, so it is read from the fit
    loop's count of finished epochs, as Lightning does for the samplers it sets. It has no length (a
    round's size is known once it is built): Lightning ends each epoch when the batches run out. Its
    checkpointed state is the current loader's (a mid-epoch resume), handed to the loader of the
    first pass after a restore. Like Lightning for the loaders it holds, it sets each loader's
    sampler to the epoch before drawing.
    """

    def __init__(self, current: Callable[[int], DataLoader], epoch: Callable[[], int]) -> None:
        self.current, self.epoch = current, epoch
        self.loader: Optional[DataLoader] = None
        self.restored: Optional[Dict[str, Any]] = None

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch()
        self.loader = self.current(epoch)
        set_epoch = getattr(getattr(self.loader, "sampler", None), "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        if self.restored is not None and hasattr(self.loader, "load_state_dict"):
            self.loader.load_state_dict(self.restored)
        self.restored = None
        return iter(self.loader)

    def state_dict(self) -> Dict[str, Any]:
        state_dict = getattr(self.loader, "state_dict", None)
        return state_dict() if callable(state_dict) else {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.restored = state or None


class WithoutLength:
    """A loader's batches, handed to Lightning without the loader's length.

    Lightning ends ``Trainer.fit`` at an epoch whose training loader has length 0 ("No training
    batches"), so an iterative run whose round built no pair would stop there, with rounds still to
    come. Without a length, the epoch instead ends when the (no) batches run out and the next round
    follows, as in the reference (CoMLRL). The loader's checkpoint state passes through.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def state_dict(self) -> Dict[str, Any]:
        state_dict = getattr(self.loader, "state_dict", None)
        return state_dict() if callable(state_dict) else {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        load_state_dict = getattr(self.loader, "load_state_dict", None)
        if callable(load_state_dict) and state:
            load_state_dict(state)


TrainLoader = Union[DataLoader, EpochLoaders, WithoutLength]
"""What a data module's ``train_dataloader`` returns: a loader, or (rounds whose size is known only once
collected) :class:`EpochLoaders` or :class:`WithoutLength`, which Lightning iterates like one."""
