"""Two real CPU processes (gloo, ddp_fork): sharded collection, identical replicas, exact metrics."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import CSVLogger

from comlrl_lightning import MADPOModule, PreferenceDataModule
from comlrl_lightning.rng import RandomStream
from comlrl_lightning.task import Task, load_items
from tests.conftest import TINY_DATA, TINY_MODEL

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
    options = dict(accelerator="cpu", devices=2, strategy="ddp_fork", max_epochs=2, default_root_dir=str(tmp_path),
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                   check_val_every_n_epoch=None, val_check_interval=1000, logger=CSVLogger(tmp_path, name="logs"),
                   callbacks=[RecordPerRank(tmp_path)], log_every_n_steps=1)
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
    assert ranks[0]["batches"] == (len(ranks[0]["pairs"]) // 2 + TINY_DATA["train_batch_size"] - 1) // TINY_DATA["train_batch_size"]

    # the evaluation before training equals a single-process computation on the same samples
    # (rank r's items and stream), weighted by item: rank 0 has 3 items, rank 1 two
    reference = MADPOModule(**TINY_MODEL)
    task = Task(datamodule.formatter_specs, datamodule.reward_func, None, 2)
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
