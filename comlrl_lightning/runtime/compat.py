"""The one door to the private parts of Lightning, transformers and torch this package relies on.

A few things the package needs are not public API: a Lightning module's trainer before it is
attached, the fit loop's batch and epoch counters, a ``ModelCheckpoint``'s version suffixes,
the CSV writer's hook that deletes an existing log, a sharded strategy's configured mesh sizes and whether it
writes distributed checkpoints, whether a W&B logger started its run, transformers' attention switch and checkpoint function,
peft's LoRA layer internals (its base layer, adapters, dropouts, scalings, variants; read by the one-pass routing),
torch's tensor version counter. Each is read or written here and nowhere else
(``tests/test_structure.py`` fails on a private access anywhere else in the package). Every
function checks that what it touches exists and otherwise raises :class:`UnsupportedVersion`,
naming the attribute, the installed version and the supported range (:data:`SUPPORTED`), so an
upgrade that moves one of them breaks loudly, here, instead of quietly changing behaviour.
Lightning, transformers and torch are imported where a function needs them.
"""

from __future__ import annotations

import contextlib
from importlib import metadata
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

if TYPE_CHECKING:
    import torch
    from lightning.pytorch import LightningModule, Trainer
    from torch import nn

SUPPORTED: Dict[str, str] = {
    "lightning": ">=2.6.6,<2.7",
    "transformers": ">=5.19,<6",
    "torch": ">=2.11,<3",
    "peft": ">=0.21.2",
    "jsonargparse": ">=4.32",
}
"""The versions whose private parts this module knows (tested with lightning 2.6.6, transformers
5.25.0 (5.19.0 in the vLLM stage), torch 2.13.0, peft 0.21.2, the versions CI installs); the lower bounds are the package's dependency pins."""


class UnsupportedVersion(RuntimeError):
    """An installed library lacks a private attribute this package relies on: not a supported version."""


def installed_version(library: str) -> str:
    """The installed version of ``library`` (``"not installed"`` without one)."""
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return "not installed"


def unsupported(library: str, what: str) -> UnsupportedVersion:
    """The error for ``what`` (e.g. ``"LightningModule._trainer"``) missing from the installed ``library``."""
    return UnsupportedVersion(
        f"comlrl_lightning relies on {what} of {library}, which the installed {library} "
        f"{installed_version(library)} does not have; supported: {library}{SUPPORTED[library]} "
        f"(pip install '{library}{SUPPORTED[library]}')."
    )


def private(obj: Any, name: str, library: str) -> Any:
    """``obj.<name>``, or :class:`UnsupportedVersion` naming ``type(obj).<name>`` when ``library`` has none."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise unsupported(library, f"{type(obj).__name__}.{name}") from None


# ----------------------------------------------------------------------------------------------
# Lightning


def attached_trainer(module: "LightningModule") -> Optional["Trainer"]:
    """The trainer ``module`` is attached to, or ``None`` (``module.trainer`` raises when there is none)."""
    return private(module, "_trainer", "lightning")


def initial_hyperparameters(owner: Any) -> Dict[str, Any]:
    """The hyperparameters Lightning's loggers write (``hparams.yaml``): ``owner._hparams_initial``,
    which ``save_hyperparameters`` sets (the public ``hparams_initial`` is a copy)."""
    return private(owner, "_hparams_initial", "lightning")


def epoch_batches_processed(trainer: "Trainer") -> int:
    """Training batches the fit loop has processed in the current epoch (counted on resume too)."""
    loop = private(private(trainer, "fit_loop", "lightning"), "epoch_loop", "lightning")
    return private(private(loop, "batch_progress", "lightning"), "current", "lightning").processed


def epochs_processed(trainer: "Trainer") -> int:
    """Training epochs the fit loop has finished (already counted inside the epoch-end hooks)."""
    loop = private(private(trainer, "fit_loop", "lightning"), "epoch_progress", "lightning")
    return private(loop, "current", "lightning").processed


def saves_distributed_checkpoint(strategy: Any) -> bool:
    """Whether a ``ModelParallelStrategy`` writes a checkpoint folder of shards (its ``save_distributed_checkpoint``)."""
    return bool(private(strategy, "_save_distributed_checkpoint", "lightning"))


def model_parallel_sizes(strategy: Any) -> Tuple[Union[int, str], Union[int, str]]:
    """A ``ModelParallelStrategy``'s configured ``(data_parallel_size, tensor_parallel_size)``, each an
    int or ``"auto"`` (resolved only once the strategy sets up its mesh)."""
    return (
        private(strategy, "_data_parallel_size", "lightning"),
        private(strategy, "_tensor_parallel_size", "lightning"),
    )


def wandb_run_started(logger: Any) -> bool:
    """Whether a ``WandbLogger`` has started its run (``logger.experiment`` would start one)."""
    return private(logger, "_experiment", "lightning") is not None


def version_counter_enabled(callback: Any) -> bool:
    """Whether a ``ModelCheckpoint`` adds ``-vN`` to a name it finds taken (its ``enable_version_counter``)."""
    return bool(private(callback, "_enable_version_counter", "lightning"))


def enable_version_counter(callback: Any, enabled: bool) -> None:
    """Switch a ``ModelCheckpoint``'s ``-vN`` suffixes on or off after it was built (a resumed run
    writes its own file names again)."""
    private(callback, "_enable_version_counter", "lightning")
    callback._enable_version_counter = enabled


def wandb_run_active(logger: Any) -> bool:
    """Whether a ``WandbLogger``'s run is started and not finished (``wandb.run`` is it)."""
    import wandb

    run = private(logger, "_experiment", "lightning")
    return run is not None and wandb.run is run


