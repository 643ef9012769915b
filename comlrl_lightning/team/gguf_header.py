"""The header of a GGUF file, read and checked before anything reads the file whole.

A GGUF file is a header (magic, version, counts, metadata, one record per tensor: name, shape,
type, offset) followed by the tensors' bytes. :func:`read_header` parses the header from a memory
map, checking every count and length against the bytes that are left, and every tensor's extent
against the file: a file whose header is damaged, or whose tensors overlap, run past its end or
leave bytes after the last one, is refused by name before it is hashed (a 4 GiB file of zeros
behind a valid magic costs a header read, not a 4 GiB hash). :func:`check_tensor_shapes` then
holds each tensor to the model its metadata declares (vocabulary, width, layers, heads, feed-
forward width), so no tensor is dequantized that the architecture does not have room for.

Reading the header is plain Python over the memory map (``gguf.GGUFReader`` builds an object
per metadata string: 12 s for SmolLM2's 98,000 tokens and merges on a loaded 2-core machine).
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from comlrl_lightning.errors import DataError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
"""The GGUF versions the ``gguf`` package (and so transformers) reads."""
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
"""ggml's most dimensions for a tensor."""
MAX_NESTING = 2
"""Arrays of arrays are allowed one level deep (no GGUF writer nests deeper)."""

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
"""GGUF value types of fixed size, as :mod:`struct` codes (8 is a string, 9 an array)."""
_STRING, _ARRAY = 8, 9

LLAMA_LAYOUT = ("llama", "mistral", "qwen2", "qwen3")
"""Architectures whose tensors (the Llama layout) are checked by their exact shapes; every other
architecture is held to the bound of :func:`generic_bound`."""
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


class GgufError(DataError):
    """A GGUF file that cannot be read or converted, or a converted folder that cannot be trusted."""


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as the header declares it: ``dims`` in GGUF order (the innermost dimension first,
    so a ``(rows, columns)`` matrix is ``(columns, rows)``), ``offset`` from the start of the data."""

    name: str
    dims: Tuple[int, ...]
    type: int
    offset: int
    n_bytes: int


@dataclass
class GgufHeader:
    """What :func:`read_header` found: the version, scalar and string metadata (``metadata``), the
    length of every array (``array_lengths``), the tensors, where their data starts, the file's size."""

    version: int
    metadata: Dict[str, Any] = field(default_factory=dict)
    array_lengths: Dict[str, int] = field(default_factory=dict)
    tensors: List[TensorRecord] = field(default_factory=list)
    data_start: int = 0
    file_size: int = 0


class _Cursor:
    """Little- or big-endian reads from a memory map that never go past its end."""

    def __init__(self, view: mmap.mmap, endian: str, path: Path) -> None:
        self.view, self.endian, self.path, self.position = view, endian, path, 0

    def left(self) -> int:
        return len(self.view) - self.position

    def take(self, code: str) -> Any:
        size = struct.calcsize(code)
        if size > self.left():
            raise GgufError(f"{self.path}: the GGUF header is cut short at byte {self.position}; give a complete file.")
        (value,) = struct.unpack_from(self.endian + code, self.view, self.position)
        self.position += size
        return value

    def count(self, what: str, least_size: int) -> int:
        """A uint64 count of items of at least ``least_size`` bytes each, which must fit in what is left."""
        value = self.take("Q")
        if value * least_size > self.left():
            raise GgufError(
                f"{self.path}: the GGUF header declares {value} {what}, more than the file's "
                f"{self.left()} remaining bytes can hold; the file is damaged."
            )
        return value

    def string(self) -> str:
        length = self.count("bytes of a string", 1)
        raw = self.view[self.position : self.position + length]
        self.position += length
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        length = self.count("bytes of a string", 1)  # read before the position it moves is added to
        self.position += length


