"""Figures: replay weights per mode (and that the replay draw follows them), reward distributions."""

from __future__ import annotations

import collections
import io
import random

import pytest

from comlrl_lightning.callbacks.plots import (
    COMPARATOR_COLOR,
    TARGET_COLOR,
    replay_weight_table,
    replay_weights_figure,
    reward_distribution_figure,
)
from comlrl_lightning.callbacks.reward_distributions import (
    RewardSides,
    distribution_record,
)
from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayBuffer,
)

MODES = {
    "current": CurrentReplay(),
    "nearest_k (k=2)": NearestKReplay(k=2),
    "all_history": AllHistoryReplay(),
    "lambda_decay (λ=0.5)": LambdaDecayReplay(lam=0.5),
}


@pytest.mark.parametrize(
    "rule, sizes, expected",
    [
        (CurrentReplay(), [5, 5, 5, 5], [0, 0, 0, 1]),
        (NearestKReplay(k=2), [5, 5, 5, 5], [0, 0, 0.5, 0.5]),
        (AllHistoryReplay(), [5, 5, 5, 5], [0.25] * 4),
        # (1-λ) λ^age / (1 - λ^4) with λ = 0.5, oldest first: 1/15, 2/15, 4/15, 8/15
        (LambdaDecayReplay(lam=0.5), [5, 5, 5, 5], [1 / 15, 2 / 15, 4 / 15, 8 / 15]),
        (LambdaDecayReplay(lam=0.0), [5, 5, 5], [0, 0, 1]),
        # rounds without pairs are never drawn and do not count in a window
        (NearestKReplay(k=3), [3, 0, 5, 2], [1 / 3, 0, 1 / 3, 1 / 3]),
        (LambdaDecayReplay(lam=0.5), [3, 0, 5], [1 / 3, 0, 2 / 3]),
        (CurrentReplay(), [3, 0], [0, 0]),  # an empty round trains on nothing
        (AllHistoryReplay(), [], []),
    ],
)
def test_round_weights_per_mode(rule, sizes, expected):
    assert rule.round_weights(sizes) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    "rule",
    [
        NearestKReplay(k=2, sample_size=6000),
        AllHistoryReplay(sample_size=6000),
        LambdaDecayReplay(lam=0.5, sample_size=6000),
    ],
    ids=repr,
)
def test_the_replay_draw_picks_rounds_with_the_round_weights(tmp_path, rule):
    buffer = ReplayBuffer(tmp_path / "replay", rule=rule)
    for iteration in range(1, 5):
        buffer.write_round(iteration, [{"round": iteration, "index": i} for i in range(40)])
    drawn = collections.Counter(record["round"] for record in buffer.sample(40, random.Random(0)))
    frequencies = [drawn[iteration] / 6000 for iteration in range(1, 5)]
    assert frequencies == pytest.approx(rule.round_weights([40] * 4), abs=0.025)  # > 4 standard deviations


def test_replay_weight_table_names_rows_by_key_or_repr():
    names, table = replay_weight_table(MODES, 3)
    assert names == list(MODES)
    expected = [[0, 0, 1], [0, 0.5, 0.5], [1 / 3] * 3, [1 / 7, 2 / 7, 4 / 7]]
    assert [row == pytest.approx(want, abs=1e-12) for row, want in zip(table, expected)] == [True] * 4
    names, _ = replay_weight_table([NearestKReplay(k=2)], 3)
    assert names == ["NearestKReplay(sample_size=None, k=2)"]


def test_replay_weights_figure_has_a_row_per_mode_and_a_column_per_round():
    figure = replay_weights_figure(MODES, 5)
    (axes,) = figure.axes
    assert [label.get_text() for label in axes.get_yticklabels()] == list(MODES)
    assert [label.get_text() for label in axes.get_xticklabels()] == ["1", "2", "3", "4", "5"]  # newest on the right
    assert axes.images[0].get_array().shape == (4, 5)
    cells = [text.get_text() for text in axes.texts]
    assert cells[:5] == ["0", "0", "0", "0", "1.00"]  # current: the newest round only
    assert cells[5:10] == ["0", "0", "0", "0.50", "0.50"]
    assert cells[10:15] == ["0.20"] * 5
    assert cells[15:] == ["0.03", "0.06", "0.13", "0.26", "0.52"]  # 2^i / 31
    figure.savefig(io.BytesIO(), format="png")


def test_reward_distribution_figure_draws_both_sides_of_both_histograms():
    record = distribution_record(2, (-1.0, 1.0), RewardSides([0.1, 0.2, 0.9], [-0.5]), RewardSides([0.1], [-0.5]))
    figure = reward_distribution_figure(record)
    candidates, selected = figure.axes
    for axes, section in ((candidates, "candidate"), (selected, "selected")):
        bars = axes.patches
        assert len(bars) == 32
        orange = [bar.get_height() for bar in bars if bar.get_facecolor()[:3] == _rgb(TARGET_COLOR)]
        grey = [bar.get_height() for bar in bars if bar.get_facecolor()[:3] == _rgb(COMPARATOR_COLOR)]
        assert orange == record[section]["target"]["counts"] and grey == record[section]["comparator"]["counts"]
        assert axes.get_xlim() == (-1.0, 1.0)
    assert figure.get_suptitle() == "Reward distribution, round 2"
    assert "n=3, mean 0.400" in candidates.get_legend().get_texts()[0].get_text()


def _rgb(color):
    from matplotlib.colors import to_rgb

    return to_rgb(color)
