"""GGUF files as model sources: converted once into a cached Hugging Face folder.

A ``.gguf`` file (llama.cpp's format: the weights, often quantized, with the tokenizer and chat
template in its metadata) is read by transformers (``from_pretrained(..., gguf_file=...)``, which
dequantizes it), and written as an ordinary folder: ``model.safetensors`` (float32, so any
``dtype`` loads from it without a second rounding), ``config.json``, ``generation_config.json``
and the tokenizer's files. Every consumer (the team, critics, reward models, comparators, vLLM,
policy snapshots, ``save_model``, checkpoints) then sees a plain Hugging Face folder.

The folder lives under the cache root (:func:`~comlrl_lightning.defaults.cache_root`), named by
the file's sha256 (``gguf-<sha256>``), so a renamed or copied file reuses it and a changed file
gets its own. It is written into a staging folder and renamed into place only when complete, with
a marker (:data:`MARKER`: the digest, and every file's size and sha256) written last; a lock per
digest makes one process convert while the others wait, and a killed conversion leaves only a
staging folder that nothing trusts (the next conversion removes it).

Nothing is read whole before the file's header is checked (:mod:`~comlrl_lightning.team.gguf_header`:
counts and sizes against the file, every tensor's shape against the model its metadata declares).
A converted folder is trusted by its content: at every load its files must be exactly the marker's,
each with the recorded sha256 (hashed once per file version and process: see :func:`file_sha256`);
a folder that differs is refused by name, and a folder of the earlier format (sizes only, no
hashes) is converted anew in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Set, Tuple

from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.defaults import cache_root, cache_root_option
from comlrl_lightning.errors import MissingPathError, RunStateError
from comlrl_lightning.runtime.files import open_in_place, swap_folder, write_atomically
from comlrl_lightning.runtime.paths import make_folder
from comlrl_lightning.runtime.quiet import gguf_bar_off_in_logs, transformers_bars_off
from comlrl_lightning.team.gguf_header import GGUF_MAGIC, GgufError, check_tensor_shapes, read_header

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks; the staging rename still never tears
    fcntl = None  # type: ignore[assignment]

GGUF_SUFFIX = ".gguf"
MARKER = "comlrl-conversion.json"
"""Written last into a converted folder: the GGUF file's sha256 and the size and sha256 of every file beside it."""
MARKER_FORMAT = 2
"""The marker's format: 2 records each file's sha256; 1 (no ``format`` entry) recorded sizes only."""

FileVersion = Tuple[str, int, int, int, int, int]
"""(real path, device, inode, size, mtime, ctime): writing into a file changes its ctime, which no
user can set back, so a file changed in place is a new version."""

_DIGESTS: Dict[FileVersion, str] = {}
"""sha256 of the file versions already hashed in this process."""
_CHECKED: Set[FileVersion] = set()
"""The GGUF file versions whose header this process has checked."""


def is_gguf(source: str) -> bool:
    """Whether ``source`` names a GGUF file (by its ``.gguf`` suffix)."""
    return source.lower().endswith(GGUF_SUFFIX)


