"""The embedded default: a tiny causal LM, a character tokenizer and a toy cooperative task.

Nothing here downloads anything. The model and tokenizer are built deterministically from a seed,
written with ``save_pretrained`` into a cache folder and then loaded back through
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``, so the default run
exercises exactly the loading path a real hub id or local checkpoint takes.

The toy task ("vowels and lengths") needs both agents: agent 0 (the *writer*) is rewarded for
writing vowels, and the team is penalised when agent 1 (the *matcher*) writes a reply of a
different length. The reward is continuous in ``[-1, 1]`` and rarely tied.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch

from comlrl_lightning.runtime.paths import make_folder
from comlrl_lightning.runtime.quiet import transformers_bars_off

EMBEDDED = "embedded"
"""Model id / dataset name that selects the embedded default."""

CHARACTERS = list("abcdefghijklmnopqrstuvwxyz0123456789 .,:;!?'-\n")
SPECIAL_TOKENS = ["<eos>", "<unk>"]
VOWELS = set("aeiou")
_EMBEDDED_VERSION = "v3"  # v3: 2 heads of 32 (v2: 4 of 16, the same weights); v2: 512 positions (v1 had 256)


def build_char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` (no pad token: the Team sets pad := eos)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>")


def build_tiny_model(vocab_size: int, eos_token_id: int, seed: int = 0, n_layer: int = 2, n_embd: int = 64):
    """A randomly initialised GPT-2 (2 layers, 64 wide, 2 heads of 32, 512 positions, ~0.14M parameters),
    deterministic in ``seed``.

    Two heads of 32 rather than four of 16: vLLM's CPU attention runs head sizes from 32 up, so the
    embedded default samples with :class:`~comlrl_lightning.generation.VLLMGenerator` too. The head
    count does not change a GPT-2's weight shapes: the weights are those the seed drew for 4 heads.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=256,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
        resid_pdrop=0.0,  # no dropout: scoring is deterministic, so gradients are reproducible
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    # 512 positions, so the seed's default max_new_tokens=256 fits after a prompt. The first 256
    # position rows (and every other weight) are those of the 256-position model drawn above, so
    # everything shorter than 256 tokens behaves exactly as before; the new rows have their own stream.
    extra = torch.empty(256, n_embd).normal_(
        0.0, config.initializer_range, generator=torch.Generator().manual_seed(seed + 1)
    )
    model.transformer.wpe.weight = torch.nn.Parameter(torch.cat([model.transformer.wpe.weight.data, extra]))
    model.transformer.wpe.num_embeddings = 512
    model.config.n_positions = 512
    return model


CACHE_VARIABLE = "COMLRL_LIGHTNING_CACHE"
"""The variable naming the cache root (default ``~/.cache/comlrl_lightning``): the embedded model and
converted GGUF files live there."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder the library caches models in: ``cache_dir``, else ``$COMLRL_LIGHTNING_CACHE``, else
    ``~/.cache/comlrl_lightning``."""
    return Path(cache_dir or os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "comlrl_lightning")


def cache_root_option(cache_dir: str | os.PathLike | None = None) -> str:
    """What chose :func:`cache_root`'s folder, as an error names it: ``cache_dir``, the variable, or the default."""
    return (
        "cache_dir" if cache_dir else CACHE_VARIABLE if os.environ.get(CACHE_VARIABLE) else "the default cache folder"
    )


def embedded_model_path(seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding the embedded model and tokenizer, built (atomically) on first use."""
    root = cache_root(cache_dir)
    target = root / f"embedded-{_EMBEDDED_VERSION}-seed{seed}"
    if _complete(target):
        return target
    make_folder(root, cache_root_option(cache_dir))
    staging = Path(tempfile.mkdtemp(prefix=".embedded-", dir=root))
    try:
        tokenizer = build_char_tokenizer()
        model = build_tiny_model(len(tokenizer), tokenizer.eos_token_id, seed=seed)
        with transformers_bars_off():
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        # Inside a torch.distributed job save_pretrained writes nothing on ranks other than 0:
        # such a rank waits for rank 0's copy instead of publishing an incomplete folder.
        if _complete(staging):
            try:
                os.replace(staging, target)
            except OSError:  # another process finished first: its copy is identical
                pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    deadline = time.monotonic() + 600
    while not _complete(target):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the embedded model was not written to {target}")
        time.sleep(0.1)
    return target


def _complete(folder: Path) -> bool:
    return all((folder / name).exists() for name in ("config.json", "model.safetensors", "tokenizer.json"))


# --------------------------------------------------------------------------------------------
# The toy task


def toy_items(num_items: int = 16, seed: int = 0) -> List[Dict[str, str]]:
    """Task items ``{"prompt": <topic word>}`` drawn deterministically from ``seed``."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [{"prompt": "".join(rng.choice(letters) for _ in range(rng.randint(3, 6)))} for _ in range(num_items)]


TOY_TRAIN_SEED = 0
TOY_EVAL_SEED = 1
WRITER_TEMPLATE = "topic: {prompt}\nwriter:"
MATCHER_TEMPLATE = "topic: {prompt}\nmatcher:"


def vowel_fraction(text: str) -> float:
    """Share of characters in ``text`` that are vowels (0 for empty text)."""
    return sum(ch in VOWELS for ch in text) / len(text) if text else 0.0


def vowel_length_reward(writer: List[str], matcher: List[str]) -> List[float]:
    """Joint reward of the toy task, one value per joint response.

    ``r = vowel_fraction(writer) - |len(writer) - len(matcher)| / max(len(writer), len(matcher), 1)``,
    in ``[-1, 1]``: the writer should use vowels, and the matcher should write as much as the writer.
    """
    rewards = []
    for w, m in zip(writer, matcher):
        length_gap = abs(len(w) - len(m)) / max(len(w), len(m), 1)
        rewards.append(vowel_fraction(w) - length_gap)
    return rewards


vowel_length_reward.reward_range = (-1.0, 1.0)  # type: ignore[attr-defined]
