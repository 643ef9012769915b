"""What a checkpoint says about itself, read without running code from it; the newest of a folder.

Every checkpoint is read with ``torch.load(weights_only=True, mmap=True)``: plain types only, and
tensors mapped rather than read, so looking at a folder of checkpoints stays cheap.

*Progress* comes from what Lightning itself records (every checkpoint has it): epochs finished,
optimizer steps, batches of the unfinished epoch, plus the round the data module had built.
*Identity* comes from the record a :class:`~comlrl_lightning.callbacks.CheckpointRecord` writes under
:data:`METADATA_KEY`: the format version, the trainer class, the commit sequence, the run id, the
W&B run and the CSV log of the run (see :func:`read_checkpoint_metadata`).

A folder resume takes the checkpoint with the most progress (:func:`newest_checkpoint`), whatever the
names of the files: a name such as ``last.ckpt`` says nothing about which state is newer.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from comlrl_lightning.checkpoints.io import checked_checkpoint
from comlrl_lightning.checkpoints.lineage import Lineage, lineage_of, require_one_line
from comlrl_lightning.errors import DataError, MissingPathError
from comlrl_lightning.runtime.paths import require_local

METADATA_KEY = "comlrl_lightning.checkpoint"
"""Top-level key of the run record in a checkpoint."""

METADATA_VERSION = 1
CHECKPOINT_FILE = "checkpoint.ckpt"
"""The checkpoint inside a ``checkpoint-{N}`` folder of the seed API."""

DATA_STATE_KEY = "comlrl_lightning.data"
CHECKPOINT_FOLDER = re.compile(r"checkpoint-(\d+)")
"""The name of a ``checkpoint-{N}`` folder (the seed API's commits); group 1 is ``N``."""
_RUN_ID = re.compile(r"[0-9a-f]{32}")
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")

PathLike = Union[str, os.PathLike]


class CheckpointNotFoundError(MissingPathError):
    """A path given for a resume holds no checkpoint."""


class NoRunRecordError(DataError):
    """A checkpoint without this library's run record (written without a ``CheckpointRecord``)."""


@dataclass(frozen=True)
class CheckpointProgress:
    """How far a checkpoint's run got: more epochs, then more steps, then more batches is newer.

    Attributes:
        epochs: epochs finished.
        step: optimizer steps (``global_step``).
        batches: batches done in the unfinished epoch.
        round: the round (0-based) the data module had built, ``None`` without rounds.
    """

    epochs: int
    step: int
    batches: int
    round: Optional[int] = None


def load_checkpoint_dict(path: PathLike) -> Dict[str, Any]:
    """A local checkpoint's dict, loaded without running code from it (``weights_only=True``), tensors
    mapped; :class:`~comlrl_lightning.errors.DataError` for a file that is not a Lightning checkpoint."""
    require_local(path, "ckpt_path", "a local checkpoint file")

    def load() -> Any:
        try:
            return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:  # a file written without the zip layout cannot be mapped
            if "mmap" not in str(error):
                raise
            return torch.load(str(path), map_location="cpu", weights_only=True)

    return checked_checkpoint(path, load)


class CheckpointFieldError(DataError):
    """A checkpoint field of the wrong kind: the file is corrupt, or written by a newer version."""


SECTIONS: Dict[str, type] = {
    "loops": dict,
    "callbacks": dict,
    "state_dict": dict,
    "hyper_parameters": dict,
    "datamodule_hyper_parameters": dict,
    "optimizer_states": list,
    "lr_schedulers": list,
}
"""The sections of a Lightning checkpoint and the kind each must be where present."""


def check_sections(checkpoint: Any, path: PathLike) -> None:
    """``checkpoint`` is a mapping whose sections (:data:`SECTIONS`, the data state) are of their kind;
    a :class:`CheckpointFieldError` naming the file and the field otherwise."""
    if not isinstance(checkpoint, dict):
        raise CheckpointFieldError(f"{path}: not a Lightning checkpoint (it holds a {type(checkpoint).__name__}).")
    for name, kind in SECTIONS.items():
        if name in checkpoint and not isinstance(checkpoint[name], kind):
            raise _field_error(path, name, checkpoint[name], f"a {kind.__name__}")
    data = (checkpoint.get("callbacks") or {}).get(DATA_STATE_KEY)
    if data is not None and not isinstance(data, dict):
        raise _field_error(path, f"callbacks.{DATA_STATE_KEY}", data, "a dict")


def _field_error(path: PathLike, field: str, value: Any, expected: str) -> CheckpointFieldError:
    shown = repr(value) if isinstance(value, (int, float, str, type(None))) else f"a {type(value).__name__}"
    return CheckpointFieldError(
        f"{path}: checkpoint field {field} is {shown[:60]}, not {expected}: the file is corrupt or written by a "
        "newer version of comlrl_lightning."
    )


def checkpoint_progress(checkpoint: Dict[str, Any], path: PathLike = "the checkpoint") -> CheckpointProgress:
    """The progress a checkpoint dict records (Lightning's loop state, else its ``epoch`` and ``global_step``);
    a field that is not a count (an integer >= 0) is a :class:`CheckpointFieldError` naming ``path`` and it."""
    check_sections(checkpoint, path)
    fit_loop = _section(checkpoint.get("loops") or {}, "fit_loop", "loops", path)
    epochs = _processed(fit_loop, "epoch_progress", path)
    batches = _processed(fit_loop, "epoch_loop.batch_progress", path)
    if epochs is None:
        epochs = _count(checkpoint.get("epoch", 0), "epoch", path)
    data = (checkpoint.get("callbacks") or {}).get(DATA_STATE_KEY) or {}
    built = data.get("built_round", 0 if data.get("pairs") is not None else None)
    if built is not None:
        built = _count(built, f"callbacks.{DATA_STATE_KEY}.built_round", path)
    step = _count(checkpoint.get("global_step", 0), "global_step", path)
    return CheckpointProgress(epochs, step, batches or 0, built)


def resumable(checkpoint: Any, path: PathLike) -> Dict[str, Any]:
    """``checkpoint`` (loaded from ``path``) if a run can resume it: its sections of their kinds, its
    progress counts (:func:`checkpoint_progress`) and its weights (``state_dict``); a
    :class:`CheckpointFieldError` naming the file and the field otherwise, before anything is restored."""
    checkpoint_progress(checkpoint, path)
    if not isinstance(checkpoint.get("state_dict"), dict):
        raise _field_error(path, "state_dict", checkpoint.get("state_dict"), "a dict (the weights)")
    return checkpoint


def _section(parent: Dict[str, Any], name: str, where: str, path: PathLike) -> Dict[str, Any]:
    value = parent.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _field_error(path, f"{where}.{name}", value, "a dict")
    return value


def _processed(fit_loop: Dict[str, Any], name: str, path: PathLike) -> Optional[int]:
    current = _section(_section(fit_loop, name, "loops.fit_loop", path), "current", f"loops.fit_loop.{name}", path)
    if "processed" not in current:
        return None
    return _count(current["processed"], f"loops.fit_loop.{name}.current.processed", path)


def _count(value: Any, field: str, path: PathLike) -> int:
    """``value`` as a count: an integer >= 0 (a float only when it is a whole number, as older files write)."""
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if type(value) is not int or value < 0:
        raise _field_error(path, field, value, "a count (an integer >= 0)")
    return value


def checkpoint_files(folder: PathLike) -> List[Path]:
    """The checkpoints of a folder: its ``*.ckpt`` files and the ``checkpoint-{N}/checkpoint.ckpt`` of
    its seed-API folders. Symbolic links and anything that resolves outside the folder are skipped."""
    root = Path(folder)
    real_root = Path(os.path.realpath(root))
    found = list(root.glob("*.ckpt"))
    found += [path / CHECKPOINT_FILE for path in root.iterdir() if CHECKPOINT_FOLDER.fullmatch(path.name)]
    return sorted(
        path
        for path in found
        if not path.is_symlink()
        and not path.parent.is_symlink()
        and path.is_file()
        and Path(os.path.realpath(path)).parent.is_relative_to(real_root)
    )


def newest_checkpoint(folder: PathLike) -> Path:
    """The checkpoint of ``folder`` with the most progress (:class:`CheckpointProgress`); among equals the one
    written last. A file that cannot be read as a checkpoint is skipped with a warning naming it;
    :class:`CheckpointNotFoundError` when the folder holds no readable one;
    :class:`~comlrl_lightning.checkpoints.lineage.SeveralLinesError` when it holds checkpoints
    of several runs, or of several lines of one run (:func:`~comlrl_lightning.checkpoints.lineage.require_one_line`)."""
    candidates: List[Tuple[CheckpointProgress, int, Path]] = []
    lineages: List[Tuple[Optional[Lineage], Tuple[int, int, int], Path]] = []
    skipped: List[str] = []
    for path in checkpoint_files(folder):
        try:
            loaded = load_checkpoint_dict(path)
            progress = checkpoint_progress(loaded, path)
        except DataError as error:
            warnings.warn(f"skipping {path} in the folder resume: {error}", stacklevel=2)
            skipped.append(path.name)
            continue
        candidates.append((progress, path.stat().st_mtime_ns, path))
        lineages.append((lineage_of(loaded), _order(progress), path))
    if not candidates:
        unreadable = f" ({len(skipped)} unreadable: {', '.join(skipped)})" if skipped else ""
        raise CheckpointNotFoundError(
            f"{folder} holds no checkpoint (no *.ckpt file and no checkpoint-N/{CHECKPOINT_FILE}){unreadable}."
        )
    newest = max(candidates, key=lambda item: (_order(item[0]), item[1]))[2]
    require_one_line(folder, lineages, newest)
    return newest


def _order(progress: CheckpointProgress) -> Tuple[int, int, int]:
    return (progress.epochs, progress.step, progress.batches)


def resolve_checkpoint(path: PathLike) -> Path:
    """The checkpoint that ``path`` means: a checkpoint file (or a sharded checkpoint's ``*.ckpt``
    folder); a ``checkpoint-{N}`` folder (its ``checkpoint.ckpt``); or a folder of checkpoint files
    (the newest, :func:`newest_checkpoint`)."""
    candidate = Path(path).expanduser()
    if candidate.is_dir() and candidate.suffix == ".ckpt":  # a sharded (distributed) checkpoint is a folder
        return candidate
    if candidate.is_dir():
        inner = candidate / CHECKPOINT_FILE
        return inner if inner.is_file() and not inner.is_symlink() else newest_checkpoint(candidate)
    if not candidate.is_file():
        raise CheckpointNotFoundError(f"No checkpoint at {candidate}.")
    return candidate


def read_checkpoint_metadata(checkpoint: PathLike) -> Dict[str, Any]:
    """Read a checkpoint's metadata without restoring anything (and without running code from it).

    ``checkpoint`` is a checkpoint file, a ``checkpoint-{N}`` folder, or a folder of checkpoints (the
    newest). The dict has the reference's (CoMLRL's) fields, ``version`` (1), ``trainer_class`` (the
    seed trainer, e.g. ``"MADPOIterTrainer"``, or the module class of a CLI run), ``sequence`` (the
    commits so far), ``run_id`` (32 hex digits, kept across resumes) and ``wandb`` (``None`` or the
    W&B run's ``id`` with ``project`` / ``entity`` where known), and beyond them ``progress``
    (:class:`CheckpointProgress` as a dict), ``logs`` (the run's CSV log: ``save_dir``, ``name``, ``version``,
    ``rows``; or ``None``) and ``path`` (the checkpoint file read). Pass ``wandb["id"]`` as ``id``
    in a ``wandb_config`` to continue that W&B run by hand; ``train(resume_from_checkpoint=...)``
    does so by itself.

    Raises:
        CheckpointNotFoundError: nothing to read at ``checkpoint``.
        NoRunRecordError: the checkpoint has no run record of this library.
        DataError: the record is malformed, or the file is not a Lightning checkpoint.
    """
    path = resolve_checkpoint(checkpoint)
    loaded = load_checkpoint_dict(path)
    metadata = run_record(loaded, path)
    if metadata is None:
        raise NoRunRecordError(
            f"{path} has no comlrl_lightning run record ({METADATA_KEY!r}): it was not written by a run "
            "of this library with a CheckpointRecord callback."
        )
    metadata.update(progress=vars(checkpoint_progress(loaded, path)).copy(), path=str(path))
    return metadata


def run_record(checkpoint: Dict[str, Any], path: PathLike) -> Optional[Dict[str, Any]]:
    """The run record of a loaded checkpoint, checked field by field (``None`` when it has none).

    A checkpoint is data: the W&B id and the CSV log's version end up in folder names, so each must
    be a plain name (a version an integer or plain text, an id letters, digits, ``_`` and ``-``).
    """
    record = checkpoint.get(METADATA_KEY)
    if not isinstance(record, dict):
        return None
    metadata = {key: record.get(key) for key in ("version", "trainer_class", "sequence", "run_id", "wandb", "logs")}
    if type(metadata["version"]) is not int or metadata["version"] != METADATA_VERSION:
        raise DataError(f"{path}: unsupported checkpoint record version {metadata['version']!r}.")
    if not isinstance(metadata["trainer_class"], str) or not metadata["trainer_class"]:
        raise DataError(f"{path}: the checkpoint record names no trainer class.")
    if type(metadata["sequence"]) is not int or metadata["sequence"] < 0:
        raise DataError(f"{path}: invalid checkpoint sequence {metadata['sequence']!r}.")
    run_id = metadata["run_id"]
    if run_id is not None and (not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id)):
        raise DataError(f"{path}: invalid run id {run_id!r}.")
    identity = metadata["wandb"]
    if identity is not None and (
        not isinstance(identity, dict)
        or not isinstance(identity.get("id"), str)
        or not _PLAIN_ID.fullmatch(identity["id"])
        or any(key not in ("id", "project", "entity") or not isinstance(value, str) for key, value in identity.items())
    ):
        raise DataError(f"{path}: invalid W&B run identity {identity!r}.")
    if metadata["logs"] is not None and not _valid_logs(metadata["logs"]):
        raise DataError(f"{path}: invalid log record {metadata['logs']!r}.")
    return metadata


def _valid_logs(logs: Any) -> bool:
    """A CSV log record: ``save_dir`` (text), ``name`` (a plain name or ``None``), ``version`` (an integer
    >= 0 or a plain name), ``rows`` (an integer >= 0)."""
    if not isinstance(logs, dict) or not isinstance(logs.get("save_dir"), str):
        return False
    version, name, rows = logs.get("version"), logs.get("name"), logs.get("rows")
    plain_version = (type(version) is int and version >= 0) or (
        isinstance(version, str) and _PLAIN_NAME.fullmatch(version)
    )
    plain_name = name is None or (isinstance(name, str) and _PLAIN_NAME.fullmatch(name))
    return bool(plain_version and plain_name and type(rows) is int and rows >= 0)


__all__ = [
    "CHECKPOINT_FILE",
    "CheckpointFieldError",
    "CheckpointNotFoundError",
    "METADATA_KEY",
    "NoRunRecordError",
    "CheckpointProgress",
    "check_sections",
    "checkpoint_files",
    "checkpoint_progress",
    "load_checkpoint_dict",
    "newest_checkpoint",
    "read_checkpoint_metadata",
    "resolve_checkpoint",
    "resumable",
    "run_record",
]
