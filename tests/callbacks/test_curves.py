"""Curves from a CSVLogger metrics file: per-key series, and one plot panel per chosen key."""

from __future__ import annotations

import pytest
from lightning.pytorch.loggers import CSVLogger
from matplotlib.figure import Figure

from comlrl_lightning.callbacks.curves import (
    grouped_series,
    metric_series,
    plot_curves,
    read_metric_rows,
    read_metrics,
)


@pytest.fixture
def log_dir(tmp_path):
    """A metrics.csv written by Lightning's CSVLogger: two reward-model fits, training and evaluation rows."""
    logger = CSVLogger(tmp_path, name="run")
    logger.log_metrics({"eval/reward": 0.1}, step=0)
    for iteration, step in ((1, 0), (2, 4)):
        for epoch in (1, 2):
            logger.log_metrics(
                {
                    "reward_model/accuracy": 0.5 + 0.1 * epoch + iteration / 100,
                    "reward_model/epoch": epoch,
                    "reward_model/iteration": iteration,
                },
                step=step,
            )
    for step in range(8):
        logger.log_metrics({"train/reward": step / 10, "epoch": step // 4}, step=step)
    logger.log_metrics({"eval/reward": 0.7}, step=7)
    logger.save()
    return logger.log_dir


def test_rows_hold_only_the_keys_they_logged(log_dir):
    rows = read_metric_rows(log_dir)
    assert len(rows) == 14
    assert rows[0] == {"eval/reward": 0.1, "step": 0.0}
    assert rows[1] == {
        "reward_model/accuracy": 0.61,
        "reward_model/epoch": 1.0,
        "reward_model/iteration": 1.0,
        "step": 0.0,
    }
    assert rows == read_metric_rows(f"{log_dir}/metrics.csv")  # the file itself or its folder


def test_series_against_step_or_another_key(log_dir):
    series = read_metrics(log_dir)
    assert series["eval/reward"] == ([0.0, 7.0], [0.1, 0.7])
    assert series["train/reward"][0] == [float(s) for s in range(8)]
    assert "step" not in series
    by_epoch = read_metrics(log_dir, x="reward_model/epoch")
    assert set(by_epoch) == {"reward_model/accuracy", "reward_model/iteration", "step"}
    assert by_epoch["reward_model/accuracy"] == ([1.0, 2.0, 1.0, 2.0], pytest.approx([0.61, 0.71, 0.62, 0.72]))
    rows = read_metric_rows(log_dir)
    assert metric_series(rows, "eval/reward", x="epoch") == ([], [])  # no row logged both
    fits = grouped_series(rows, "reward_model/accuracy", "reward_model/epoch", "reward_model/iteration")
    assert list(fits) == [1.0, 2.0]
    assert fits[2.0] == ([1.0, 2.0], pytest.approx([0.62, 0.72]))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no CSV metrics at .*metrics.csv"):
        read_metric_rows(tmp_path)


def test_one_panel_per_key_with_the_logged_points(log_dir, tmp_path):
    figure = plot_curves(
        log_dir, ["train/reward", "eval/reward"], title="rewards", path=tmp_path / "out" / "curves.png"
    )
    assert isinstance(figure, Figure)
    assert [axis.get_ylabel() for axis in figure.axes] == ["train/reward", "eval/reward"]
    assert figure.axes[-1].get_xlabel() == "step"
    (line,) = figure.axes[1].get_lines()
    assert list(line.get_xdata()) == [0.0, 7.0] and list(line.get_ydata()) == [0.1, 0.7]
    assert (tmp_path / "out" / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_one_line_per_group(log_dir):
    rows = read_metric_rows(log_dir)
    figure = plot_curves(rows, ["reward_model/accuracy"], x="reward_model/epoch", group_by="reward_model/iteration")
    lines = figure.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["reward_model/iteration = 1", "reward_model/iteration = 2"]
    assert list(lines[1].get_ydata()) == pytest.approx([0.62, 0.72])
    assert figure.axes[0].get_legend() is not None


def test_a_key_never_logged_is_an_error_that_lists_the_logged_keys(log_dir):
    with pytest.raises(
        ValueError, match=r"no values of \['train/los'\] against 'step'; logged keys: epoch, eval/reward"
    ):
        plot_curves(log_dir, ["train/reward", "train/los"])
    with pytest.raises(ValueError, match="no values of any key"):
        plot_curves(log_dir, [])
