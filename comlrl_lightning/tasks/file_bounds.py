"""Bounds on the data files a user gives: how large a file is, and how far a compressed one expands.

A task file (``.json``/``.jsonl``, compressed or not) and every local data file of a Hugging Face
dataset source are checked before anything reads them for real. ``datasets`` decompresses a
``.gz``/``.bz2``/``.xz``/``.zst``/``.lz4``/``.zip`` data file (found by its first bytes, whatever
its name) into its cache before it reads a row, with no limit: a 2 MB gzip bomb grows to many GB
there. Here each compressed file is decompressed as a stream, counting bytes and keeping none
(:func:`check_data_files`), or keeping them for the library's own JSON readers
(:func:`read_data_file`), and refused with one line naming the file and the bound once it expands
past :attr:`FileBounds.max_bytes` or past :attr:`FileBounds.max_ratio` times its size.
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import lzma
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Protocol

from comlrl_lightning.errors import DataError, MissingPathError

DEFAULT_MAX_BYTES = 4 << 30
"""The most a source's data files may hold, decompressed, together (4 GiB)."""
DEFAULT_MAX_RATIO = 100.0
"""The most a compressed file may expand, as a multiple of its own size (past :data:`RATIO_AFTER`)."""
RATIO_AFTER = 64 << 20
"""The ratio bound applies once a file has expanded past 64 MiB: small, very regular files
(a few MB of repeated rows) may compress far better than 100:1 and are harmless."""
CHUNK = 1 << 20
"""Bytes decompressed at a time: what a check holds in memory whatever the file."""

MAGIC_NUMBERS = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\x04\x22\x4d\x18": "lz4",
    b"PK\x03\x04": "zip",
    b"PK\x05\x06": "zip",
    b"PK\x07\x08": "zip",
    b"7z\xbc\xaf\x27\x1c": "7z",
    b"Rar!\x1a\x07": "rar",
}
"""The first bytes by which ``datasets`` (and this module) recognise a compressed file or archive."""

SOURCE_REMEDY = "if it is real data, raise max_bytes / max_ratio of the dataset source (HFDataset)."
TASK_FILE_REMEDY = (
    "if it is real data, read it as a dataset source with higher bounds: {path: json, data_files: <file>, "
    "max_bytes: ..., max_ratio: ...}."
)

_DAMAGED = (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, RuntimeError, ValueError)
"""What the decompressors raise for a damaged, truncated or encrypted file."""


class _Readable(Protocol):
    """A decompressed stream: what counting needs of it."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class FileBounds:
    """How much data files may hold once decompressed.

    Args:
        max_bytes: the most the files of one source hold together, decompressed (default 4 GiB).
        max_ratio: the most a compressed file may expand, as a multiple of its size on disk, once
            it has expanded past ``ratio_after`` (default 100).
        ratio_after: the expanded size below which the ratio is not checked (default 64 MiB).
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_ratio: float = DEFAULT_MAX_RATIO
    ratio_after: int = RATIO_AFTER


def human_size(size: float) -> str:
    """``size`` bytes as people read it: ``512 bytes``, ``3.2 MiB``, ``4.0 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{int(size)} bytes"


def compression_of(path: Path) -> Optional[str]:
    """The compression or archive format of ``path`` by its first bytes (``gzip``, ``zip``...), or
    ``None`` for a file stored as it is."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    return next((kind for magic, kind in MAGIC_NUMBERS.items() if head.startswith(magic)), None)


def check_data_files(paths: Iterable[Path], option: str, bounds: FileBounds) -> int:
    """Check every file of ``paths`` against ``bounds`` (decompressing compressed ones as a stream,
    keeping nothing); returns their decompressed size in all. A file past a bound is a
    :class:`~comlrl_lightning.errors.DataError` naming ``option``, the file and the bound."""
    total = 0
    for path in paths:
        total += _expand(Path(path), option, bounds, bounds.max_bytes - total, None, SOURCE_REMEDY)
    return total


def read_data_file(path: Path, option: str, bounds: FileBounds = FileBounds()) -> bytes:
    """The bytes of ``path``, decompressed when it is compressed, under ``bounds`` (as
    :func:`check_data_files`). A missing file is a :class:`~comlrl_lightning.errors.MissingPathError`,
    a folder a :class:`~comlrl_lightning.errors.DataError`."""
    if not path.exists():
        raise MissingPathError(f"{option}: {path} does not exist.")
    if path.is_dir():
        raise DataError(f"{option}: {path} is a folder; a .json or .jsonl task file is a file.")
    chunks: List[bytes] = []
    _expand(path, option, bounds, bounds.max_bytes, chunks.append, TASK_FILE_REMEDY)
    return b"".join(chunks)


