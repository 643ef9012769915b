"""The few collective operations collection needs (no-ops in a single process)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

import torch.distributed as dist

from comlrl_lightning.errors import RunStateError

T = TypeVar("T")


def rank_and_world(trainer) -> Tuple[int, int]:
    """``(global_rank, world_size)`` of this process (``(0, 1)`` without a trainer)."""
    if trainer is None:
        return 0, 1
    return trainer.global_rank, trainer.world_size


def shard(items: Sequence[T], rank: int, world: int) -> Sequence[T]:
    """This rank's share of ``items``: every ``world``-th item starting at ``rank`` (no padding).

    A list for a list (or a tuple); any other sequence, such as a dataset's item view
    (:class:`~comlrl_lightning.tasks.item_sources.DatasetItems`), is sliced as it is and stays a
    view, so a large dataset is not copied into a list every round.
    """
    share = items[rank::world]
    return list(share) if isinstance(items, (list, tuple)) else share


def gather_objects(value: Any, world: int) -> List[Any]:
    """``[value of rank 0, value of rank 1, ...]`` on every rank (pickled over the process group)."""
    if world == 1 or not dist.is_available() or not dist.is_initialized():
        return [value]
    gathered: List[Any] = [None] * world
    dist.all_gather_object(gathered, value)
    return gathered


def gather_results(compute: Callable[[], T], world: int) -> List[T]:
    """Run ``compute`` on every rank and gather the results; if any rank fails, every rank raises.

    Without this, a rank whose collection fails (an API error, say) would leave the others
    waiting forever in the gather.
    """
    failure: Optional[BaseException] = None
    value: Any = None
    try:
        value = compute()
    except Exception as error:  # re-raised below, after the other ranks have been told
        failure = error
    gathered = gather_objects((value, None if failure is None else f"{type(failure).__name__}: {failure}"), world)
    if failure is not None:
        raise failure
    messages = [(rank, message) for rank, (_, message) in enumerate(gathered) if message]
    if messages:
        rank, message = messages[0]
        raise RunStateError(f"collection failed on process {rank}: {message}")
    return [part for part, _ in gathered]


def unshard(per_rank: Sequence[Sequence[T]], world: int) -> List[T]:
    """Inverse of :func:`shard`: interleave the ranks' lists back into the original order."""
    merged: List[T] = []
    longest = max((len(part) for part in per_rank), default=0)
    for position in range(longest):
        for rank in range(world):
            if position < len(per_rank[rank]):
                merged.append(per_rank[rank][position])
    return merged


def barrier(trainer) -> None:
    if trainer is not None and trainer.world_size > 1:
        trainer.strategy.barrier()


def close_process_group() -> None:
    """Destroy this process's default process group (and the device mesh's groups) at the end of a run.

    Lightning does so at exit only for NCCL. A gloo group left to the interpreter's teardown can
    abort the process ("terminate called without an active exception") once its peer on another
    node has exited, and torchrun then fails the job after its exit barrier.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
