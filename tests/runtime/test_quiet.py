"""Third-party noise is filtered by exact message only, and transformers' bars only around our loads."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import comlrl_lightning  # noqa: F401  (installs the import-time filters)
from comlrl_lightning.runtime.quiet import (
    LIGHTNING_RANK_ZERO_LOGGER,
    DropCommercialLoggerTip,
    expect_eval_mode_parts,
    transformers_bars_off,
)


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord(LIGHTNING_RANK_ZERO_LOGGER, logging.INFO, __file__, 1, message, None, None)


def test_only_the_commercial_logger_tip_is_dropped():
    drop = DropCommercialLoggerTip()
    assert not drop.filter(_record("💡 Tip: For seamless cloud logging, try installing [litlogger](https://x) ..."))
    assert drop.filter(_record("GPU available: False, used: False"))
    assert drop.filter(_record("💡 Tip: some other advice"))  # other tips are not ours to hide
    lightning_logger = logging.getLogger(LIGHTNING_RANK_ZERO_LOGGER)
    assert sum(isinstance(f, DropCommercialLoggerTip) for f in lightning_logger.filters) == 1


def test_transformers_bars_are_off_inside_and_restored_after_while_download_bars_stay():
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    with transformers_bars_off():
        assert not hf_logging.is_progress_bar_enabled()
        assert not hub_utils.are_progress_bars_disabled()  # a first download still shows its progress
    assert hf_logging.is_progress_bar_enabled() and not hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # a user's own choice survives too
    try:
        with transformers_bars_off():
            pass
        assert not hf_logging.is_progress_bar_enabled() and hub_utils.are_progress_bars_disabled()
    finally:
        hf_logging.enable_progress_bar()


def _eval_mode_warning() -> None:
    from lightning.pytorch.utilities.warnings import PossibleUserWarning

    warnings.warn("Found 34 module(s) in eval mode at the start of training. This may lead to ...", PossibleUserWarning)


def test_the_eval_mode_warning_is_filtered_only_for_a_module_with_eval_mode_parts():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expect_eval_mode_parts(torch.nn.Sequential(torch.nn.Linear(2, 2)).train())  # nothing in eval mode
        _eval_mode_warning()
        warnings.warn("Found 3 module(s) in eval mode, said someone else", UserWarning)
        assert len(caught) == 2
        expect_eval_mode_parts(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout().eval()))
        _eval_mode_warning()
        assert len(caught) == 2
        with pytest.warns(UserWarning, match="other"):
            warnings.warn("any other warning still shows", UserWarning)
