"""Collection progress: time estimates, lines without a bar, generation reports, and when bars show."""

from __future__ import annotations

import io
import re
import sys
from types import SimpleNamespace

import pytest

from comlrl_lightning.runtime.progress import (
    Progress,
    ProgressLines,
    progress_callbacks,
    progress_line,
    renders_live,
    report_generated,
    seconds_left,
    show_bars,
)


def test_seconds_left_is_the_average_rate_so_far():
    assert seconds_left(0, 10, 5.0) is None  # no rate yet
    assert seconds_left(2, 10, 4.0) == pytest.approx(16.0)  # 2 s per unit, 8 units left
    assert seconds_left(10, 10, 7.0) == 0.0
    assert progress_line("round 1/3 sampling", 2, 10, "prompt", 4.0) == (
        "round 1/3 sampling: 2/10 prompts (4s elapsed, about 16s left)"
    )


def test_without_a_bar_lines_come_at_most_every_interval():
    lines, now = [], [0.0]
    progress = Progress("collection sampling", 8, "prompt", report=lines.append, interval=30.0, clock=lambda: now[0])
    for seconds in (10.0, 29.0, 31.0, 40.0, 62.0):
        now[0] = seconds
        progress.advance(1)
    assert lines == [
        "collection sampling: 3/8 prompts (31s elapsed, about 52s left)",
        "collection sampling: 5/8 prompts (62s elapsed, about 37s left)",
    ]
    assert progress.done == 5


def test_a_part_counts_generation_reports_and_adds_what_was_not_reported():
    progress = Progress("sampling", 20, "prompt", report=lambda line: None)
    report_generated(3)  # outside a part: nobody listens
    assert progress.done == 0
    with progress.part(8):
        report_generated(3)
        assert progress.done == 3  # batch by batch
        report_generated(100)  # a backend over-reporting cannot push past its part
        assert progress.done == 8
    assert progress.done == 8
    with progress.part(5):
        pass  # a backend that reports nothing still advances once its call returns
    assert progress.done == 13
    with progress.part(7):
        with progress.part(4):  # nested: the inner part counts toward the outer one
            report_generated(1)
        assert progress.done == 17
    assert progress.done == 20
    with pytest.raises(RuntimeError):
        with progress.part(5):
            raise RuntimeError("a failed call adds nothing")
    assert progress.done == 20


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _trainer(global_zero: bool = True, progress_bar: bool = True):
    return SimpleNamespace(is_global_zero=global_zero, progress_bar_callback=object() if progress_bar else None)


def test_bars_show_on_rank_zero_with_lightnings_bar_on_a_terminal(monkeypatch):
    assert renders_live(_Terminal()) and not renders_live(io.StringIO())
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert show_bars(_trainer())
    assert not show_bars(_trainer(global_zero=False))
    assert not show_bars(_trainer(progress_bar=False))  # enable_progress_bar: false
    assert not show_bars(None)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a pipe or a log file
    assert not show_bars(_trainer())


def test_a_bar_has_a_time_estimate_and_is_removed_when_done(monkeypatch):
    screen = _Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    lines = []
    with Progress.for_trainer(_trainer(), "round 1/2 sampling", 4, "prompt") as progress:
        progress.report = lines.append
        progress.advance(2)
        progress.bar.refresh()  # tqdm redraws at most every 0.1 s on its own
    shown = screen.getvalue()
    assert "round 1/2 sampling" in shown
    assert re.search(r"2/4 \[\d\d:\d\d<\d\d:\d\d", shown)  # [elapsed<remaining]
    assert shown.endswith("\r") and lines == []  # erased at the end (leave=False); no lines beside a bar


def test_an_evaluation_outside_the_validation_loop_reports_its_progress(tmp_path, monkeypatch, caplog):
    import logging

    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from comlrl_lightning.runtime import progress
    from tests.conftest import TINY_DATA, TINY_MODEL, tiny_trainer

    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)  # a line after every batch
    data = PreferenceDataModule(**{**TINY_DATA, "eval_num_samples": 4, "eval_batch_size": 2})
    with caplog.at_level(logging.INFO):
        tiny_trainer(tmp_path, max_steps=1).fit(MADPOModule(**TINY_MODEL), data)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation (before training): ")]
    assert len(lines) == 2  # one per batch of 2 items
    assert re.match(r"evaluation \(before training\): 2/4 items \(\d+s elapsed, about \d+s left\)", lines[0])


def test_progress_lines_say_each_epoch_and_evaluation_with_an_estimate():
    lines, now = [], [0.0]
    progress = ProgressLines(report=lines.append, clock=lambda: now[0])
    trainer = SimpleNamespace(
        is_global_zero=True, current_epoch=0, max_epochs=4, sanity_checking=False, global_step=8, callback_metrics={}
    )
    module = SimpleNamespace(headline_metric="eval/turn_1/reward_mean")
    progress.on_train_start(trainer, module)
    now[0] = 10.0
    progress.on_train_epoch_end(trainer, module)
    trainer.callback_metrics = {"eval/turn_1/reward_mean": 0.25}
    now[0] = 12.0
    progress.on_validation_end(trainer, module)
    trainer.sanity_checking = True
    progress.on_validation_end(trainer, module)  # Lightning's sanity check is no evaluation
    progress.disable()
    progress.on_train_epoch_end(trainer, module)
    assert lines == [
        "training: 1/4 epochs (10s elapsed, about 30s left)",
        "evaluation at 8 updates: eval/turn_1/reward_mean = 0.2500 (12s elapsed)",
    ]


def test_lines_replace_lightnings_bar_only_where_no_bar_renders(monkeypatch):
    from lightning.pytorch.callbacks import TQDMProgressBar

    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a log file
    assert [type(c) for c in progress_callbacks(True, [])] == [ProgressLines]
    assert progress_callbacks(False, []) == []  # enable_progress_bar: false
    assert progress_callbacks(True, [TQDMProgressBar()]) == []  # the user's own bar
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert progress_callbacks(True, []) == []


@pytest.mark.slow  # a run
def test_a_run_logging_to_a_file_prints_a_line_per_epoch_and_evaluation(tmp_path, monkeypatch):
    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from tests.conftest import TINY_DATA, TINY_MODEL, tiny_trainer

    lines = []
    data = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 2})
    trainer = tiny_trainer(
        tmp_path, max_epochs=2, enable_progress_bar=True, callbacks=[ProgressLines(report=lines.append)]
    )
    trainer.fit(MADPOModule(**TINY_MODEL), data)
    assert [line.split(" (")[0] for line in lines if line.startswith("training")] == [
        "training: 1/2 epochs",
        "training: 2/2 epochs",
    ]
    assert any(
        re.match(r"evaluation at \d+ updates: eval/turn_1/reward_mean = -?\d\.\d{4} \(\d+s elapsed\)", l) for l in lines
    )
