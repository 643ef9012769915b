"""The reward curve says what it shows: turn metrics under their turn, the return under its own name, on
whole updates (the headline metric itself: tests/modules/test_turn_evaluation.py)."""

from __future__ import annotations

import csv
import json
import logging

import pytest

from comlrl_lightning.callbacks.reward_curve import reward_curve_figure
from comlrl_lightning.modules.turn_evaluation import RETURN_MEAN_KEY, TURN_1_KEY


def test_the_figure_labels_its_y_axis_with_the_metric_and_ticks_whole_updates_only():
    figure = reward_curve_figure([(0, 0.1), (3, 0.4), (1, 0.2)], RETURN_MEAN_KEY)
    axis = figure.axes[0]
    assert axis.get_ylabel() == RETURN_MEAN_KEY and axis.get_title() == "evaluation return"
    figure.canvas.draw()
    ticks = [tick for tick in axis.get_xticks() if axis.get_xlim()[0] <= tick <= axis.get_xlim()[1]]
    assert len(ticks) >= 2 and all(float(tick).is_integer() for tick in ticks), ticks
    assert list(axis.lines[0].get_xdata()) == [0, 1, 3]  # in update order
    assert reward_curve_figure([(0, 0.1), (1, 0.2)], TURN_1_KEY).axes[0].get_ylabel() == TURN_1_KEY


@pytest.mark.slow  # a tiny two-turn MADPO run (about 10 s)
def test_a_two_turn_run_prints_plots_and_logs_the_return_under_one_name_and_each_turn_under_its_own(tmp_path, caplog):
    from lightning.pytorch.loggers import CSVLogger

    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from comlrl_lightning.callbacks import RewardCurvePlot, SamplesLog
    from comlrl_lightning.tasks.turns import Turns
    from tests.conftest import TINY_DATA, TINY_MODEL, tiny_task, tiny_trainer

    turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.reward_feedback")
    module = MADPOModule(**TINY_MODEL)
    data = PreferenceDataModule(**{**TINY_DATA, "task": tiny_task(turns=turns), "num_train_epochs": 1})
    plot, samples = RewardCurvePlot(), SamplesLog()
    logger = CSVLogger(str(tmp_path))
    trainer = tiny_trainer(tmp_path, max_epochs=1, logger=logger, val_check_interval=2, callbacks=[plot, samples])
    with caplog.at_level(logging.INFO):
        trainer.fit(module, data)
    rows = list(csv.DictReader(open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")))
    evaluations = [row for row in rows if row.get(RETURN_MEAN_KEY)]
    assert len(evaluations) >= 3  # before training, validations, after training
    for row in evaluations:
        assert float(row[RETURN_MEAN_KEY]) == pytest.approx(float(row["eval/turn_1/expected_return"]))
    # turn 1's reward is not the return here: a label naming one while showing the other fails below
    assert any(float(row[TURN_1_KEY]) != pytest.approx(float(row[RETURN_MEAN_KEY]), abs=1e-6) for row in evaluations)

    # the printed headline names the metric whose value it prints
    printed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation (")]
    assert (
        printed[0]
        == f"evaluation (before training, 0 updates): {RETURN_MEAN_KEY} = {float(evaluations[0][RETURN_MEAN_KEY]):.4f}"
    )
    assert printed[-1].endswith(f"{RETURN_MEAN_KEY} = {float(evaluations[-1][RETURN_MEAN_KEY]):.4f}")
    assert module.initial_eval_reward == pytest.approx(float(evaluations[0][RETURN_MEAN_KEY]), abs=1e-6)
    assert module.final_eval_reward == pytest.approx(float(evaluations[-1][RETURN_MEAN_KEY]), abs=1e-6)

    # the curve plots the metric its y axis names, every point a logged value of it
    assert plot.metric == RETURN_MEAN_KEY
    logged = sorted(round(float(row[RETURN_MEAN_KEY]), 5) for row in evaluations)
    assert sorted(round(value, 5) for _, value in plot.points) == logged
    assert reward_curve_figure(plot.points, plot.metric).axes[0].get_ylabel() == RETURN_MEAN_KEY

    # the samples log holds the values the names average: per evaluation, each turn's and the return
    records = [json.loads(line) for line in samples.written.read_text().splitlines()]
    by_step = {}
    for record in records:
        by_step.setdefault(record["step"], []).append(record)
    assert sorted(by_step) == [step for step, _ in sorted(plot.points)]
    for (step, value), row in zip(sorted(plot.points), evaluations):
        items = by_step[step]
        assert sum(r["return"] for r in items) / len(items) == pytest.approx(value, abs=1e-6)
        first = sum(r["turn_rewards"][0] for r in items) / len(items)
        assert first == pytest.approx(float(row[TURN_1_KEY]), abs=1e-6)
        assert all(len(r["turns"]) == len(r["turn_rewards"]) == 2 and len(r["prompts"]) == 2 for r in items)
