"""The embedding example runs, and the modules work under bf16 mixed precision."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_team

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embed_in_your_project.py"


def _example():
    spec = importlib.util.spec_from_file_location("embed_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_modules_in_a_users_own_trainer_with_their_callback_and_logger(tmp_path):
    result = _example().lightning_part(tmp_path)
    assert result["pairs"] > 0 and result["updates"] == result["global_step"] > 0
    with open(result["metrics"]) as handle:
        columns = set(next(csv.reader(handle)))
    assert {"train/loss", "eval/turn_1/reward_mean"} <= columns


def test_madpo_loss_in_a_plain_pytorch_loop_decreases():
    losses = _example().plain_pytorch_part(steps=5)
    assert losses[-1] < losses[0]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_bf16_mixed_precision_generates_and_trains_with_float32_log_softmax(tiny_run):
    module, datamodule, trainer = tiny_run(trainer=dict(precision="bf16-mixed", max_epochs=1))
    seen = []
    original = module.team.score

    def spy(*args, **kwargs):
        values = original(*args, **kwargs)
        seen.extend(value.dtype for value in values)
        return values

    module.team.score = spy
    trainer.fit(module, datamodule)
    assert trainer.global_step > 0 and seen and all(dtype == torch.float32 for dtype in seen)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_models_can_be_loaded_in_bfloat16(tiny_run):
    module, datamodule, trainer = tiny_run(model=dict(team=tiny_team(dtype="bfloat16")), trainer=dict(max_epochs=1))
    assert next(module.team.agents[0].parameters()).dtype == torch.bfloat16
    trainer.fit(module, datamodule)
    assert trainer.global_step > 0