# ----------------------------------------------------------------------------------------------
# transformers


def switches_attention(config: Any) -> bool:
    """Whether ``config`` is a transformers config whose attention implementation can be switched per call."""
    from transformers import PretrainedConfig

    if not isinstance(config, PretrainedConfig):
        return False
    private(config, "_attn_implementation", "transformers")
    return True


def current_attention(config: Any) -> str:
    """The attention implementation models of ``config`` attend with now (``sdpa``, ``eager``...)."""
    return private(config, "_attn_implementation", "transformers")


@contextlib.contextmanager
def attention_implementation(config: Any, name: str) -> Iterator[None]:
    """Within this block, models of ``config`` attend with the registered implementation ``name``."""
    previous = private(config, "_attn_implementation", "transformers")
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def checkpointed_layers(model: "nn.Module") -> List["nn.Module"]:
    """The layers of ``model`` that recompute their forward in backward through a checkpoint function.

    transformers gives every module with a ``gradient_checkpointing`` flag the function; its
    ``GradientCheckpointingLayer`` must have it once the flag is on.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = []
    for module in model.modules():
        if not getattr(module, "gradient_checkpointing", False):
            continue
        if isinstance(module, GradientCheckpointingLayer):
            private(module, "_gradient_checkpointing_func", "transformers")
        elif not hasattr(module, "_gradient_checkpointing_func"):
            continue
        layers.append(module)
    return layers


@contextlib.contextmanager
def checkpoint_functions_wrapped(layers: List["nn.Module"], wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """Within this block, each layer's checkpoint function ``f`` is ``wrap(f)``; restored afterwards."""
    own = [layer.__dict__.get("_gradient_checkpointing_func") for layer in layers]  # None: the class's own
    for layer in layers:
        wrapped = wrap(private(layer, "_gradient_checkpointing_func", "transformers"))
        layer._gradient_checkpointing_func = wrapped  # type: ignore[assignment]  # torch types Module attributes as Tensor | Module
    try:
        yield
    finally:
        for layer, original in zip(layers, own):
            if original is None:
                del layer._gradient_checkpointing_func
            else:
                layer._gradient_checkpointing_func = original


def compiles_fullgraph(model: "nn.Module") -> bool:
    """Whether transformers marks ``model`` as compilable whole (so a ``StaticCache`` fits it);
    ``False`` for models that are not transformers models."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        return False
    return bool(private(model, "_can_compile_fullgraph", "transformers"))


# ----------------------------------------------------------------------------------------------
# peft

LORA_ADAPTER_PARTS: Tuple[str, ...] = ("lora_A", "lora_B")
"""A peft LoRA layer's per-adapter module dicts the one-pass routing reads (``LoraLayer.adapter_layer_names``)."""
LORA_ADAPTER_VALUES: Tuple[str, ...] = ("scaling", "lora_dropout")
"""Its per-adapter values and dropouts (``LoraLayer.other_param_names``)."""


