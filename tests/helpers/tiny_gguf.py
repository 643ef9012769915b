"""Tiny GGUF files written with the ``gguf`` package's ``GGUFWriter``: a 2-layer Llama of width 16
with a byte-level BPE tokenizer and a chat template (converts in a second), and files transformers
cannot read (an unsupported architecture, a cut-short copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_level_alphabet() -> List[str]:
    """The 256 characters GPT-2's byte-level BPE writes bytes 0..255 as (in byte order)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), 256))
    characters, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            characters.append(chr(byte))
        else:
            characters.append(chr(256 + shifted))
            shifted += 1
    return characters


def write_tiny_llama(
    path: Path, seed: int = 0, architecture: str = "llama", shapes: Optional[Dict[str, Tuple[int, ...]]] = None
) -> Path:
    """A tiny Llama GGUF at ``path`` (float32 tensors, tied embeddings, grouped-query attention);
    ``shapes`` gives tensors another shape (numpy order), adds tensors, or (an empty shape) leaves one out."""
    from gguf import GGUFWriter, TokenType

    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + byte_level_alphabet() + ["ab", "abc"]
    merges = ["a b", "ab c"]
    hidden, layers, heads, kv_heads, ffn = 16, 2, 2, 1, 32
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), architecture)
    writer.add_name("tiny-llama")
    writer.add_block_count(layers)
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([TokenType.CONTROL] * 3 + [TokenType.NORMAL] * (len(tokens) - 3))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    named: List[str] = []

    def tensor(name: str, *shape: int) -> None:
        named.append(name)
        shape = (shapes or {}).get(name, shape)
        if not shape:
            return
        values = rng.normal(0.0, 0.02, size=shape).astype(np.float32) if len(shape) > 1 else np.ones(shape, np.float32)
        writer.add_tensor(name, values)

    tensor("token_embd.weight", len(tokens), hidden)
    tensor("output_norm.weight", hidden)
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", hidden)
        tensor(f"blk.{i}.ffn_norm.weight", hidden)
        tensor(f"blk.{i}.attn_q.weight", hidden, hidden)
        tensor(f"blk.{i}.attn_k.weight", hidden // heads * kv_heads, hidden)
        tensor(f"blk.{i}.attn_v.weight", hidden // heads * kv_heads, hidden)
        tensor(f"blk.{i}.attn_output.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_up.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, ffn)
    for name, shape in (shapes or {}).items():
        if name not in named:
            tensor(name, *shape)  # a tensor the Llama of this file does not have
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
