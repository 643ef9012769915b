"""Hyperparameters of a module made from Python are plain values, as a config file would say them."""

from __future__ import annotations

import io

import torch
from lightning.pytorch.cli import instantiate_module
from peft import LoraConfig

from comlrl_lightning import (
    GenerationSettings,
    MARLHFModule,
    MemoryOptions,
    ReferenceKL,
    RewardModelFit,
    TeamOptions,
)
from comlrl_lightning.runtime.hparams import OBJECT, plain
from comlrl_lightning.team.loading import load_tokenizer


def test_option_objects_are_stored_as_mappings_and_a_peft_config_as_class_path_and_init_args():
    lora = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn"])
    team = TeamOptions(lora=lora, tokenizers=load_tokenizer("embedded"), memory=MemoryOptions(fused_lm_head=False))
    module = MARLHFModule(
        team=team,
        sampling=GenerationSettings(max_new_tokens=6),
        reference_kl=ReferenceKL(coef=0.05),
        reward_model=RewardModelFit(learning_rate=1e-3),
    )
    hparams = dict(module.hparams)
    assert hparams["sampling"] == {"max_new_tokens": 6, "temperature": 0.6, "top_p": 0.6, "top_k": 50, "extra": None}
    assert hparams["reference_kl"] == {"coef": 0.05, "devices": None}
    assert hparams["reward_model"]["learning_rate"] == 1e-3
    assert "tokenizers" not in hparams["team"]  # an object no config can hold
    assert hparams["team"]["memory"] == {
        "gradient_checkpointing": False,
        "checkpoint_every_n_layers": 1,
        "fused_lm_head": False,
        "hold_agent_graphs": False,
    }
    saved_lora = hparams["team"]["lora"]
    assert saved_lora["class_path"].endswith("LoraConfig") and saved_lora["init_args"]["target_modules"] == ["c_attn"]
    assert saved_lora["init_args"]["peft_type"] == "LORA"  # an enum by its value
    # a checkpoint's hyperparameters load without unpickling objects
    buffer = io.BytesIO()
    torch.save({"hyper_parameters": hparams}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["hyper_parameters"] == hparams
    # and they are a config: the command line's parser makes the same options from them
    hparams["team"].pop("lora")  # (peft's fields a parser fills in are checked in tests/test_cli.py)
    again = instantiate_module(MARLHFModule, hparams)
    assert again.generation_settings == module.generation_settings and again.reference_kl == module.reference_kl
    assert again.reward_options == module.reward_options
    assert again.team_options.memory == module.team_options.memory


def test_plain_leaves_out_what_is_an_object_and_keeps_the_rest():
    model = torch.nn.Linear(2, 2)
    assert plain({"a": [1, "x", None], "b": model, "c": {"d": {3, 1, 2}}}) == {
        "a": [1, "x", None],
        "c": {"d": [1, 2, 3]},
    }
    assert plain([1, model]) is OBJECT and plain(model) is OBJECT
    assert "agents" not in plain(TeamOptions(agents=[model])) and plain(TeamOptions())["agents"] is None


def test_builtin_values_turn_int_subclasses_into_ints_and_objects_into_the_marker():
    from jsonargparse.typing import PositiveInt

    from comlrl_lightning.runtime.hparams import builtin_values

    converted = builtin_values({"n": PositiveInt(3), "l": [1.5, "x", None, True]})
    assert converted == {"n": 3, "l": [1.5, "x", None, True]} and type(converted["n"]) is int
    assert builtin_values({"processor": torch.nn.Identity()}) is OBJECT
