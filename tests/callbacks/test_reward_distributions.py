"""Reward distributions: histograms, the JSON record (the reference's bytes), the range check, the callback."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from comlrl_lightning import (
    CurrentComparator,
    NearestKReplay,
    OptionError,
    PreferenceDataModule,
    RewardDistributions,
)
from comlrl_lightning.callbacks.reward_distributions import (
    RewardSides,
    bin_edges,
    distribution_metrics,
    distribution_record,
    has_samples,
    histogram_counts,
    log_figure,
    selected_rewards,
    write_record,
)
from comlrl_lightning.contracts import ContractError
from comlrl_lightning.defaults import vowel_length_reward
from comlrl_lightning.rounds.pairs import PreferencePair
from tests.conftest import tiny_task
from tests.helpers.iterative_run import make_run

# ----------------------------------------------------------------------------------------------
# The math and the record


def test_histogram_counts_clip_values_outside_the_range_into_the_end_bins():
    edges = bin_edges((-1.0, 1.0))  # 16 bins of width 0.125
    assert edges.tolist()[:3] == [-1.0, -0.875, -0.75] and edges[-1] == 1.0 and len(edges) == 17
    values = [-5.0, -1.0, -0.9, 0.0, 0.124, 0.125, 0.99, 1.0, 7.0]
    expected = [0] * 16
    expected[0], expected[8], expected[9], expected[15] = 3, 2, 1, 3  # [-5,-1,-0.9] [0,0.124] [0.125] [0.99,1,7]
    assert histogram_counts(values, edges) == expected
    assert histogram_counts([], edges) == [0] * 16


def test_record_against_hand_computed_values():
    candidate = RewardSides(target=[0.5, 1.0, float("nan"), 5.0], comparator=[-1.0, float("inf")])
    record = distribution_record(2, (0.0, 4.0), candidate, RewardSides([], []))
    assert list(record) == [
        "iteration",
        "reward_min",
        "reward_max",
        "num_bins",
        "bin_edges",
        "bin_centers",
        "candidate",
        "selected",
    ]
    assert (record["iteration"], record["reward_min"], record["reward_max"], record["num_bins"]) == (2, 0.0, 4.0, 16)
    assert record["bin_edges"] == [0.25 * i for i in range(17)]
    assert record["bin_centers"] == [0.125 + 0.25 * i for i in range(16)]
    target = record["candidate"]["target"]
    assert list(target) == ["sample_count", "mean", "counts", "raw_rewards"]
    # NaN dropped; 5.0 clipped to 4.0 (last bin) but kept as 5.0 in raw_rewards and the mean
    assert target["sample_count"] == 3 and target["raw_rewards"] == [0.5, 1.0, 5.0]
    assert target["mean"] == pytest.approx(6.5 / 3, abs=1e-15)
    assert target["counts"] == [0, 0, 1, 0, 1] + [0] * 10 + [1]
    comparator = record["candidate"]["comparator"]  # inf dropped; -1 clipped into the first bin
    assert (comparator["sample_count"], comparator["mean"], comparator["raw_rewards"]) == (1, -1.0, [-1.0])
    assert comparator["counts"] == [1] + [0] * 15
    for side in ("target", "comparator"):  # an empty series: no mean, zero counts
        assert record["selected"][side] == {"sample_count": 0, "mean": None, "counts": [0] * 16, "raw_rewards": []}
    assert has_samples(record)
    assert not has_samples(distribution_record(1, (0.0, 4.0), RewardSides([], [float("nan")]), RewardSides([], [])))


def _reference_payload(iteration, reward_range, candidate, selected):
    """The reference (CoMLRL 1.4.3)'s ``_write_iteration_reward_distribution`` payload, transcribed."""
    edges = np.linspace(reward_range[0], reward_range[1], 16 + 1)

    def series(rewards):
        finite = [float(v) for v in rewards if np.isfinite(float(v))]
        if finite:
            counts, _ = np.histogram(
                np.clip(np.asarray(finite, dtype=float), float(edges[0]), float(edges[-1])), bins=edges
            )
        else:
            counts = np.zeros(len(edges) - 1, dtype=int)
        return {
            "sample_count": int(len(finite)),
            "mean": float(np.mean(finite)) if finite else None,
            "counts": [int(v) for v in counts.tolist()],
            "raw_rewards": [float(v) for v in finite],
        }

    return {
        "iteration": int(iteration),
        "reward_min": float(edges[0]),
        "reward_max": float(edges[-1]),
        "num_bins": 16,
        "bin_edges": [float(v) for v in edges.tolist()],
        "bin_centers": [float(v) for v in ((edges[:-1] + edges[1:]) / 2.0).tolist()],
        "candidate": {"target": series(candidate[0]), "comparator": series(candidate[1])},
        "selected": {"target": series(selected[0]), "comparator": series(selected[1])},
    }


