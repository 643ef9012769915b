"""The one door to private attributes: each works on the installed versions, and a missing one says which
attribute, which installed version and which versions are supported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.strategies import ModelParallelStrategy
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from transformers import GPT2Config, GPT2LMHeadModel

from comlrl_lightning.runtime import compat
from comlrl_lightning.runtime.compat import SUPPORTED, UnsupportedVersion, installed_version

ROOT = Path(__file__).resolve().parents[2]


def tiny_gpt2() -> GPT2LMHeadModel:
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=8, n_head=2, vocab_size=16, n_positions=8))


def message(library: str, attribute: str) -> str:
    return (
        f"comlrl_lightning relies on {attribute} of {library}, which the installed {library} "
        f"{installed_version(library)} does not have; supported: {library}{SUPPORTED[library]} "
        f"(pip install '{library}{SUPPORTED[library]}')."
    )


def test_the_supported_ranges_hold_the_installed_versions_and_start_at_the_dependency_pins():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = (\[.*?\])$", pyproject, re.S | re.M).group(1)  # tomllib is Python 3.11+
    pins = {Requirement(line).name: Requirement(line).specifier for line in ast.literal_eval(block)}
    for library, supported in SUPPORTED.items():
        version = installed_version(library).split("+")[0]
        assert version in SpecifierSet(supported), (library, version, supported)
        lower = [s for s in SpecifierSet(supported) if s.operator == ">="]
        assert lower and [s for s in pins[library] if s.operator == ">="] == lower, (library, supported, pins[library])
        assert set(pins[library]) <= set(SpecifierSet(supported)), (library, supported, pins[library])  # caps agree
    assert pins["lightning"] == SpecifierSet(SUPPORTED["lightning"])  # capped at the minor CI runs


# ----------------------------------------------------------------------------------------------
# On the installed versions


def test_lightning_parts_read_on_the_installed_lightning(tmp_path):
    module = LightningModule()
    assert compat.attached_trainer(module) is None
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    module.trainer = trainer
    assert compat.attached_trainer(module) is trainer
    assert compat.epoch_batches_processed(trainer) == 0
    assert compat.epochs_processed(trainer) == 0
    assert compat.saves_distributed_checkpoint(ModelParallelStrategy()) is True
    assert compat.saves_distributed_checkpoint(ModelParallelStrategy(save_distributed_checkpoint=False)) is False
    assert compat.model_parallel_sizes(ModelParallelStrategy()) == ("auto", "auto")
    assert compat.model_parallel_sizes(ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)) == (2, 1)
    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert compat.wandb_run_started(logger) is False  # constructing the logger starts no run
    checkpoint = ModelCheckpoint(dirpath=tmp_path)
    assert compat.version_counter_enabled(checkpoint) is True
    compat.enable_version_counter(checkpoint, False)
    assert compat.version_counter_enabled(checkpoint) is False
    assert compat.version_counter_enabled(ModelCheckpoint(enable_version_counter=False)) is False


def test_transformers_parts_read_and_switch_on_the_installed_transformers():
    model = tiny_gpt2()
    config = model.config
    assert compat.switches_attention(config) and not compat.switches_attention(None)
    before = config._attn_implementation
    with compat.attention_implementation(config, "sdpa"):
        assert config._attn_implementation == "sdpa"
    assert config._attn_implementation == before
    assert compat.compiles_fullgraph(model)
    assert not compat.compiles_fullgraph(torch.nn.Linear(2, 2))
    assert compat.checkpointed_layers(model) == []
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = compat.checkpointed_layers(model)
    assert layers == [model.transformer, *model.transformer.h]  # every module with the flag on
    originals = [layer._gradient_checkpointing_func for layer in layers]
    with compat.checkpoint_functions_wrapped(layers, lambda function: ("wrapped", function)):
        assert [layer._gradient_checkpointing_func for layer in layers] == [("wrapped", f) for f in originals]
    assert [layer._gradient_checkpointing_func for layer in layers] == originals


def test_the_tensor_version_counter_counts_in_place_changes():
    tensor = torch.zeros(2)
    before = compat.version_counter(tensor)
    tensor.add_(1)
    assert compat.version_counter(tensor) == before + 1


# ----------------------------------------------------------------------------------------------
# After an upgrade that removed what they read


def test_a_lightning_without_the_attribute_is_named_with_the_supported_range():
    module = LightningModule()
    del module._trainer  # as a Lightning release that renamed it would leave it
    with pytest.raises(UnsupportedVersion, match=f"^{re.escape(message('lightning', 'LightningModule._trainer'))}$"):
        compat.attached_trainer(module)


def test_a_transformers_without_the_attribute_is_named_with_the_supported_range(monkeypatch):
    from transformers import PretrainedConfig

    model = tiny_gpt2()
    for owner in type(model).__mro__:
        if "_can_compile_fullgraph" in vars(owner):
            monkeypatch.delattr(owner, "_can_compile_fullgraph")
    with pytest.raises(
        UnsupportedVersion, match=re.escape(message("transformers", "GPT2LMHeadModel._can_compile_fullgraph"))
    ):
        compat.compiles_fullgraph(model)
    for owner in type(model.config).__mro__:
        if "_attn_implementation" in vars(owner):
            monkeypatch.delattr(owner, "_attn_implementation")
    assert isinstance(model.config, PretrainedConfig)
    with pytest.raises(UnsupportedVersion, match=re.escape("GPT2Config._attn_implementation of transformers")):
        compat.switches_attention(model.config)
    layer = model.transformer.h[0]
    layer.gradient_checkpointing = True  # switched on, but without the function it would call
    with pytest.raises(UnsupportedVersion, match=re.escape("GPT2Block._gradient_checkpointing_func of transformers")):
        compat.checkpointed_layers(model)


def test_peft_lora_parts_read_on_the_installed_peft():
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora.layer import Linear

    compat.check_peft_lora()
    model = get_peft_model(tiny_gpt2(), LoraConfig(r=2, target_modules=["c_attn"]), adapter_name="agent_0")
    layer = next(m for m in model.modules() if isinstance(m, Linear))
    lora_a, lora_b, dropout, scaling = compat.lora_parts(layer, "agent_0")
    assert (
        lora_a is layer.lora_A["agent_0"]
        and lora_b is layer.lora_B["agent_0"]
        and dropout is layer.lora_dropout["agent_0"]
    )
    assert scaling == layer.scaling["agent_0"] and compat.lora_parts(layer, "b") is None
    assert compat.lora_base_layer(layer) is layer.base_layer and compat.lora_plain(layer)
    assert compat.casts_lora_input(layer)
    assert compat.peft_tuner_classes()[3] is Linear


def test_a_peft_lora_layer_without_a_part_is_named_at_the_check(monkeypatch):
    from peft.tuners.lora.layer import LoraLayer

    monkeypatch.setattr(LoraLayer, "other_param_names", ("r", "lora_alpha", "lora_dropout"))
    with pytest.raises(UnsupportedVersion, match=re.escape("LoraLayer.other_param_names entry 'scaling' of peft")):
        compat.check_peft_lora()


class Bare:
    """An object of none of the libraries: every private read fails the same way."""


@pytest.mark.parametrize(
    "read, library, attribute",
    [
        (compat.saves_distributed_checkpoint, "lightning", "_save_distributed_checkpoint"),
        (compat.model_parallel_sizes, "lightning", "_data_parallel_size"),
        (compat.wandb_run_started, "lightning", "_experiment"),
        (compat.epoch_batches_processed, "lightning", "fit_loop"),
        (compat.epochs_processed, "lightning", "fit_loop"),
        (compat.version_counter_enabled, "lightning", "_enable_version_counter"),
        (lambda bare: compat.enable_version_counter(bare, False), "lightning", "_enable_version_counter"),
        (compat.version_counter, "torch", "_version"),
        (compat.lora_base_layer, "peft", "base_layer"),
        (compat.lora_plain, "peft", "merged"),
        (lambda bare: compat.lora_parts(bare, "agent_0"), "peft", "lora_A"),
    ],
)
def test_every_read_names_the_attribute_the_library_and_its_range(read, library, attribute):
    with pytest.raises(UnsupportedVersion, match=f"^{re.escape(message(library, f'Bare.{attribute}'))}$"):
        read(Bare())
