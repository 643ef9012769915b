"""Where a team's models and tokenizers come from: a hub id, a local path, ``"embedded"``, or objects.

Also the one prompt encoding every sampler and every re-tokenized round-file record uses.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union, cast

import torch
from torch import nn

from comlrl_lightning.defaults import EMBEDDED, embedded_model_path
from comlrl_lightning.errors import ConfigurationError, MissingPathError
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.runtime.quiet import transformers_bars_off
from comlrl_lightning.team.gguf import gguf_folder, is_gguf
from comlrl_lightning.team.offline_models import is_offline_model, offline_model_file

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ModelSource = Union[str, nn.Module]
"""A model given by hub id, local path (a folder or a ``.gguf`` file), ``"embedded"``, an offline
model's name (``smollm2-135m-instruct``), or a model object (used as it is)."""


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def resolve_source(source: str) -> str:
    """Map the embedded default's id to its local folder, a ``.gguf`` file and an offline model's name
    (``smollm2-135m-instruct``) to their converted folder; hub ids and local folders pass through.

    A URL or an fsspec chain (``https://...``, ``hf://...``, ``simplecache::...``) is refused: a
    model is a hub id or a local folder. A source written as a path (absolute, ``./``, ``../``,
    ``~``, or more than one ``/``, which no hub id has) must exist: a missing one is an error saying
    so, not a hub lookup's complaint; anything else must be a hub id (``org/name``) or an existing path.
    """
    if source == EMBEDDED:
        return str(embedded_model_path())
    if is_offline_model(source):
        return str(gguf_folder(offline_model_file(source)))
    text = require_local(source, "model source", "a local folder or a hub id (org/name)")
    path = os.path.expanduser(text)
    if is_gguf(text):
        return str(gguf_folder(path))
    if text.startswith(("/", "./", "../", "~")) or text.count("/") > 1:
        if not os.path.exists(path):
            raise MissingPathError(f"model path {text} does not exist.")
        return path
    if not os.path.exists(path) and not _HUB_ID.fullmatch(text):
        raise ConfigurationError(f"model source {text!r} is neither an existing local path nor a hub id (org/name).")
    return text


def check_dtype(dtype: Optional[str], option: str = "dtype") -> None:
    """A model dtype option: ``None`` (as saved) or the name of a floating torch dtype
    (``float32``, ``bfloat16``, ``float16``...); anything else is an error naming ``option``."""
    if dtype is None:
        return
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else None
    if not (isinstance(value, torch.dtype) and value.is_floating_point):
        raise ConfigurationError(
            f"{option} must name a floating torch dtype (float32, bfloat16, float16...; unset: as saved), "
            f"not {dtype!r}."
        )


def check_attention(name: Optional[str], option: str = "attn_implementation") -> None:
    """An attention option: ``None`` (transformers' choice), ``eager``, one registered with
    transformers' ``AttentionInterface`` (``sdpa``, ``flash_attention_2``, ``flex_attention``...;
    also ``paged|`` each), or a Hub kernel (``org/name``, checked by transformers when it loads);
    anything else is an error naming ``option``, before any model loads."""
    if name is None:
        return
    from transformers import AttentionInterface

    known = ["eager", *AttentionInterface().valid_keys()]
    plain = name.split("|", 1)[1] if isinstance(name, str) and name.startswith("paged|") else name
    if not isinstance(name, str) or not (plain in known or "/" in plain):
        raise ConfigurationError(
            f"{option} {name!r} is not an attention implementation transformers knows "
            f"(one of: {', '.join(sorted(k for k in set(known) if not k.startswith('comlrl_')))}; "
            "or a Hub kernel org/name)."
        )


def load_model(
    source: ModelSource, dtype: Optional[str] = None, attn_implementation: Optional[str] = None
) -> nn.Module:
    """A causal LM from a hub id, a local path, ``"embedded"``, or a model object (used as is);
    ``attn_implementation`` (``sdpa``, ``eager``, ``flash_attention_2``...; ``None``: transformers'
    choice) goes to ``from_pretrained``."""
    if isinstance(source, nn.Module):
        return source
    from transformers import AutoModelForCausalLM

    kwargs: Dict[str, Any] = {"dtype": getattr(torch, dtype)} if dtype else {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    with transformers_bars_off():  # no per-file bar for every agent, snapshot and critic loaded
        return AutoModelForCausalLM.from_pretrained(resolve_source(source), **kwargs)


def load_tokenizer(source: str):
    """A tokenizer with ``pad := eos`` when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_source(source))
    return prepare_tokenizer(tokenizer)


def add_special_tokens(tokenizers: Sequence[Any], special_tokens: Optional[Dict[str, Any]]) -> None:
    """``tokenizer.add_special_tokens(special_tokens)`` on each distinct tokenizer (the reference's
    ``model_config["special_tokens"]``; a token a tokenizer has already is not added again)."""
    if not special_tokens:
        return
    for tokenizer in {id(tokenizer): tokenizer for tokenizer in tokenizers}.values():
        tokenizer.add_special_tokens(dict(special_tokens))


def fit_embeddings(model: nn.Module, tokenizer: Any) -> None:
    """Grow ``model``'s token embeddings (and tied output head) to ``len(tokenizer)`` rows when the
    tokenizer has more tokens (added special tokens): their ids must index a row. The reference
    (CoMLRL) does not resize, so a sampled or encoded new token would index past the table."""
    causal_lm = cast("PreTrainedModel", model)  # a transformers model (or one of its API)
    embeddings = cast(Optional[nn.Embedding], causal_lm.get_input_embeddings())  # transformers: a Module
    if embeddings is not None and embeddings.num_embeddings < len(tokenizer):
        causal_lm.resize_token_embeddings(len(tokenizer))


def encode_prompt(tokenizer, prompt: str) -> List[int]:
    """A prompt's token ids: with the tokenizer's special tokens, unless the text already starts with
    its BOS token (a rendered chat template usually does, and a second BOS would change the model's
    input). Sampling and re-tokenized round-file records both use it, so they get the same ids."""
    bos = getattr(tokenizer, "bos_token", None)
    starts_with_bos = isinstance(bos, str) and bool(bos) and prompt.startswith(bos)
    return tokenizer(prompt, add_special_tokens=not starts_with_bos)["input_ids"]


def prepare_tokenizer(tokenizer):
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ConfigurationError("Tokenizer must expose pad_token_id (it has neither a pad nor an eos token).")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