def test_the_file_has_the_bytes_of_the_reference(tmp_path):
    rng = np.random.default_rng(0)
    candidate = (list(rng.normal(0.1, 0.6, 40)) + [1.7, -3.0], list(rng.normal(-0.2, 0.5, 40)))
    selected = (list(rng.uniform(-1, 1, 9)), list(rng.uniform(-1, 1, 9)) + [float("nan")])
    reward_range = (-1.0, 1.0 / 3.0)  # edges with long decimal expansions
    path = write_record(
        tmp_path / "ours", distribution_record(3, reward_range, RewardSides(*candidate), RewardSides(*selected))
    )
    assert path == tmp_path / "ours" / "iteration_0003.json"
    reference = tmp_path / "reference.json"
    with open(reference, "w", encoding="utf-8") as handle:  # the reference's json.dump call
        json.dump(_reference_payload(3, reward_range, candidate, selected), handle, ensure_ascii=False, indent=2)
    assert path.read_bytes() == reference.read_bytes()
    assert not list((tmp_path / "ours").glob("*.tmp"))


def _pair(target, comparator):
    return PreferencePair(
        ["p"], ["w"], ["l"], 1.0, 0.0, 0.5, target_raw_reward=target, comparator_raw_reward=comparator
    )


def test_selected_rewards_and_metrics():
    pairs = [_pair(0.5, -0.5), _pair(None, 0.3), _pair(0.1, None), _pair(float("nan"), 0.25), _pair(-0.3, 0.75)]
    sides = selected_rewards(pairs)
    assert sides == RewardSides([0.5, -0.3], [-0.5, 0.25, 0.75])  # each side drops its own NaN
    metrics = distribution_metrics("ns", 4, sides, pair_count=len(pairs))
    assert list(metrics) == [
        "ns/current_iteration",
        "ns/pair_count",
        "ns/target_sample_count",
        "ns/comparator_sample_count",
        "ns/target_mean",
        "ns/comparator_mean",
    ]
    assert [metrics[k] for k in metrics] == pytest.approx([4.0, 5.0, 2.0, 3.0, 0.1, 0.5 / 3], abs=1e-12)
    assert distribution_metrics("ns", 1, RewardSides([], [])) == {}
    assert list(distribution_metrics("ns", 1, RewardSides([], [0.5]))) == [
        "ns/current_iteration",
        "ns/target_sample_count",
        "ns/comparator_sample_count",
        "ns/comparator_mean",
    ]


# ----------------------------------------------------------------------------------------------
# The reward range


def _reward_with_range(reward_range):
    def reward(writer, matcher):
        return vowel_length_reward(writer, matcher)

    if reward_range is not None:
        reward.reward_range = reward_range
    return reward


@pytest.mark.parametrize("reward_range", [None, (1.0, -1.0)])
def test_a_run_without_a_valid_reward_range_fails_before_the_model_is_loaded(tmp_path, reward_range):
    module, datamodule, trainer = make_run(
        tmp_path,
        data=dict(task=tiny_task(reward_func=_reward_with_range(reward_range))),
        callbacks=[RewardDistributions()],
    )
    with pytest.raises(OptionError, match="reward_func.reward_range"):
        trainer.fit(module, datamodule)
    assert module._team is None  # no model was loaded
    assert not (tmp_path / "preference_replay").exists() and not (tmp_path / "reward_distributions").exists()


def test_the_callback_needs_an_iterative_data_module(tmp_path):
    from comlrl_lightning import MADPOModule
    from tests.helpers.iterative_run import ITER_MODEL, make_trainer

    trainer = make_trainer(tmp_path, callbacks=[RewardDistributions()])
    with pytest.raises(
        ContractError,
        match=r"PreferenceDataModule does not keep the RoundSource contract .*\(missing: round_collection\); "
        "RewardDistributions reads the rounds it builds",
    ):
        trainer.fit(MADPOModule(**ITER_MODEL), PreferenceDataModule(preference_num_candidates=2))


# ----------------------------------------------------------------------------------------------
# The callback in a run


