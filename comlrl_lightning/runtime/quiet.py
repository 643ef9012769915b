"""Keep third-party chatter that a user cannot act on out of a run's output, and nothing else.

* :func:`transformers_bars_off`: Hugging Face's per-file "Loading weights" / "Writing model shards"
  bars, only around this package's own model loads and saves (every agent, snapshot and embedded
  model would print two). Download bars of the hub stay: a first download can take minutes.
* :func:`gguf_bar_off_in_logs`: transformers' "Converting and de-quantizing GGUF tensors" bar (plain
  tqdm, out of reach of transformers' own switch) where standard error renders no bar: in a log file
  it is one carriage-return redraw per tensor. A terminal keeps it (a real model takes a while).
* :func:`expect_eval_mode_parts`: Lightning's warning about modules in eval mode at the start of
  training, for modules that keep parts in eval mode on purpose (MAGRPO/MARLHF: a frozen reward
  model or reference copy, and critics left in eval mode as the reference leaves them); filtered
  by its text once such a module starts fitting, so it stays off for the rest of the process.
* :func:`install_noise_filters` (run by the entry points that own the process: the
  ``comlrl-lightning`` command and the seed API's trainers, never by an import, so a script that
  imports the package keeps its warning filters and loggers as it set them): exact messages of
  Lightning that are no fault of the run, each matched by its text:

  - the "💡 Tip"s that advertise a commercial logger or model registry, printed by every ``Trainer``
    that has no ``LitLogger`` or uses ``ModelCheckpoint`` (Lightning offers no switch for them);
  - the ``FutureWarning`` that newer torch raises inside Lightning's own ``_pytree`` helper
    (``isinstance(treespec, LeafSpec)`` is deprecated): Lightning's code, not the user's.

* :func:`peft_wrapping_quiet`: transformers' ``FutureWarning`` that ``is_gradient_checkpointing`` is
  deprecated, which peft's ``PeftModel`` raises by reading that property while it wraps a model
  (peft's code, not the user's; every LoRA team printed it), around this package's own wrapping only.
* :class:`ResumeLines`: Lightning's two lines around a resume ("Restoring states from the
  checkpoint path at ...", "Restored all states from the checkpoint at ..."), while a callback that
  prints one line of its own instead (:class:`~comlrl_lightning.callbacks.CheckpointRecord`) is
  part of a running trainer; and the warning that a checkpoint holds the state of a
  ``ModelCheckpoint`` (or subclass) the trainer does not have, when that is all it says (a resumed run may change
  its checkpoint options: the new callback starts its own bookkeeping).

Every other warning and log record passes unchanged; errors are never touched.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from typing import Iterator

from torch import nn

LIGHTNING_RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
COMMERCIAL_LOGGER_TIP = re.compile(r"^💡 Tip: .*\b(litlogger|litmodels)\b", re.DOTALL)
RESUME_LINES = re.compile(
    r"^(Restoring states from the checkpoint path at |Restored all states from the checkpoint at )"
)
ONLY_MODEL_CHECKPOINT_STATES = (
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided "
    r"during `Trainer` instantiation\. Please add the following callbacks: "
    r"\[(\"\w*Checkpoint\{[^\]\"]*\}\"(, )?)+\]\.$"
)
PYTREE_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
GRADIENT_CHECKPOINTING_RENAME = r"`is_gradient_checkpointing` is deprecated"
EVAL_MODE_AT_START = r"Found \d+ module\(s\) in eval mode at the start of training"


@contextlib.contextmanager
def transformers_bars_off() -> Iterator[None]:
    """Turn off transformers' own progress bars for the block, then restore what was set.

    ``transformers.utils.logging.disable_progress_bar`` also turns off the hub's download bars,
    so those are switched back on for the block when they were on.
    """
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hub_bars_were_on = not hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    if hub_bars_were_on:
        hub_utils.enable_progress_bars()
    try:
        yield
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
        if not hub_bars_were_on:
            hub_utils.disable_progress_bars()


@contextlib.contextmanager
def gguf_bar_off_in_logs() -> Iterator[None]:
    """No de-quantising bar from transformers' GGUF reader for the block unless standard error
    renders bars (:func:`~comlrl_lightning.runtime.progress.renders_live`)."""
    import functools
    import sys

    from transformers import modeling_gguf_pytorch_utils as gguf_reader

    from comlrl_lightning.runtime.progress import renders_live

    original = gguf_reader.tqdm
    if not renders_live(sys.stderr):
        gguf_reader.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_reader.tqdm = original


@contextlib.contextmanager
def peft_wrapping_quiet() -> Iterator[None]:
    """Filter transformers' ``is_gradient_checkpointing`` deprecation (raised inside its
    ``modeling_utils``) for the block: peft reads the old name while it wraps a model."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=GRADIENT_CHECKPOINTING_RENAME,
            category=FutureWarning,
            module=r"transformers\.modeling_utils",
        )
        yield


class DropCommercialLoggerTip(logging.Filter):
    """Drops Lightning's "💡 Tip: ... litlogger ..." record; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not COMMERCIAL_LOGGER_TIP.search(record.getMessage())


class ResumeLines(logging.Filter):
    """Drops Lightning's resume lines while :attr:`replaced` counts running trainers whose callback
    prints its own; passes every other record."""

    replaced = 0

    def filter(self, record: logging.LogRecord) -> bool:
        return not (ResumeLines.replaced > 0 and RESUME_LINES.search(record.getMessage()))


def install_noise_filters() -> None:
    """Add the filters described in the module docstring (once; repeated calls change nothing)."""
    logger = logging.getLogger(LIGHTNING_RANK_ZERO_LOGGER)
    for kind in (DropCommercialLoggerTip, ResumeLines):
        if not any(isinstance(existing, kind) for existing in logger.filters):
            logger.addFilter(kind())
    warnings.filterwarnings("ignore", message=ONLY_MODEL_CHECKPOINT_STATES)
    # filterwarnings moves an identical filter to the front instead of adding a second one
    warnings.filterwarnings(
        "ignore", message=PYTREE_DEPRECATION, category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree"
    )


def expect_eval_mode_parts(module: nn.Module) -> None:
    """Filter Lightning's "module(s) in eval mode at the start of training" warning (by its text)
    when ``module``, which keeps parts in eval mode on purpose, has any; nothing otherwise."""
    if any(not part.training for part in module.modules()):
        from lightning.pytorch.utilities.warnings import PossibleUserWarning

        warnings.filterwarnings("ignore", message=EVAL_MODE_AT_START, category=PossibleUserWarning)


__all__ = [
    "DropCommercialLoggerTip",
    "ResumeLines",
    "expect_eval_mode_parts",
    "gguf_bar_off_in_logs",
    "install_noise_filters",
    "peft_wrapping_quiet",
    "transformers_bars_off",
]
