"""Which run and which line of a run a checkpoint belongs to, and whether a folder holds one line.

Every part of a run (a fresh start, or a resume) is a *branch* with an id of its own. A checkpoint's
run record names its run (``run_id``), its branch and the *forks* that led to it: for each earlier
branch, the progress at which the run left it (the checkpoint a resume started from). A checkpoint
``C`` lies on the line of a checkpoint ``H`` when both are of one run and ``C`` is ``H`` or came
before it: ``C`` is of ``H``'s branch with no more progress, or of a branch ``H`` forked from,
with no more progress than the fork.

A resume from an older checkpoint while newer ones exist starts a line of its own beside the old
one; so does another run writing into the same folder. A folder resume takes the checkpoint with
the most progress only when every checkpoint of the folder lies on its line
(:func:`require_one_line`); otherwise it is refused with the list of lines, so the user names the
checkpoint to continue. Checkpoints without a run record (plain Lightning ones) say nothing about
their run and are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from comlrl_lightning.errors import ConfigurationError

Progress = Tuple[int, int, int]
"""Epochs finished, optimizer steps, batches of the unfinished epoch (compared in that order)."""

METADATA_KEY = "comlrl_lightning.checkpoint"
"""The run record's key (the same as :data:`comlrl_lightning.checkpoints.metadata.METADATA_KEY`)."""
_ID = re.compile(r"[0-9a-f]{32}")


class SeveralLinesError(ConfigurationError):
    """A folder resume in a folder holding checkpoints of several runs, or of several lines of one run."""


@dataclass(frozen=True)
class Lineage:
    """A checkpoint's place among runs: ``run_id``, ``branch`` and ``forks`` (``(branch, progress)``
    of each branch the run left to reach this one, oldest first)."""

    run_id: str
    branch: Optional[str]
    forks: Tuple[Tuple[str, Progress], ...] = ()


def lineage_of(checkpoint: Dict[str, Any]) -> Optional[Lineage]:
    """The lineage a loaded checkpoint records (``None``: no run record or no run id; a record of an
    earlier version without branches has ``branch`` ``None``). Malformed fields count as absent."""
    record = checkpoint.get(METADATA_KEY)
    if not isinstance(record, dict) or not _is_id(record.get("run_id")):
        return None
    branch = record.get("branch") if _is_id(record.get("branch")) else None
    forks_record = record.get("forks")
    listed = forks_record if branch is not None and isinstance(forks_record, list) else []
    forks: List[Tuple[str, Progress]] = []
    for fork in listed:
        if not (isinstance(fork, (list, tuple)) and len(fork) == 4 and _is_id(fork[0])):
            return Lineage(record["run_id"], None)
        if not all(type(value) is int for value in fork[1:]):
            return Lineage(record["run_id"], None)
        forks.append((fork[0], (fork[1], fork[2], fork[3])))
    return Lineage(record["run_id"], branch, tuple(forks))


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(_ID.fullmatch(value))


def on_line(candidate: Lineage, progress: Progress, head: Lineage, head_progress: Progress) -> bool:
    """Whether a checkpoint (``candidate`` at ``progress``) lies on the line of ``head`` (at ``head_progress``).

    A record without branches (an earlier version's) is on the line of any checkpoint of its run with
    at least its progress: without branches nothing more can be told.
    """
    if candidate.run_id != head.run_id:
        return False
    if candidate.branch is None or head.branch is None:
        return progress <= head_progress
    if candidate.branch == head.branch:
        return progress <= head_progress
    return any(branch == candidate.branch and progress <= fork for branch, fork in head.forks)


def require_one_line(folder: Any, candidates: Sequence[Tuple[Optional[Lineage], Progress, Path]], head: Path) -> None:
    """Refuse (:class:`SeveralLinesError`, listing each line's newest checkpoint) a folder resume whose
    newest checkpoint ``head`` does not have every other checkpoint of ``candidates`` on its line."""
    known = [(lineage, progress, path) for lineage, progress, path in candidates if lineage is not None]
    chosen = next((item for item in known if item[2] == head), None)
    if chosen is None:
        return
    others = [item for item in known if not on_line(item[0], item[1], chosen[0], chosen[1])]
    if not others:
        return
    tips = [chosen[2]]
    for lineage, progress, path in sorted(others, key=lambda item: item[1], reverse=True):
        if not any(
            on_line(lineage, progress, tip_lineage, tip_progress)
            for tip_lineage, tip_progress, tip in known
            if tip in tips
        ):
            tips.append(path)
    runs = {item[0].run_id for item in known}
    what = f"{len(runs)} runs" if len(runs) > 1 else "several lines of one run (a resume from an older checkpoint)"
    listing = "; ".join(f"{_name(path, folder)} ({_where(candidates, path)})" for path in tips)
    raise SeveralLinesError(
        f"resume_from_checkpoint: {folder} holds checkpoints of {what}, so the newest of the folder is not "
        f"necessarily the one to continue. Their newest checkpoints: {listing}. Pass the checkpoint file or "
        "checkpoint-N folder to resume."
    )


def _name(path: Path, folder: Any) -> str:
    try:
        return str(path.relative_to(folder))
    except ValueError:
        return str(path)


def _where(candidates: Sequence[Tuple[Optional[Lineage], Progress, Path]], path: Path) -> str:
    lineage, progress, _ = next(item for item in candidates if item[2] == path)
    run = f"run {lineage.run_id[:8]}" if lineage is not None else "no run record"
    return f"{run}, epochs {progress[0]}, step {progress[1]}"


__all__ = ["Lineage", "Progress", "SeveralLinesError", "lineage_of", "on_line", "require_one_line"]
