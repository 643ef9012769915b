"""Paths a user or a file gives the run: local only, and inside the folder they belong to.

Two rules, each in one place:

* **Local only.** A checkpoint, a model folder or a dataset file is read from this machine's disk.
  fsspec (under Lightning, ``datasets`` and ``huggingface_hub``) would also open a URL
  (``https://``, ``s3://``, ``hf://``...) or a chain of them (``simplecache::http://...``), and a
  checkpoint from the network is code from the network. :func:`is_remote` recognises every such
  spelling; :func:`require_local` refuses it naming the option.
* **Confined.** A path read from a checkpoint (Lightning's ``ModelCheckpoint`` state included) is
  data, not an instruction: it is used only if it resolves inside the folder it belongs to, with
  symbolic links and ``..`` resolved (:func:`resolves_inside`); otherwise it is dropped with a
  warning naming it (:func:`confine_checkpoint_callbacks`), so nothing outside the run is deleted.

A folder a user names for the library's own use (the cache root) is created, or refused in one
line naming what named it and the path (:func:`make_folder`).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from comlrl_lightning.errors import ConfigurationError, ConfigurationTypeError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_remote(path: str) -> bool:
    """Whether fsspec would read ``path`` from somewhere other than a plain local file: a URL of any
    scheme (``file://`` included: say it as a plain path), or a chain (``simplecache::...``)."""
    text = str(path).strip()
    return bool(_URL.match(text)) or "::" in text


def require_local(path: Any, option: str, what: str = "a local path") -> str:
    """``path`` as a string, or :class:`~comlrl_lightning.errors.ConfigurationError` naming ``option``
    when it is remote."""
    if not isinstance(path, (str, os.PathLike)):  # str(None) would be a folder named "None"
        raise ConfigurationTypeError(f"{option} must be a path (a string or os.PathLike; got {type(path).__name__}).")
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if is_remote(text):
        raise ConfigurationError(
            f"{option} {text!r} is remote; only {what} is accepted here (URLs and fsspec chains such as "
            "simplecache::... are refused): download it and pass the local file or folder."
        )
    return text


def make_folder(folder: Path, option: str) -> None:
    """Create ``folder`` (and its parents) unless it exists; a file where the folder or one of its
    parents should be, or a folder that cannot be created, is a
    :class:`~comlrl_lightning.errors.ConfigurationError` naming ``option`` and the path."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigurationError(
            f"{option} names {folder}, which is (or lies under) a file, not a folder; name a folder."
        ) from None
    except OSError as error:
        raise ConfigurationError(f"{option} names {folder}, which cannot be created ({error.strerror}).") from None


def resolves_inside(path: Any, folder: Any) -> bool:
    """Whether ``path`` (relative paths taken from ``folder``) is ``folder`` or lies under it once
    symbolic links and ``..`` are resolved on both sides."""
    root = os.path.realpath(os.fspath(folder))
    target = os.path.realpath(os.path.join(root, os.fspath(path)))
    return os.path.commonpath([root, target]) == root


CHECKPOINT_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")
"""The single paths in a ``ModelCheckpoint``'s saved state (``best_k_models`` maps more paths to scores)."""


def confine_model_checkpoint_state(state: Dict[str, Any], dirpath: Any, label: str) -> List[str]:
    """Drop from one ``ModelCheckpoint`` state every path outside ``dirpath``; returns the dropped paths.

    Lightning deletes the previous ``last_model_path`` and the ``best_k_models`` it evicts when it
    saves the next checkpoint, trusting the folder test ``dirpath in path.parents``, which a
    ``<dirpath>/../victim`` passes. A dropped single path becomes ``""`` (Lightning's "none"); a
    dropped ``best_k_models`` entry leaves the mapping (and ``best_model_score`` goes with a dropped
    ``best_model_path``).
    """
    dropped: List[str] = []
    for key in CHECKPOINT_PATH_KEYS:
        value = state.get(key)
        if value and not _confined(value, dirpath):
            dropped.append(str(value))
            state[key] = ""
            if key == "best_model_path":
                state["best_model_score"] = None
    best = state.get("best_k_models")
    if isinstance(best, dict):
        for path in [path for path in best if not _confined(path, dirpath)]:
            dropped.append(str(path))
            del best[path]
    for path in dropped:
        warnings.warn(
            f"{label}: the checkpoint names {path!r}, which is not inside the checkpoint folder {dirpath}; "
            "dropped (a checkpoint never makes a run touch files outside its folder).",
            stacklevel=2,
        )
    return dropped


def confine_checkpoint_callbacks(checkpoint: Dict[str, Any], callbacks: Iterable[Any]) -> List[str]:
    """Confine the saved state of every ``ModelCheckpoint`` in ``callbacks`` to its own ``dirpath``,
    in ``checkpoint`` (the loaded dict, before the callbacks read it); returns the dropped paths."""
    saved = checkpoint.get("callbacks") or {}
    dropped: List[str] = []
    for callback in callbacks:
        dirpath: Optional[str] = getattr(callback, "dirpath", None)
        state = saved.get(getattr(callback, "state_key", None))
        if dirpath is None or not isinstance(state, dict):
            continue
        dropped += confine_model_checkpoint_state(state, dirpath, type(callback).__name__)
    return dropped


def _confined(path: Any, dirpath: Any) -> bool:
    text, folder = str(path), str(dirpath)
    if is_remote(folder):  # a remote store: under its prefix, without climbing out
        return text.startswith(folder.rstrip("/") + "/") and ".." not in text.split("/")
    if is_remote(text):
        return False  # a local folder's checkpoint never names remote files
    # Lightning uses these paths as they are: a relative one from the working directory
    return resolves_inside(os.path.abspath(text), folder) and os.path.realpath(text) != os.path.realpath(folder)


__all__ = [
    "confine_checkpoint_callbacks",
    "confine_model_checkpoint_state",
    "is_remote",
    "make_folder",
    "require_local",
    "resolves_inside",
]
