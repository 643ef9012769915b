"""The GGUF header's checks as pure functions: the extents of the tensors in the file, and their
shapes against the model the metadata declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from comlrl_lightning.team.gguf_header import (
    GgufError,
    GgufHeader,
    TensorRecord,
    check_extents,
    check_tensor_shapes,
    declared_model,
    generic_bound,
    llama_layout,
)

PATH = Path("model.gguf")
F32 = 0  # ggml's float32 type


def record(name: str, dims, offset: int = 0) -> TensorRecord:
    count = 1
    for dim in dims:
        count *= dim
    return TensorRecord(name, tuple(dims), F32, offset, 4 * count)


def header(tensors, architecture="llama", **metadata) -> GgufHeader:
    values = {"embedding_length": 8, "block_count": 1, "feed_forward_length": 16, "attention.head_count": 2}
    values |= metadata
    return GgufHeader(
        version=3,
        metadata={"general.architecture": architecture, **{f"{architecture}.{k}": v for k, v in values.items()}},
        array_lengths={"tokenizer.ggml.tokens": 10},
        tensors=list(tensors),
    )


def one_layer_llama(**shapes):
    """The tensors of a 1-layer Llama of width 8, heads 2 (of 4), feed-forward 16, 10 tokens."""
    required, _ = llama_layout(declared_model(header([]), PATH))
    return [record(name, shapes.get(name, dims)) for name, dims in required.items()]


def test_the_declared_model_reads_the_metadata_and_the_token_list():
    model = declared_model(header([], **{"attention.head_count_kv": 1}), PATH)
    assert (model.hidden, model.layers, model.vocab, model.feed_forward) == (8, 1, 10, 16)
    assert (model.heads, model.kv_heads, model.key_length, model.value_length, model.experts) == (2, 1, 4, 4, 1)
    with pytest.raises(GgufError, match="declares no llama.embedding_length"):
        declared_model(header([], embedding_length=None), PATH)


def test_a_llama_whose_tensors_fit_passes_and_each_wrong_one_is_named():
    check_tensor_shapes(header(one_layer_llama()), PATH)
    with pytest.raises(GgufError, match=r"tensor blk.0.ffn_up.weight declares the shape \[8, 17\]"):
        check_tensor_shapes(header(one_layer_llama(**{"blk.0.ffn_up.weight": (8, 17)})), PATH)
    with pytest.raises(GgufError, match=r"token_embd.weight declares the shape \[8, 1000000\]"):
        check_tensor_shapes(header(one_layer_llama(**{"token_embd.weight": (8, 10**6)})), PATH)


def test_declared_layers_are_held_to_the_tensors_the_file_has():
    # 10^9 layers would build a layout of 10^10 names: refused from the count first
    with pytest.raises(GgufError, match="declares 1000000000 layers .* but the file holds 11 tensors"):
        check_tensor_shapes(header(one_layer_llama(), block_count=10**9), PATH)


def test_the_generic_bound_of_another_architecture():
    model = declared_model(header([], "gpt2", context_length=64), PATH)
    largest, most = generic_bound(model)
    assert largest == max(8 * 4, 10, 64, 2 * 16) and most == largest * 16
    fine = [record("token_embd.weight", (8, 10)), record("position_embd.weight", (8, 64))]
    check_tensor_shapes(header(fine, "gpt2", context_length=64), PATH)
    with pytest.raises(GgufError, match="position_embd.weight .* larger than any tensor of the declared gpt2 model"):
        check_tensor_shapes(header([record("position_embd.weight", (8, 65536))], "gpt2", context_length=64), PATH)


def test_extents_overlap_duplicates_and_trailing_bytes():
    tensors = [record("a", (8,), 0), record("b", (8,), 32)]
    check_extents(GgufHeader(3, tensors=tensors, data_start=64, file_size=64 + 64), PATH)
    with pytest.raises(GgufError, match="tensor b starts at 16, inside the previous tensor"):
        check_extents(GgufHeader(3, tensors=[record("a", (16,), 0), record("b", (8,), 16)], file_size=999), PATH, 16)
    with pytest.raises(GgufError, match="tensor a is declared twice"):
        check_extents(GgufHeader(3, tensors=[record("a", (8,), 0), record("a", (8,), 32)], file_size=999), PATH)
    with pytest.raises(GgufError, match=r"tensor b \(shape \[8\], 32 bytes\) runs past the end of the file \(120"):
        check_extents(GgufHeader(3, tensors=tensors, data_start=64, file_size=120), PATH)
    with pytest.raises(GgufError, match="1 bytes follow the last tensor"):
        check_extents(GgufHeader(3, tensors=tensors, data_start=64, file_size=129), PATH)