def _data(**overrides):
    # the embedded task; the comparator samples K' = 3 against K = 4; two epochs per round; the
    # training draw takes pairs of this round and the one before
    options = dict(
        num_iterations=3,
        num_train_epochs=2,
        preference_num_candidates=4,
        preference_pairs_per_sample=2,
        comparator=CurrentComparator(num_candidates=3),
        replay=NearestKReplay(k=2, sample_size=8),
        train_batch_size=4,
        task=tiny_task(eval_dataset=None),
        eval_num_samples=0,
    )
    return {**options, **overrides}


def _files(directory):
    return {p.name: p.read_bytes() for p in sorted(Path(directory).glob("iteration_*.json"))}


@pytest.fixture(scope="module")
def observed_run(tmp_path_factory):
    from lightning.pytorch.loggers import CSVLogger

    root = tmp_path_factory.mktemp("observed")
    callback = RewardDistributions()
    module, datamodule, trainer = make_run(
        root,
        data=_data(),
        callbacks=[callback],
        max_epochs=6,
        val_check_interval=None,
        logger=CSVLogger(root, name="csv", version=0),
    )
    built = []
    original = datamodule.build_round

    def spy(round_index, module_):  # what each round trained on, to compare with its record
        original(round_index, module_)
        built.append((len(datamodule.train_items), [p.to_record() for p in datamodule.pairs]))

    datamodule.build_round = spy
    trainer.fit(module, datamodule)
    return dict(root=root, built=built, files=_files(root / "reward_distributions"), step=trainer.global_step)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_every_round_writes_its_record_and_plot(observed_run):
    root, built = observed_run["root"], observed_run["built"]
    directory = root / "reward_distributions"
    assert sorted(observed_run["files"]) == [f"iteration_{i:04d}.json" for i in (1, 2, 3)]
    assert sorted(p.name for p in directory.glob("*.png")) == [f"iteration_{i:04d}.png" for i in (1, 2, 3)]
    assert all((directory / f"iteration_{i:04d}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for i in (1, 2, 3))
    for iteration, (num_items, training) in enumerate(built, start=1):
        record = json.loads(observed_run["files"][f"iteration_{iteration:04d}.json"])
        assert record["iteration"] == iteration and (record["reward_min"], record["reward_max"]) == (-1.0, 1.0)
        assert record["candidate"]["target"]["sample_count"] == num_items * 4  # items x K
        assert record["candidate"]["comparator"]["sample_count"] == num_items * 3  # items x K'
        with_rewards = [
            r for r in training if r["target_raw_reward"] is not None and r["comparator_raw_reward"] is not None
        ]
        assert len(training) == 8 and len(with_rewards) == 8
        assert record["selected"]["target"]["raw_rewards"] == [r["target_raw_reward"] for r in with_rewards]
        assert record["selected"]["comparator"]["raw_rewards"] == [r["comparator_raw_reward"] for r in with_rewards]
        for section in ("candidate", "selected"):
            for series in record[section].values():
                assert sum(series["counts"]) == series["sample_count"]
    assert len(built) == 3 and observed_run["step"] == 3 * 2 * 2


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_metrics_reach_the_csv_logger_once_per_round(observed_run):
    with open(observed_run["root"] / "csv" / "version_0" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    candidate = [row for row in rows if row.get("iter/reward_distribution/current_iteration")]
    selected = [row for row in rows if row.get("iter/selected_reward_distribution/current_iteration")]
    assert [float(row["iter/reward_distribution/current_iteration"]) for row in candidate] == [1.0, 2.0, 3.0]
    assert [float(row["iter/selected_reward_distribution/current_iteration"]) for row in selected] == [1.0, 2.0, 3.0]
    for row, name in zip(candidate, sorted(observed_run["files"])):
        record = json.loads(observed_run["files"][name])
        for side in ("target", "comparator"):
            series = record["candidate"][side]
            assert float(row[f"iter/reward_distribution/{side}_sample_count"]) == series["sample_count"]
            assert float(row[f"iter/reward_distribution/{side}_mean"]) == pytest.approx(series["mean"], abs=1e-12)
    for row, name in zip(selected, sorted(observed_run["files"])):
        record = json.loads(observed_run["files"][name])
        assert float(row["iter/selected_reward_distribution/pair_count"]) == 8.0
        for side in ("target", "comparator"):
            series = record["selected"][side]
            assert float(row[f"iter/selected_reward_distribution/{side}_sample_count"]) == series["sample_count"]
            assert float(row[f"iter/selected_reward_distribution/{side}_mean"]) == pytest.approx(
                series["mean"], abs=1e-12
            )


@pytest.mark.parametrize(
    "checkpoint_options, stop",
    [
        (dict(every_n_epochs=1, save_on_train_epoch_end=True), dict(max_epochs=4)),  # after round 2
        (dict(every_n_train_steps=1), dict(max_steps=5)),  # inside round 2
    ],
    ids=["after-a-round", "mid-round"],
)
@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_resumed_run_reports_only_the_rounds_it_collects(observed_run, tmp_path, checkpoint_options, stop):
    from lightning.pytorch.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, **checkpoint_options)
    module, datamodule, trainer = make_run(
        tmp_path, data=_data(), val_check_interval=None, callbacks=[checkpoint, RewardDistributions()], **stop
    )
    trainer.fit(module, datamodule)
    assert sorted(_files(tmp_path / "reward_distributions")) == ["iteration_0001.json", "iteration_0002.json"]
    last = max((tmp_path / "ckpt").glob("*.ckpt"), key=os.path.getmtime)
    module, datamodule, trainer = make_run(
        tmp_path,
        data=_data(),
        val_check_interval=None,
        max_epochs=6,
        callbacks=[RewardDistributions(directory=str(tmp_path / "resumed"))],
    )
    trainer.fit(module, datamodule, ckpt_path=str(last))
    resumed = _files(tmp_path / "resumed")
    assert list(resumed) == ["iteration_0003.json"]  # never round 2 again, even when resumed inside it
    assert resumed["iteration_0003.json"] == observed_run["files"]["iteration_0003.json"]


@pytest.mark.slow
def test_two_processes_write_one_record_per_round_of_every_item(tmp_path):
    from collections import Counter

    from lightning.pytorch import Trainer
    from lightning.pytorch.loggers import CSVLogger

    from comlrl_lightning import IterativePreferenceDataModule, MADPOModule
    from tests.helpers.iterative_run import ITER_MODEL

    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=2,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=CSVLogger(tmp_path, name="csv", version=0),
        callbacks=[RewardDistributions()],
        reload_dataloaders_every_n_epochs=1,  # it reads each round when its epoch starts
    )
    datamodule = IterativePreferenceDataModule(**_data(num_iterations=2, num_train_epochs=1))
    trainer.fit(MADPOModule(**ITER_MODEL), datamodule)
    files = _files(tmp_path / "reward_distributions")
    assert sorted(files) == ["iteration_0001.json", "iteration_0002.json"]
    for iteration in (1, 2):
        record = json.loads(files[f"iteration_{iteration:04d}.json"])
        assert record["candidate"]["target"]["sample_count"] == 16 * 4  # both ranks' items, not one shard
        assert record["candidate"]["comparator"]["sample_count"] == 16 * 3
        assert record["selected"]["target"]["sample_count"] == 8
        pairs = json.loads((tmp_path / "preference_replay" / f"iteration_{iteration:04d}.json").read_text())["pairs"]
        # every pair of the round compares two of the round's candidates
        assert not Counter(p["target_raw_reward"] for p in pairs) - Counter(
            record["candidate"]["target"]["raw_rewards"]
        )
    with open(tmp_path / "csv" / "version_0" / "metrics.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("iter/reward_distribution/current_iteration")]
    assert [float(row["iter/reward_distribution/current_iteration"]) for row in rows] == [1.0, 2.0]


# ----------------------------------------------------------------------------------------------
# Figures to loggers


def test_the_plot_goes_to_tensorboard_and_wandb_loggers(tmp_path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    calls = []

    class Experiment:
        def add_figure(self, tag, figure, global_step=None, close=True):
            calls.append(("tensorboard", tag, global_step, type(figure).__name__))

    class TensorBoard(TensorBoardLogger):
        def __init__(self):  # no tensorboard needed: only the experiment is used
            pass

        @property
        def experiment(self):
            return Experiment()

    class Wandb(WandbLogger):
        def __init__(self):
            pass

        def log_image(self, key, images, step=None, **kwargs):
            calls.append(("wandb", key, step, images))

    log_figure([TensorBoard(), Wandb(), CSVLogger(tmp_path)], "tag", object.__new__(_FakeFigure), tmp_path / "x.png", 7)
    assert calls == [("tensorboard", "tag", 7, "_FakeFigure"), ("wandb", "tag", 7, [str(tmp_path / "x.png")])]


class _FakeFigure:
    pass