def read_header(path: Path) -> GgufHeader:
    """Parse and check the header of the GGUF file ``path`` (see the module's docstring); a problem is
    a :class:`GgufError` naming the file."""
    size = path.stat().st_size
    if size < 24:  # magic, version and the two counts
        raise GgufError(_not_gguf(path))
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        if view[:4] != GGUF_MAGIC:
            raise GgufError(_not_gguf(path))
        (version,) = struct.unpack_from("<I", view, 4)
        endian = ">" if version & 0xFFFF == 0 and version else "<"  # a big-endian file reads byte-swapped
        cursor = _Cursor(view, endian, path)
        cursor.position = 4
        header = GgufHeader(version=cursor.take("I"), file_size=size)
        if header.version not in SUPPORTED_VERSIONS:
            raise GgufError(
                f"{path}: GGUF version {header.version} is not readable here (versions "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))} are); convert it again with a current llama.cpp."
            )
        tensor_count = cursor.count("tensors", 24)  # name length, one dimension, type, offset
        metadata_count = cursor.count("metadata entries", 12)  # key length, value type
        for _ in range(metadata_count):
            _read_entry(cursor, header)
        header.tensors = [_read_tensor(cursor) for _ in range(tensor_count)]
        alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GgufError(f"{path}: general.alignment {alignment!r} is not a power of two; the file is damaged.")
        header.data_start = _align(cursor.position, alignment)
    check_extents(header, path, alignment)
    return header


def _read_entry(cursor: _Cursor, header: GgufHeader) -> None:
    key = cursor.string()
    kind = cursor.take("I")
    if kind == _ARRAY:
        header.array_lengths[key] = _skip_array(cursor, key, depth=1)
    else:
        header.metadata[key] = _read_value(cursor, kind, key)


def _read_value(cursor: _Cursor, kind: int, key: str) -> Any:
    if kind == _STRING:
        return cursor.string()
    if kind not in _SCALARS:
        raise GgufError(f"{cursor.path}: metadata {key!r} has the unknown value type {kind}; the file is damaged.")
    return cursor.take(_SCALARS[kind])


def _skip_array(cursor: _Cursor, key: str, depth: int) -> int:
    """Step over an array's items (its strings' bytes are never copied); returns its length."""
    kind = cursor.take("I")
    least = struct.calcsize(_SCALARS[kind]) if kind in _SCALARS else (12 if kind == _ARRAY else 8)
    length = cursor.count(f"items of the array {key!r}", least)
    if kind in _SCALARS:
        cursor.position += length * least
    elif kind == _STRING:
        for _ in range(length):
            cursor.skip_string()
    elif kind == _ARRAY and depth < MAX_NESTING:
        for _ in range(length):
            _skip_array(cursor, key, depth + 1)
    else:
        raise GgufError(f"{cursor.path}: the array {key!r} holds items of type {kind}, which GGUF does not have.")
    return length


