"""Keep third-party chatter that a user cannot act on out of a run's output, and nothing else.

* :func:`transformers_bars_off`: Hugging Face's per-file "Loading weights" / "Writing model shards"
  bars, only around this package's own model loads and saves (every agent, snapshot and embedded
  model would print two). Download bars of the hub stay: a first download can take minutes.
* :func:`expect_eval_mode_parts`: Lightning's warning about modules in eval mode at the start of
  training, for modules that keep parts in eval mode on purpose (MAGRPO/MARLHF: a frozen reward
  model or reference copy, and critics left in eval mode as the reference leaves them); filtered
  by its text once such a module starts fitting, so it stays off for the rest of the process.
* :func:`install_noise_filters` (run when the package is imported): two exact messages of
  Lightning that are no fault of the run, each matched by its text:

  - the "💡 Tip" that advertises a commercial logger, printed by every ``Trainer`` that has no
    ``LitLogger`` (Lightning offers no switch for it);
  - the ``FutureWarning`` that newer torch raises inside Lightning's own ``_pytree`` helper
    (``isinstance(treespec, LeafSpec)`` is deprecated): Lightning's code, not the user's.

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
COMMERCIAL_LOGGER_TIP = re.compile(r"^💡 Tip: .*\blitlogger\b", re.DOTALL)
PYTREE_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
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


class DropCommercialLoggerTip(logging.Filter):
    """Drops Lightning's "💡 Tip: ... litlogger ..." record; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not COMMERCIAL_LOGGER_TIP.search(record.getMessage())


def install_noise_filters() -> None:
    """Add the two filters described in the module docstring (once; repeated calls change nothing)."""
    logger = logging.getLogger(LIGHTNING_RANK_ZERO_LOGGER)
    if not any(isinstance(existing, DropCommercialLoggerTip) for existing in logger.filters):
        logger.addFilter(DropCommercialLoggerTip())
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


__all__ = ["transformers_bars_off", "install_noise_filters", "expect_eval_mode_parts", "DropCommercialLoggerTip"]
