"""Task items from Hugging Face datasets, as people use them, kept as datasets (never copied into lists).

A data module's ``train_dataset`` / ``eval_dataset`` may be a hub name or a local folder (a string),
an :class:`HFDataset` (a configuration ``name`` such as gsm8k's ``main``, ``data_files``, a
``split``), an :class:`ItemSet` named by its import path (a built-in task's problems), a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, or (from
Python) a ``datasets.Dataset`` / ``DatasetDict``. The items are served through
:class:`DatasetItems`, a read-only sequence over the dataset's memory-mapped table: sharding,
loaders, collection, comparators and evaluation index it, so a large dataset is not copied item
by item into a Python list for every round.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union, overload

from comlrl_lightning.errors import ConfigurationError, ConfigurationTypeError, DataError
from comlrl_lightning.runtime.files import read_bounded
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.tasks.file_bounds import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_RATIO,
    FileBounds,
    check_data_files,
    local_files_under,
)

METADATA_LIMIT = 64 << 20
"""The largest ``state.json`` / ``dataset_dict.json`` of a ``save_to_disk`` folder read (64 MiB)."""

DataFiles = Union[str, List[str], Dict[str, Union[str, List[str]]]]

SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")
"""What ``save_to_disk`` writes beside the Arrow files (a ``Dataset``, a ``DatasetDict``). A hub
repository or a plain data folder has neither (``dataset_info.json`` alone also appears elsewhere)."""


@dataclass
class HFDataset:
    """A Hugging Face dataset, with the arguments ``datasets.load_dataset`` takes.

    In a config: ``train_dataset: {path: gsm8k, name: main}``; in Python:
    ``HFDataset("gsm8k", name="main")``.

    Args:
        path: a hub name (``gsm8k``), a local dataset folder, a folder written by ``save_to_disk``,
            or a packaged builder read from ``data_files`` (``json``, ``csv``, ``parquet``, ``text``).
        name: the dataset's configuration (gsm8k: ``main`` or ``socratic``).
        split: the split to read (``None``: the data module's ``dataset_split`` / ``eval_split``; with
            ``data_files`` given as one path or a list, ``train``, the only split ``datasets`` makes of them).
        data_files: the files to read: one path, a list, or a mapping from split name to path(s).
        max_bytes: the most the local data files (``data_files``, or a local folder's files) may
            hold together once decompressed; checked before ``datasets`` reads them (default 4 GiB).
        max_ratio: the most a compressed data file may expand, as a multiple of its own size, once
            past 64 MiB (default 100: a compression bomb, not data).
    """

    path: str
    name: Optional[str] = None
    split: Optional[str] = None
    data_files: Optional[DataFiles] = None
    max_bytes: int = DEFAULT_MAX_BYTES
    max_ratio: float = DEFAULT_MAX_RATIO

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes <= 0:
            raise ConfigurationError(f"HFDataset max_bytes must be a positive number of bytes, not {self.max_bytes!r}.")
        if isinstance(self.max_ratio, bool) or not isinstance(self.max_ratio, (int, float)) or not self.max_ratio > 0:
            raise ConfigurationError(f"HFDataset max_ratio must be a positive number, not {self.max_ratio!r}.")

    @property
    def bounds(self) -> FileBounds:
        """The bounds its local data files are checked against."""
        return FileBounds(max_bytes=self.max_bytes, max_ratio=float(self.max_ratio))


class ItemSet:
    """Task items a class provides: a config names it by import path, as any other part
    (``train_dataset: {class_path: comlrl_lightning.tasks.coding.HumanEval, init_args: {split: train}}``).

    Subclasses implement :meth:`items`; a problem with an item is a
    :class:`~comlrl_lightning.errors.DataError` raised there, before any training.
    """

    def items(self) -> Sequence[Dict[str, Any]]:
        """The task items (dicts)."""
        raise NotImplementedError(f"{type(self).__name__} must implement items().")


class DatasetItems(Sequence[Dict[str, Any]]):
    """The items of a ``datasets.Dataset``, read from its table on access.

    ``items[i]`` is one item (a dict), ``items[a:b:c]`` another view of the same table (a rank's
    shard, the evaluation subset), and iteration reads the table in chunks. Nothing is copied
    into a Python list; every access returns fresh dicts.

    Args:
        dataset: the dataset (read in its plain Python format, whatever format it was given with).
        indices: the rows of ``dataset`` this view shows (default: all).
    """

    chunk_size = 256
    """Rows read at once while iterating."""

    def __init__(self, dataset: Any, indices: Optional[range] = None) -> None:
        self.dataset = dataset
        self.indices = indices if indices is not None else range(len(dataset))

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, index: int) -> Dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> "DatasetItems": ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return DatasetItems(self.dataset, self.indices[index])
        return self.dataset[self.indices[index]]

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for start in range(0, len(self.indices), self.chunk_size):
            columns = self.dataset[self.indices[start : start + self.chunk_size]]
            names = list(columns)
            for values in zip(*(columns[name] for name in names)):
                yield dict(zip(names, values))

    def __repr__(self) -> str:
        return f"DatasetItems({len(self)} of {len(self.dataset)} rows, columns={self.dataset.column_names})"


def is_hf_dataset(source: Any) -> bool:
    """Whether ``source`` is a ``datasets`` object (checked without importing ``datasets`` for other sources)."""
    return type(source).__module__.split(".")[0] == "datasets"


def load_dataset_items(source: Any, split: str, role: str) -> DatasetItems:
    """The items of a hub name / folder (a string or path), an :class:`HFDataset`, or a ``datasets`` object.

    ``split`` is the data module's default split; ``role`` (``train`` / ``eval``) names the option in errors.
    """
    import datasets

    option = f"{role}_dataset"
    if isinstance(source, (str, os.PathLike)):
        source = HFDataset(str(source))
    if isinstance(source, HFDataset):
        source = _load(source, split, option)
    if isinstance(source, (datasets.IterableDataset, datasets.IterableDatasetDict)):
        raise DataError(
            f"{option}: a streaming (iterable) dataset cannot be indexed; load it without "
            "streaming=True, or pass a datasets.Dataset."
        )
    if isinstance(source, datasets.DatasetDict):
        source = _split_of(source, split, option)
    if not isinstance(source, datasets.Dataset):
        raise ConfigurationTypeError(
            f"{option}: expected a list of items, a file, a dataset name or folder, an HFDataset "
            f"or a datasets.Dataset; got {type(source).__name__}."
        )
    # items are plain Python values whatever format the caller set (torch, numpy...)
    return DatasetItems(source.with_format(None))


def _load(spec: HFDataset, default_split: str, option: str) -> Any:
    import datasets

    require_local(spec.path, option, "a local folder or a hub dataset name")
    for pattern in _patterns(spec.data_files):
        require_local(pattern, f"{option}.data_files", "a local file or pattern")
    if any((Path(spec.path) / name).is_file() for name in SAVED_DATASET_FILES):
        if spec.name is not None or spec.data_files is not None:
            raise DataError(
                f"{option}: {spec.path} was written by save_to_disk; it has no configurations or "
                "data files (leave name and data_files unset)."
            )
        saved = _load_saved(Path(spec.path), option)
        return (
            _split_of(saved, spec.split or default_split, option) if isinstance(saved, datasets.DatasetDict) else saved
        )
    check_data_files(_local_data_files(spec), option, spec.bounds)
    split = spec.split
    if split is None:
        split = default_split if spec.data_files is None or isinstance(spec.data_files, dict) else "train"
    where = f"{option}: {spec.path}{f' ({spec.name})' if spec.name else ''}"
    try:
        return datasets.load_dataset(spec.path, spec.name, split=split, data_files=spec.data_files)
    except StopIteration:  # what datasets raises for a data_files pattern that matches nothing
        raise DataError(f"{where}: data_files {spec.data_files!r} matches no file.") from None
    except FileNotFoundError as error:  # a data file or a dataset that is not there
        raise DataError(f"{where}: {error}") from None
    except ConnectionError as error:  # neither a local file or folder nor reachable on the hub
        raise DataError(f"{where}: no such local file or folder, and the hub lookup failed: {error}") from None
    except ValueError as error:  # unknown split, missing configuration name...: say which option
        hint = ""
        if spec.name is None and "config" in str(error).lower():
            hint = f"\nName the configuration: {option}: {{path: {spec.path}, name: <config>}} (HFDataset(name=...) in Python)."
        raise DataError(f"{where}: {error}{hint}") from None


def _patterns(data_files: Optional[DataFiles]) -> List[str]:
    if data_files is None:
        return []
    if isinstance(data_files, dict):
        return [pattern for value in data_files.values() for pattern in _patterns(value)]
    return [str(data_files)] if isinstance(data_files, (str, os.PathLike)) else [str(p) for p in data_files]


def _local_data_files(spec: HFDataset) -> List[Path]:
    """The local files ``datasets`` reads for ``spec``: its ``data_files`` patterns as ``datasets``
    resolves them (from the dataset's folder, else the working folder), or the files under its
    folder; a pattern that matches no local file is left to ``datasets`` (a hub file, or its error)."""
    from datasets.data_files import resolve_pattern

    folder = Path(spec.path).expanduser()
    if spec.data_files is None:
        return local_files_under(folder) if folder.is_dir() else []
    base = str(folder) if folder.is_dir() else os.getcwd()
    files: Dict[str, Path] = {}
    for pattern in _patterns(spec.data_files):
        try:
            matches = resolve_pattern(pattern, base)
        except FileNotFoundError:
            continue
        files.update((match, Path(match)) for match in matches if Path(match).is_file())
    return list(files.values())


def _load_saved(folder: Path, option: str) -> Any:
    """``datasets.load_from_disk(folder)``; a corrupt metadata file or a missing Arrow file is named."""
    import datasets

    for metadata in sorted([*folder.rglob("state.json"), *folder.rglob("dataset_dict.json")]):
        try:
            json.loads(read_bounded(metadata, METADATA_LIMIT, f"{option}'s dataset metadata").decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            line = f" line {error.lineno}" if isinstance(error, json.JSONDecodeError) else ""
            raise DataError(
                f"{option}: {metadata}{line} is not valid JSON ({error}); the save_to_disk folder {folder} is "
                "damaged: save the dataset again."
            ) from None
    try:
        return datasets.load_from_disk(str(folder))
    except (OSError, ValueError, KeyError, TypeError) as error:
        detail = f"{error.filename} is missing" if isinstance(error, FileNotFoundError) and error.filename else error
        raise DataError(
            f"{option}: the save_to_disk folder {folder} cannot be read ({detail}); save the dataset again."
        ) from None


def _split_of(dataset_dict: Any, split: str, option: str) -> Any:
    if split not in dataset_dict:
        raise DataError(
            f"{option}: the dataset has no split {split!r} (it has: {', '.join(dataset_dict)}); set the split option."
        )
    return dataset_dict[split]


__all__ = ["DatasetItems", "HFDataset", "ItemSet", "is_hf_dataset", "load_dataset_items"]