def _read_tensor(cursor: _Cursor) -> TensorRecord:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    name = cursor.string()
    n_dims = cursor.take("I")
    if not 0 < n_dims <= MAX_DIMS:
        raise GgufError(f"{cursor.path}: tensor {name} has {n_dims} dimensions (ggml has 1 to {MAX_DIMS}).")
    dims = tuple(cursor.take("Q") for _ in range(n_dims))
    kind, offset = cursor.take("I"), cursor.take("Q")
    try:
        sizes = GGML_QUANT_SIZES.get(GGMLQuantizationType(kind))
    except ValueError:  # not a ggml type at all
        sizes = None
    if sizes is None:
        raise GgufError(f"{cursor.path}: tensor {name} has the unknown ggml type {kind}.")
    block, type_size = sizes
    if dims[0] % block:
        raise GgufError(
            f"{cursor.path}: tensor {name}'s first dimension {dims[0]} is not a multiple of its block {block}."
        )
    return TensorRecord(name, dims, kind, offset, math.prod(dims) // block * type_size)


def check_extents(header: GgufHeader, path: Path, alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Every tensor lies inside the file, after the header, without overlapping another; no name
    comes twice; the file ends with the last tensor (and its alignment padding)."""
    names = set()
    end = 0
    for tensor in sorted(header.tensors, key=lambda record: record.offset):
        if tensor.name in names:
            raise GgufError(f"{path}: tensor {tensor.name} is declared twice; the file is damaged.")
        names.add(tensor.name)
        if tensor.offset % alignment or tensor.offset < end:
            raise GgufError(
                f"{path}: tensor {tensor.name} starts at {tensor.offset}, inside the previous tensor or off the "
                f"file's {alignment}-byte alignment; the file is damaged."
            )
        end = tensor.offset + tensor.n_bytes
        if header.data_start + end > header.file_size:
            raise GgufError(
                f"{path}: tensor {tensor.name} (shape {list(tensor.dims)}, {tensor.n_bytes} bytes) runs past the "
                f"end of the file ({header.file_size} bytes); the file is cut short or damaged."
            )
    expected_end = header.data_start + _align(end, alignment) if header.tensors else header.data_start
    if header.file_size > max(expected_end, header.data_start + end):
        raise GgufError(
            f"{path}: {header.file_size - expected_end} bytes follow the last tensor (the tensors end at byte "
            f"{expected_end} of {header.file_size}); the file is damaged or not what its header declares."
        )


@dataclass(frozen=True)
class DeclaredModel:
    """The sizes a GGUF file's metadata declares for its model (``None``: not declared)."""

    architecture: str
    hidden: int
    layers: int
    vocab: Optional[int]
    feed_forward: Optional[int]
    heads: Optional[int]
    kv_heads: Optional[int]
    key_length: Optional[int]
    value_length: Optional[int]
    context: Optional[int]
    experts: int


def declared_model(header: GgufHeader, path: Path) -> DeclaredModel:
    """The model ``header``'s metadata declares; a width or a layer count missing (every architecture
    transformers reads declares both) is a :class:`GgufError`."""
    architecture = header.metadata.get("general.architecture")
    if not isinstance(architecture, str):
        raise GgufError(f"{path}: the GGUF metadata names no general.architecture; the file is damaged.")

    def number(key: str) -> Optional[int]:
        value = header.metadata.get(f"{architecture}.{key}")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    hidden, layers = number("embedding_length"), number("block_count")
    if hidden is None or layers is None:
        missing = f"{architecture}.embedding_length" if hidden is None else f"{architecture}.block_count"
        raise GgufError(f"{path}: the GGUF metadata declares no {missing}; its tensors cannot be checked.")
    heads = number("attention.head_count")
    key_length = number("attention.key_length") or (hidden // heads if heads else None)
    return DeclaredModel(
        architecture=architecture,
        hidden=hidden,
        layers=layers,
        vocab=number("vocab_size") or header.array_lengths.get("tokenizer.ggml.tokens"),
        feed_forward=number("feed_forward_length"),
        heads=heads,
        kv_heads=number("attention.head_count_kv") or heads,
        key_length=key_length,
        value_length=number("attention.value_length") or key_length,
        context=number("context_length"),
        experts=number("expert_count") or 1,
    )


Shapes = Dict[str, Tuple[int, ...]]
"""Tensor names with their shapes in GGUF order."""


def llama_layout(model: DeclaredModel) -> Tuple[Shapes, Shapes]:
    """The tensors of the Llama layout for ``model``: the required ones and the optional ones
    (biases, query/key norms, an untied output head), each name with its shape in GGUF order."""
    hidden, ffn, vocab = model.hidden, model.feed_forward or 0, model.vocab or 0
    key, value, heads, kv_heads = model.key_length or 0, model.value_length or 0, model.heads or 0, model.kv_heads or 0
    block: Shapes = {
        "attn_norm.weight": (hidden,),
        "ffn_norm.weight": (hidden,),
        "attn_q.weight": (hidden, heads * key),
        "attn_k.weight": (hidden, kv_heads * key),
        "attn_v.weight": (hidden, kv_heads * value),
        "attn_output.weight": (heads * value, hidden),
        "ffn_gate.weight": (hidden, ffn),
        "ffn_up.weight": (hidden, ffn),
        "ffn_down.weight": (ffn, hidden),
    }
    block_optional: Shapes = {
        "attn_q.bias": (heads * key,),
        "attn_k.bias": (kv_heads * key,),
        "attn_v.bias": (kv_heads * value,),
        "attn_output.bias": (hidden,),
        "attn_q_norm.weight": (key,),
        "attn_k_norm.weight": (key,),
    }
    required: Shapes = {"token_embd.weight": (hidden, vocab), "output_norm.weight": (hidden,)}
    optional: Shapes = {"output.weight": (hidden, vocab)}
    for i in range(model.layers):
        required.update((f"blk.{i}.{name}", shape) for name, shape in block.items())
        optional.update((f"blk.{i}.{name}", shape) for name, shape in block_optional.items())
    return required, optional


def generic_bound(model: DeclaredModel) -> Tuple[int, int]:
    """The largest dimension and the most elements any tensor of ``model`` may have: a dimension is
    at most the largest size the metadata declares (the vocabulary, the context, four times the
    width, twice the feed-forward width, the attention's width); a tensor at most that times the
    larger of the width and the feed-forward width, times the number of experts."""
    hidden, ffn = model.hidden, model.feed_forward or 0
    attention = (model.heads or 0) * (model.key_length or 0)
    largest = max(hidden * 4, model.vocab or 0, model.context or 0, 2 * ffn, attention, model.experts)
    return largest, largest * max(hidden, ffn) * model.experts


def check_tensor_shapes(header: GgufHeader, path: Path) -> None:
    """Hold every tensor of ``header`` to the model its metadata declares (see :func:`llama_layout`
    and :func:`generic_bound`): a tensor of another shape, a block past the declared layers, or a
    missing tensor of the Llama layout is a :class:`GgufError` naming the file and the tensor."""
    model = declared_model(header, path)
    if model.layers > len(header.tensors):  # every block has a tensor: the layout below stays as small as the file
        raise GgufError(
            f"{path}: the metadata declares {model.layers} layers ({model.architecture}.block_count), but the file "
            f"holds {len(header.tensors)} tensors; the file is damaged."
        )
    required: Shapes = {}
    optional: Shapes = {}
    if model.architecture in LLAMA_LAYOUT:
        required, optional = llama_layout(model)
    largest, most = generic_bound(model)
    for tensor in header.tensors:
        block = _BLOCK.fullmatch(tensor.name)
        if block and int(block.group(1)) >= model.layers:
            raise GgufError(
                f"{path}: tensor {tensor.name} belongs to a block past the {model.layers} the metadata declares "
                f"({model.architecture}.block_count); the file is damaged."
            )
        expected = required.get(tensor.name) or optional.get(tensor.name)
        if expected is not None and tensor.dims != expected:
            raise GgufError(_wrong_shape(path, tensor, f"the declared {model.architecture} model has {list(expected)}"))
        if expected is None and (max(tensor.dims) > largest or math.prod(tensor.dims) > most):
            raise GgufError(
                _wrong_shape(path, tensor, f"larger than any tensor of the declared {model.architecture} model")
            )
    missing = sorted(set(required) - {tensor.name for tensor in header.tensors})
    if missing:
        raise GgufError(
            f"{path}: the declared {model.architecture} model ({model.layers} layers) has no tensor {missing[0]}"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; the file is damaged."
        )


def _wrong_shape(path: Path, tensor: TensorRecord, why: str) -> str:
    return (
        f"{path}: tensor {tensor.name} declares the shape {list(tensor.dims)} ({tensor.n_bytes} bytes), but {why} "
        "(shapes in GGUF order, innermost first); the file is damaged or not the model its metadata declares."
    )


def _not_gguf(path: Path) -> str:
    return (
        f"{path} is not a GGUF file (it does not start with the GGUF magic bytes); give a complete .gguf "
        "file (download it again if it was cut short), a Hugging Face folder or a hub id."
    )


def _align(position: int, alignment: int) -> int:
    return position + (-position) % alignment


__all__ = [
    "DeclaredModel",
    "GgufError",
    "GgufHeader",
    "LLAMA_LAYOUT",
    "Shapes",
    "TensorRecord",
    "check_extents",
    "check_tensor_shapes",
    "declared_model",
    "generic_bound",
    "llama_layout",
    "read_header",
]