def _expand(
    path: Path, option: str, bounds: FileBounds, budget: int, keep: Optional[Callable[[bytes], None]], remedy: str
) -> int:
    """Stream ``path``'s (decompressed) bytes into ``keep`` (or nowhere), refusing it past ``budget``
    or past the ratio bound (the message ends with ``remedy``); returns how many bytes it holds."""
    size = path.stat().st_size
    kind = compression_of(path)
    if kind is None and size > budget:
        raise DataError(_too_large(option, path, size, bounds, remedy))
    if kind is None and keep is None:
        return size  # stored as it is: its size is what it holds
    total = 0
    try:
        for stream in _streams(path, kind, option):
            while chunk := stream.read(CHUNK):
                total += len(chunk)
                if total > budget:
                    raise DataError(_too_large(option, path, total, bounds, remedy, expanded=kind is not None))
                if kind is not None and total > bounds.ratio_after and total > bounds.max_ratio * max(size, 1):
                    raise DataError(
                        f"{option}: {path} expands more than {bounds.max_ratio:g}:1 when decompressed ({human_size(size)} "
                        f"to over {human_size(total)}), past the data files' max_ratio: a compression bomb, or {remedy}"
                    )
                if keep is not None:
                    keep(chunk)
    except DataError:
        raise  # a bound, said above (a ValueError too, which the next line would take for damage)
    except _DAMAGED as error:
        raise DataError(
            f"{option}: {path} cannot be decompressed as {kind} ({type(error).__name__}: {_one_line(error)})."
        ) from None
    return total


def _streams(path: Path, kind: Optional[str], option: str) -> Iterator[_Readable]:
    """The decompressed byte streams of ``path``: one, or one per member of a zip archive."""
    if kind is None:
        with open(path, "rb") as handle:
            yield handle
    elif kind == "zip":
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if not member.is_dir():
                    with archive.open(member) as stream:
                        yield stream
    elif kind == "gzip":
        with gzip.open(path, "rb") as stream:
            yield stream
    elif kind == "bz2":
        with bz2.open(path, "rb") as stream:
            yield stream
    elif kind == "xz":
        with lzma.open(path, "rb") as stream:
            yield stream
    else:
        yield from _optional_streams(path, kind, option)


def _optional_streams(path: Path, kind: str, option: str) -> Iterator[_Readable]:
    """zstd and lz4 through their packages (which ``datasets`` needs to read them too); 7z and rar
    archives are not decompressed here."""
    try:
        if kind == "zstd":
            decompressor = importlib.import_module("zstandard").ZstdDecompressor()
            with open(path, "rb") as raw, decompressor.stream_reader(raw, read_across_frames=True) as stream:
                yield stream
            return
        if kind == "lz4":
            with importlib.import_module("lz4.frame").open(path, "rb") as stream:
                yield stream
            return
    except ImportError:
        package = {"zstd": "zstandard", "lz4": "lz4"}[kind]
        raise DataError(
            f"{option}: {path} is {kind}-compressed; its size cannot be checked without the {package} package "
            f"(pip install {package}), or decompress it first."
        ) from None
    raise DataError(f"{option}: {path} is a {kind} archive, which is not read here; extract it first.")


def _too_large(option: str, path: Path, size: int, bounds: FileBounds, remedy: str, expanded: bool = False) -> str:
    how = "expands past" if expanded else f"is {human_size(size)}, more than"
    return (
        f"{option}: {path} {how} {human_size(bounds.max_bytes)}, the data files' max_bytes (the decompressed "
        f"size of a source's files together); {remedy}"
    )


def _one_line(error: BaseException, limit: int = 200) -> str:
    return (" ".join(str(error).split()) or "no message")[:limit]


def local_files_under(folder: Path) -> List[Path]:
    """The regular files under ``folder`` that ``datasets`` would read as data files: every level,
    without following linked folders, leaving out hidden (``.name``) and special (``__name``) entries."""
    found: List[Path] = []
    for parent, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith((".", "__")))
        found += [Path(parent) / name for name in sorted(files) if not name.startswith((".", "__"))]
    return [path for path in found if path.is_file()]


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_RATIO",
    "FileBounds",
    "check_data_files",
    "compression_of",
    "human_size",
    "local_files_under",
    "read_data_file",
]
