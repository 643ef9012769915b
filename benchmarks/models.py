"""Build the benchmark models once: randomly initialised Llamas + a char tokenizer, saved to folders.

Both sides load exactly these folders with ``from_pretrained``, so they start from identical weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from common import MODELS


def build(root: Path, names=tuple(MODELS)) -> Dict[str, Dict]:
    """``root/<name>`` for each model (weights + tokenizer); returns ``{name: {"path", "parameters"}}``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from comlrl_lightning.defaults import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    eos = tokenizer.eos_token_id
    built = {}
    for name in names:
        folder = root / name
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            max_position_embeddings=512,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            **MODELS[name],
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        built[name] = {
            "path": str(folder),
            "parameters": sum(p.numel() for p in model.parameters()),
            "vocab_size": len(tokenizer),
        }
    return built
