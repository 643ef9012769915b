"""Two real CPU processes (gloo, ddp_fork): sharded collection, identical replicas, exact metrics."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import CSVLogger

from comlrl_lightning import MADPOModule, PreferenceDataModule, ReferenceKL, RewardModelFit
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.task import load_items
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_task

pytestmark = pytest.mark.slow  # every test here starts processes

EVAL_ITEMS = 5  # uneven shards: rank 0 evaluates 3 items, rank 1 two


class RecordPerRank(Callback):
    """Writes what each process saw into ``<dir>/rank_<r>.json`` (the test reads them afterwards)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def on_train_end(self, trainer, pl_module) -> None:
        digest = hashlib.sha256()
        for key, value in sorted(pl_module.team.state_dict().items()):
            digest.update(key.encode())
            digest.update(value.detach().cpu().numpy().tobytes())
        datamodule = trainer.datamodule
        record = {
            "rank": trainer.global_rank,
            "weights": digest.hexdigest(),
            "pairs": [pair.to_record() for pair in datamodule.pairs],
            "batches": trainer.num_training_batches,
        }
        (self.directory / f"rank_{trainer.global_rank}.json").write_text(json.dumps(record))


def _ddp_trainer(tmp_path, **overrides):
    options = dict(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=2,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        check_val_every_n_epoch=None,
        val_check_interval=1000,
        logger=CSVLogger(tmp_path, name="logs"),
        callbacks=[RecordPerRank(tmp_path)],
        log_every_n_steps=1,
    )
    options.update(overrides)
    return Trainer(**options)


def test_two_process_madpo_run(tmp_path):
    data = dict(TINY_DATA, eval_num_samples=EVAL_ITEMS, eval_batch_size=2)
    module, datamodule = MADPOModule(**TINY_MODEL), PreferenceDataModule(**data)
    _ddp_trainer(tmp_path).fit(module, datamodule)
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in range(2)]
    # the replicas end with identical weights
    assert ranks[0]["weights"] == ranks[1]["weights"]
    # every rank holds the pairs of both ranks, in item order, covering every training item
    assert ranks[0]["pairs"] == ranks[1]["pairs"]
    order = {f"topic: {item['prompt']}\nwriter:": index for index, item in enumerate(load_items("embedded"))}
    indices = [order[pair["prompts"][0]] for pair in ranks[0]["pairs"]]
    assert indices == sorted(indices)  # gathered back into item order
    assert {i % 2 for i in indices} == {0, 1} and len(set(indices)) >= 12  # both ranks' shards are there
    # pairs are split between the ranks without duplicates: each rank gets half of them per epoch
    assert (
        ranks[0]["batches"]
        == (len(ranks[0]["pairs"]) // 2 + TINY_DATA["train_batch_size"] - 1) // TINY_DATA["train_batch_size"]
    )

    # the evaluation before training equals a single-process computation on the same samples
    # (rank r's items and stream), weighted by item: rank 0 has 3 items, rank 1 two
    reference = MADPOModule(**TINY_MODEL)
    task = datamodule.task_options.build(2)
    items = load_items("embedded", role="eval")[:EVAL_ITEMS]
    rewards = []
    for rank in range(2):
        shard = items[rank::2]
        for index, start in enumerate(range(0, len(shard), 2)):
            stream = RandomStream.derive(0, "eval", 0, rank, "before training", index)
            rewards += reference.evaluate_items(shard[start : start + 2], task, stream)
    with open(next(tmp_path.glob("logs/version_*/metrics.csv"))) as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("eval/turn_1/reward_mean")]
    assert float(rows[0]["eval/turn_1/reward_mean"]) == pytest.approx(sum(rewards) / len(rewards), abs=1e-12)


def test_two_process_iterative_madpo_run_writes_one_set_of_round_files(tmp_path):
    from comlrl_lightning import IterativePreferenceDataModule
    from tests.helpers.iterative_run import ITER_MODEL, iter_data

    module = MADPOModule(**ITER_MODEL)
    datamodule = IterativePreferenceDataModule(**iter_data(num_iterations=2))
    _ddp_trainer(tmp_path, max_epochs=4, reload_dataloaders_every_n_epochs=1).fit(module, datamodule)
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["pairs"] == ranks[1]["pairs"]  # the same replay sample on every rank
    files = sorted((tmp_path / "preference_replay").glob("iteration_*.json"))
    assert [f.name for f in files] == ["iteration_0001.json", "iteration_0002.json"]
    assert not list((tmp_path / "preference_replay").glob("*.tmp"))
    order = {f"topic: {item['prompt']}\nwriter:": index for index, item in enumerate(load_items("embedded"))}
    for file in files:
        records = json.loads(file.read_text())["pairs"]
        indices = [order[record["prompts"][0]] for record in records]
        assert indices == sorted(indices) and {i % 2 for i in indices} == {0, 1}  # both ranks' items
    assert sorted(p.name for p in (tmp_path / "policy_snapshots").iterdir()) == [".lock", "initial", "iteration_0000"]


def test_two_process_marlhf_run_keeps_replicas_and_reward_models_identical(tmp_path):
    from comlrl_lightning import MARLHFModule

    class RecordRewardModel(RecordPerRank):
        def on_train_end(self, trainer, pl_module) -> None:
            super().on_train_end(trainer, pl_module)
            digest = hashlib.sha256()
            for key, value in sorted(pl_module.reward_model.state_dict().items()):
                digest.update(value.detach().cpu().numpy().tobytes())
            (self.directory / f"reward_{trainer.global_rank}.txt").write_text(digest.hexdigest())

    module = MARLHFModule(
        **dict(
            TINY_MODEL, num_generations=2, reward_model=RewardModelFit(train_batch_size=8), reference_kl=ReferenceKL()
        )
    )
    _ddp_trainer(tmp_path, max_epochs=1, callbacks=[RecordRewardModel(tmp_path)]).fit(
        module, PreferenceDataModule(**dict(TINY_DATA, train_batch_size=4))
    )
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["batches"] == 2  # 16 items, batches of 4, split over 2 ranks
    assert (tmp_path / "reward_0.txt").read_text() == (tmp_path / "reward_1.txt").read_text()


def reward_failing_on_rank_1(writer, matcher):
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() == 1:
        raise ValueError("the scoring service is down")
    return [float(len(writer[0]))]


def test_a_collection_failure_on_one_process_stops_every_process(tmp_path):
    import torch.multiprocessing

    module = MADPOModule(**TINY_MODEL)
    datamodule = PreferenceDataModule(**dict(TINY_DATA, task=tiny_task(reward_func=reward_failing_on_rank_1)))
    with pytest.raises(torch.multiprocessing.ProcessRaisedException) as error:
        _ddp_trainer(tmp_path).fit(module, datamodule)
    assert "the scoring service is down" in str(error.value)
