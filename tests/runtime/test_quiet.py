"""Third-party noise is filtered by exact message only, and transformers' bars only around our loads."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from comlrl_lightning.runtime.quiet import (
    LIGHTNING_RANK_ZERO_LOGGER,
    DropCommercialLoggerTip,
    expect_eval_mode_parts,
    install_noise_filters,
    transformers_bars_off,
)


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord(LIGHTNING_RANK_ZERO_LOGGER, logging.INFO, __file__, 1, message, None, None)


def test_only_the_commercial_logger_and_registry_tips_are_dropped():
    drop = DropCommercialLoggerTip()
    assert not drop.filter(_record("💡 Tip: For seamless cloud logging, try installing [litlogger](https://x) ..."))
    assert not drop.filter(_record("💡 Tip: For seamless cloud uploads ..., try installing [litmodels](https://x)"))
    assert drop.filter(_record("GPU available: False, used: False"))
    assert drop.filter(_record("💡 Tip: some other advice"))  # other tips are not ours to hide
    install_noise_filters()
    install_noise_filters()  # once: a second call adds nothing
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


def test_lightnings_resume_lines_are_dropped_only_while_a_checkpoint_record_replaces_them(monkeypatch):
    from comlrl_lightning.runtime.quiet import ResumeLines

    monkeypatch.setattr(ResumeLines, "replaced", 0)
    lines = ResumeLines()
    restoring = _record("Restoring states from the checkpoint path at /x/last.ckpt")
    restored = _record("Restored all states from the checkpoint at /x/last.ckpt")
    assert lines.filter(restoring) and lines.filter(restored)  # no CheckpointRecord running: Lightning's lines
    ResumeLines.replaced += 1
    try:
        assert not lines.filter(restoring) and not lines.filter(restored)
        assert lines.filter(_record("Loaded model weights from the checkpoint at /x/last.ckpt"))
    finally:
        ResumeLines.replaced -= 1


def test_the_missing_callbacks_warning_is_filtered_only_when_it_names_checkpoint_callbacks_alone():
    from comlrl_lightning.runtime.quiet import install_noise_filters

    def warn(keys: str) -> None:
        warnings.warn(
            "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided "
            f"during `Trainer` instantiation. Please add the following callbacks: [{keys}]."
        )

    checkpoint = "\"ModelCheckpoint{'monitor': 'step', 'mode': 'max', 'every_n_epochs': 1}\""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        install_noise_filters()
        warn(checkpoint)
        warn(checkpoint.replace("ModelCheckpoint", "ResumableCheckpoint") + ", " + checkpoint)
        warn(checkpoint + ", \"RewardCurvePlot{'filename': 'x.png'}\"")  # a plot's points would be lost: shown
        warn("'EarlyStopping{}'")
    assert len(caught) == 2 and "RewardCurvePlot" in str(caught[0].message)


def test_a_lora_team_is_built_without_transformers_gradient_checkpointing_deprecation():
    from peft import LoraConfig

    from comlrl_lightning.team.lora import build_lora_agents

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_lora_agents("embedded", 2, LoraConfig(r=2, target_modules=["c_attn"]))
        warnings.warn("`is_gradient_checkpointing` is deprecated (a user's own call)", FutureWarning)
    messages = [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)]
    assert messages == ["`is_gradient_checkpointing` is deprecated (a user's own call)"]


def test_the_gguf_bar_is_off_in_a_log_file_and_back_after(monkeypatch):
    import io
    import sys

    from transformers import modeling_gguf_pytorch_utils as gguf_reader

    from comlrl_lightning.runtime.quiet import gguf_bar_off_in_logs

    original = gguf_reader.tqdm
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with gguf_bar_off_in_logs():
        for _ in gguf_reader.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...", file=log):
            pass
    assert log.getvalue() == "" and gguf_reader.tqdm is original

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    with gguf_bar_off_in_logs():  # a terminal keeps the bar
        for _ in gguf_reader.tqdm(range(3), desc="de-quantizing", file=screen):
            pass
    assert "de-quantizing" in screen.getvalue()