def file_sha256(path: Path, chunk_size: int = 1 << 22) -> str:
    """The sha256 of ``path``'s bytes, streamed in chunks (remembered per file version in this process)."""
    key = _file_version(path)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(chunk_size), b""):
                digest.update(chunk)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _file_version(path: Path) -> FileVersion:
    info = path.stat()
    return (os.path.realpath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def forget_digests() -> None:
    """Forget the digests and header checks remembered in this process (the next load hashes and
    checks its files again, as a new process does)."""
    _DIGESTS.clear()
    _CHECKED.clear()


def check_gguf_file(path: Path) -> None:
    """``path`` is an existing regular file with a sound GGUF header whose tensors fit the model its
    metadata declares (:mod:`~comlrl_lightning.team.gguf_header`); read from the header alone."""
    if not path.exists():
        raise MissingPathError(f"model path {path} does not exist.")
    if not path.is_file():
        raise GgufError(f"{path} is not a file; a .gguf model source is a GGUF file.")
    version = _file_version(path)
    if version not in _CHECKED:  # 0.3 s for SmolLM2's header; every agent, tokenizer and critic asks again
        check_tensor_shapes(read_header(path), path)
        _CHECKED.add(version)


def gguf_folder(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """The converted Hugging Face folder of the GGUF file ``path``, converting it on first use."""
    file = Path(path).expanduser().absolute()
    check_gguf_file(file)  # before the file is hashed whole
    digest = file_sha256(file)
    root = cache_root(cache_dir)
    target = root / f"gguf-{digest}"
    if _trusted(target, digest, file):
        return target
    make_folder(root, cache_root_option(cache_dir))
    with _locked(root / f".gguf-{digest}.lock"):
        if _trusted(target, digest, file):  # another process converted it while this one waited
            return target
        # a killed conversion's staging folder, or an earlier format's folder set aside and not removed
        for leftover in [*root.glob(f".gguf-{digest}-*"), *root.glob(f".gguf-{digest}.*.old")]:
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".gguf-{digest}-", dir=root))
        try:
            rank_zero_info(f"Converting {file} into {target} (once: later runs load the folder).")
            convert_gguf(file, staging)
            staging.chmod(0o755)  # mkdtemp's folder is private; the cache's other folders are not
            _write_marker(staging, digest)
            swap_folder(staging, target)  # an earlier format's folder, if any, is replaced whole
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_gguf(file: Path, folder: Path) -> None:
    """Write ``file``'s model (float32, dequantized) and tokenizer into ``folder`` as a Hugging Face folder.

    ``from_pretrained(..., gguf_file=...)`` loads the model, but its ``save_pretrained`` refuses a
    model marked as GGUF-quantized; the weights are written with safetensors directly (a tied
    output head once, as ``save_pretrained`` would) and the config without its quantization entry.
    """
    try:
        import gguf  # noqa: F401  (transformers reads GGUF through it)
    except ImportError:
        raise GgufError(f"reading {file} needs the gguf package: pip install gguf") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with transformers_bars_off(), gguf_bar_off_in_logs(), _gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
            model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype="float32")
    except Exception as error:  # transformers and gguf raise many kinds for an unreadable file
        raise GgufError(
            f"{file}: transformers cannot read this GGUF model ({_one_line(error)}); use a complete GGUF file of "
            "an architecture and quantization transformers supports, a Hugging Face folder or a hub id."
        ) from None
    _save_weights(model, folder)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """For the block, gguf's reader of a file and its tensor name maps are built once and reused.

    transformers parses a GGUF file three times in one conversion (the tokenizer, the config, the weights:
    each a whole parse of the metadata, SmolLM2's 49,152-token vocabulary and merges one element at a time,
    about 7 s each on a laptop core) and builds gguf's tensor name map once per module of the model (397 for
    SmolLM2, about 5 s in all). It looks both up on the ``gguf`` package at each call, so for the block the
    package's ``GGUFReader`` and ``get_tensor_name_map`` are replaced by memos of the originals (a reader is
    only read; a name map is a pure function of its arguments) and put back after. A read of another thread
    meanwhile gets what it would have built: a reader of the file it names, a name map of its arguments."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: Dict[Tuple[str, str], Any] = {}
    name_maps: Dict[Tuple[Any, int], Any] = {}

    def read_once(path: Any, mode: Any = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    def map_once(arch: Any, n_blocks: int) -> Any:
        if (arch, n_blocks) not in name_maps:
            name_maps[arch, n_blocks] = name_map(arch, n_blocks)
        return name_maps[arch, n_blocks]

    # setattr: mypy would hold the replacements to the package's own types
    setattr(gguf, "GGUFReader", read_once)  # noqa: B010
    setattr(gguf, "get_tensor_name_map", map_once)  # noqa: B010
    try:
        yield
    finally:
        setattr(gguf, "GGUFReader", reader_class)  # noqa: B010
        setattr(gguf, "get_tensor_name_map", name_map)  # noqa: B010
        readers.clear()  # the memory maps close with the readers


def _save_weights(model, folder: Path) -> None:
    """``model``'s parameters and buffers saved with its state dict into ``folder/model.safetensors``:
    tensors that share storage (a tied head) are written once, under the first name."""
    from safetensors.torch import save_file

    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        tensors[name] = tensor.detach().contiguous().clone()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _one_line(error: BaseException, limit: int = 200) -> str:
    text = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}: {text[:limit]}"


def _write_marker(folder: Path, digest: str) -> None:
    files = {
        path.name: {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(folder.iterdir())
        if path.is_file()
    }
    record = {"format": MARKER_FORMAT, "gguf_sha256": digest, "files": files}
    write_atomically(folder / MARKER, json.dumps(record, indent=1).encode())


def _trusted(folder: Path, digest: str, file: Path) -> bool:
    """True for a complete conversion of ``digest`` whose files are what the conversion wrote; False
    when there is none, or only one of the earlier format (converted anew); an error for a folder
    under the final name that is not a complete, unchanged conversion (damaged, or written by something else)."""
    if not os.path.lexists(folder):
        return False
    problem = _marker_problem(folder, digest)
    if problem is None:
        return True
    if problem is _EARLIER_FORMAT:
        rank_zero_info(f"{folder} was converted by an earlier version (no content hashes): converting {file} anew.")
        return False
    raise GgufError(
        f"{folder} (the converted folder of {file}) cannot be trusted: {problem}; delete it and run again "
        "(the file is converted anew)."
    )


_EARLIER_FORMAT = "written in the earlier marker format (sizes only)"


def _marker_problem(folder: Path, digest: str) -> Optional[str]:
    """Why ``folder`` is not the unchanged conversion of ``digest`` (``None``: it is)."""
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        files = dict(record["files"])
        recorded = record["gguf_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"its completion marker {MARKER} is missing or unreadable"
    if recorded != digest:
        return f"its marker records another file (sha256 {str(recorded)[:12]}...)"
    if record.get("format") is None and all(isinstance(size, int) for size in files.values()):
        return _EARLIER_FORMAT
    if record.get("format") != MARKER_FORMAT or "model.safetensors" not in files or "config.json" not in files:
        return f"its marker {MARKER} does not describe a converted model"
    present = {entry.name for entry in os.scandir(folder)} - {MARKER}
    if present != set(files):
        extra = sorted(present - set(files)) or sorted(set(files) - present)
        return (
            f"it holds {extra[0]}, which the conversion did not write"
            if present - set(files)
            else f"{extra[0]} is missing"
        )
    for name, entry in files.items():
        problem = _file_problem(folder / name, entry)
        if problem:
            return f"{name} {problem}"
    return None


def _file_problem(path: Path, entry: object) -> Optional[str]:
    """Why the converted file ``path`` differs from its marker ``entry`` (``None``: it does not)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        return "has no recorded sha256 in the marker"
    if path.is_symlink() or not path.is_file():
        return "is not a regular file"
    if path.stat().st_size != entry.get("size"):
        return "is not the size the conversion wrote"
    if file_sha256(path) != entry["sha256"]:
        return "is not what the conversion wrote (its sha256 differs: changed in place)"
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the block (waiting for another holder; the kernel
    releases it when its holder dies)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    descriptor = open_in_place(path, "the GGUF conversion's lock file")
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError as error:  # pragma: no cover - a file system without flock
            raise RunStateError(f"cannot lock {path} for the GGUF conversion ({error}).") from None
        yield
    finally:
        os.close(descriptor)


__all__ = [
    "GGUF_MAGIC",
    "GGUF_SUFFIX",
    "MARKER",
    "GgufError",
    "check_gguf_file",
    "convert_gguf",
    "file_sha256",
    "forget_digests",
    "gguf_folder",
]
