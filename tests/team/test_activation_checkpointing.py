"""Enabling activation checkpointing: what transformers cannot checkpoint is refused by option name.

(The recomputation itself is tested where it matters: packed scoring, LoRA teams and training.)
"""

from __future__ import annotations

import pytest
from transformers import GPT2Config, GPT2LMHeadModel

from comlrl_lightning.team.activation_checkpointing import (
    enable_activation_checkpointing,
    is_checkpointing,
)


def test_every_n_layers_checkpoints_only_those_layers():
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=16, n_head=2, vocab_size=32, n_positions=16))
    assert not is_checkpointing(model)
    enable_activation_checkpointing(model, every_n_layers=2)
    assert is_checkpointing(model)
    assert [layer.gradient_checkpointing for layer in model.transformer.h] == [True, False, True, False]


def test_a_model_that_cannot_checkpoint_is_refused():
    class NoCheckpointing(GPT2LMHeadModel):
        supports_gradient_checkpointing = False

    model = NoCheckpointing(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16))
    with pytest.raises(
        ValueError, match="gradient_checkpointing: NoCheckpointing does not support activation checkpointing"
    ):
        enable_activation_checkpointing(model)