def check_peft_lora() -> None:
    """Check that the installed peft's LoRA layer still declares what :func:`lora_parts` reads and
    that its tuner classes are where :func:`peft_tuner_classes` imports them; called when the
    one-pass routing is imported, so a peft that moved one of them fails there, naming it."""
    try:
        from peft.tuners.lora.layer import LoraLayer
    except ImportError:
        raise unsupported("peft", "peft.tuners.lora.layer.LoraLayer") from None
    peft_tuner_classes()
    declared = {
        "adapter_layer_names": LORA_ADAPTER_PARTS,
        "other_param_names": LORA_ADAPTER_VALUES,
    }
    for listing, names in declared.items():
        present = private(LoraLayer, listing, "peft")
        for name in names:
            if name not in present:
                raise unsupported("peft", f"LoraLayer.{listing} entry {name!r}")


def peft_tuner_classes() -> Tuple[type, type, type, type]:
    """peft's ``(BaseTunerLayer, AuxiliaryTrainingWrapper, LoraLayer, lora Linear)`` classes."""
    try:
        from peft.tuners.lora.layer import Linear, LoraLayer
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError as error:
        raise unsupported("peft", f"the tuner class {error.name or error}") from None
    return BaseTunerLayer, AuxiliaryTrainingWrapper, LoraLayer, Linear


def lora_parts(layer: "nn.Module", adapter: str) -> Optional[Tuple[Any, Any, Any, Any]]:
    """Adapter ``adapter``'s ``(lora_A, lora_B, lora_dropout, scaling)`` in the peft LoRA layer
    ``layer``, or ``None`` when the layer has no such adapter."""
    lora_a = private(layer, "lora_A", "peft")
    if adapter not in lora_a:
        return None
    return (
        lora_a[adapter],
        private(layer, "lora_B", "peft")[adapter],
        private(layer, "lora_dropout", "peft")[adapter],
        private(layer, "scaling", "peft")[adapter],
    )


def lora_base_layer(layer: "nn.Module") -> "nn.Module":
    """The layer a peft LoRA layer wraps (its ``base_layer``)."""
    return private(layer, "base_layer", "peft")


def lora_plain(layer: "nn.Module") -> bool:
    """Whether a peft LoRA layer is plain LoRA: not merged into its base, no variant (DoRA...)."""
    return not private(layer, "merged", "peft") and not private(layer, "lora_variant", "peft")


def casts_lora_input(layer: "nn.Module") -> bool:
    """Whether a peft LoRA layer casts its input to the adapter's dtype (its ``cast_input_dtype_enabled``,
    switched off inside ``peft.helpers.disable_input_dtype_casting``; older peft: always)."""
    return bool(getattr(layer, "cast_input_dtype_enabled", True))


# ----------------------------------------------------------------------------------------------
# jsonargparse (and argparse under it)


def parser_actions(parser: Any) -> List[Any]:
    """An argparse (jsonargparse) parser's actions, its options' definitions (``_actions``)."""
    return list(private(parser, "_actions", "jsonargparse"))


def subcommand_parsers(parser: Any) -> Dict[str, Any]:
    """A jsonargparse parser's subcommands and their parsers (``_subcommands_action._name_parser_map``);
    empty for a parser without subcommands."""
    action = private(parser, "_subcommands_action", "jsonargparse")
    return dict(private(action, "_name_parser_map", "jsonargparse")) if action is not None else {}


# ----------------------------------------------------------------------------------------------
# torch


def version_counter(tensor: "torch.Tensor") -> int:
    """``tensor``'s version counter: bumped by every in-place change (``copy_``, an optimizer step)."""
    return private(tensor, "_version", "torch")


__all__ = [
    "SUPPORTED",
    "UnsupportedVersion",
    "attached_trainer",
    "attention_implementation",
    "casts_lora_input",
    "check_peft_lora",
    "current_attention",
    "checkpoint_functions_wrapped",
    "checkpointed_layers",
    "compiles_fullgraph",
    "epoch_batches_processed",
    "initial_hyperparameters",
    "installed_version",
    "lora_base_layer",
    "lora_parts",
    "lora_plain",
    "parser_actions",
    "subcommand_parsers",
    "model_parallel_sizes",
    "peft_tuner_classes",
    "private",
    "saves_distributed_checkpoint",
    "switches_attention",
    "unsupported",
    "version_counter",
]
