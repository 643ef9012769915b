"""What the team wrote at every evaluation, for any task: each item's prompts and completions per
agent with their rewards, as JSON lines beside ``metrics.csv`` and as a W&B table.

:class:`SamplesLog` reads the samples the team module keeps after each evaluation
(``evaluated_samples``: before the first update, at every validation, after the last update, and in
``validate`` / ``test``) and appends one JSON object per item to ``evaluation_samples.jsonl`` in the
run's log folder (``trainer.log_dir``, where ``metrics.csv`` is)::

    {"step": 40, "item": 0, "prompts": ["...", "..."], "completions": ["...", "..."], "reward": 0.5}

``step`` is the number of optimizer updates the evaluated weights had (the reward curve's x),
``item`` the item's position among the evaluation items, ``prompts`` and ``completions`` one per
agent (a centralized team's joint completion split into roles). A multi-turn task's line has, in
place of ``completions`` and ``reward``, ``turns`` (each turn's completions, one per agent),
``turn_rewards`` (each turn's reward) and ``return`` (the trajectory's return, what
``eval/return_mean`` averages); its ``prompts`` are turn 1's.

The file is rewritten whole and atomically at each evaluation (old lines, then the new ones), so it
is never torn. The number of lines it holds is kept in every checkpoint: a resumed run first cuts
the file to the lines its checkpoint had seen, so the evaluations it runs again appear once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples
from comlrl_lightning.runtime.distributed import gather_objects
from comlrl_lightning.runtime.files import refuse_non_regular, write_atomically
from comlrl_lightning.runtime.text import valid_text

SAMPLES_FILE = "evaluation_samples.jsonl"
TABLE_KEY = "eval/samples"
"""The W&B table every evaluation's samples are logged as."""


def sample_records(
    samples: EvaluationSamples, step: int, rank: int = 0, world: int = 1, max_items: Optional[int] = None
) -> List[Dict[str, Any]]:
    """One JSON-ready record per item of ``samples`` (process ``rank``'s of ``world``: its ``j``-th
    item is evaluation item ``rank + j * world``), those of the first ``max_items`` items only
    (``None``: all), as the module docstring describes."""
    records = []
    for j, prompts in enumerate(samples.role_prompts):
        item = rank + j * world
        if max_items is not None and item >= max_items:
            break
        record: Dict[str, Any] = {"step": int(step), "item": item, "prompts": list(prompts)}
        turns = [list(turn) for turn in samples.earlier_turns[j]] + [list(samples.completions[j])]
        if samples.num_turns == 1:
            record.update(completions=turns[0], reward=samples.rewards[j])
        else:
            record.update(turns=turns, turn_rewards=list(samples.turn_rewards[j]), **{"return": samples.rewards[j]})
        records.append(record)
    return records


def table_columns(records: Sequence[Dict[str, Any]]) -> List[str]:
    """The W&B table's columns for ``records``: ``step``, ``item``, each agent's prompt, its completion
    (or its completion at each turn), and the reward (or each turn's reward and the return)."""
    agents = max((len(record["prompts"]) for record in records), default=0)
    turns = max((len(record.get("turns", [None])) for record in records), default=1)
    columns = ["step", "item"] + [f"agent_{a + 1}_prompt" for a in range(agents)]
    if turns == 1:
        return columns + [f"agent_{a + 1}_completion" for a in range(agents)] + ["reward"]
    columns += [f"agent_{a + 1}_turn_{t + 1}" for a in range(agents) for t in range(turns)]
    return columns + [f"turn_{t + 1}_reward" for t in range(turns)] + ["return"]


def table_row(record: Dict[str, Any], columns: Sequence[str]) -> List[Any]:
    """``record`` as one row of ``columns`` (:func:`table_columns`; ``None`` where a trajectory ended earlier)."""
    cells: Dict[str, Any] = {"step": record["step"], "item": record["item"]}
    for a, prompt in enumerate(record["prompts"]):
        cells[f"agent_{a + 1}_prompt"] = prompt
    for a, text in enumerate(record.get("completions", [])):
        cells[f"agent_{a + 1}_completion"] = text
    for t, texts in enumerate(record.get("turns", [])):
        cells.update({f"agent_{a + 1}_turn_{t + 1}": text for a, text in enumerate(texts)})
    for t, reward in enumerate(record.get("turn_rewards", [])):
        cells[f"turn_{t + 1}_reward"] = reward
    cells.update({key: record[key] for key in ("reward", "return") if key in record})
    return [cells.get(column) for column in columns]


def json_lines(records: Sequence[Dict[str, Any]]) -> bytes:
    """``records`` as JSON lines, each valid UTF-8 whatever a completion holds (a lone surrogate becomes U+FFFD)."""
    return "".join(valid_text(json.dumps(record, ensure_ascii=False)) + "\n" for record in records).encode("utf-8")


def rewrite_lines(path: Path, keep: Optional[int], new: bytes) -> int:
    """Replace ``path`` atomically by its first ``keep`` lines (``None``: all) and then ``new``; the
    number of lines it holds after."""
    refuse_non_regular(path, "the evaluation samples log")  # never read or written through a planted link
    old = path.read_bytes().splitlines(keepends=True) if path.exists() else []
    kept = old if keep is None else old[:keep]
    write_atomically(path, b"".join(kept) + new)
    return len(kept) + new.count(b"\n")


class SamplesLog(Callback):
    """Every evaluation's samples (each agent's prompt and completion per item, with the rewards) in
    ``<log_dir>/evaluation_samples.jsonl`` and, with a W&B logger, the table ``eval/samples``.

    It only reads: the samples the module kept after an evaluation (``evaluated_samples``), never
    the module's state or its data.

    Args:
        max_items: items of each evaluation written (the first ones; ``None``: every item).
        filename: the file's name inside the log folder.
    """

    def __init__(self, max_items: Optional[int] = 64, filename: str = SAMPLES_FILE) -> None:
        if max_items is not None and max_items < 1:
            raise ConfigurationError(f"SamplesLog max_items must be at least 1, or null for all (got {max_items}).")
        self.max_items, self.filename = max_items, filename
        self.written: Optional[Path] = None
        """The file written last (rank 0)."""
        self.lines = 0
        """Lines the file holds, counted by this run (kept in checkpoints)."""
        self.resumed: Optional[Dict[str, Any]] = None
        self.last: Optional[EvaluationSamples] = None  # the samples written last: each evaluation once

    @property
    def state_key(self) -> str:
        return f"{type(self).__qualname__}[{self.filename}]"

    def state_dict(self) -> Dict[str, Any]:
        return {"path": str(self.written) if self.written is not None else None, "lines": self.lines}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.resumed = dict(state_dict)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # after every restore (some strategies restore after on_fit_start), before any evaluation
        target, resumed, self.resumed = self.target(trainer), self.resumed, None
        if trainer.is_global_zero and resumed and resumed.get("path") == str(target) and target.exists():
            self.lines = rewrite_lines(target, int(resumed.get("lines") or 0), b"")  # what came after is run again
            self.written = target

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.log_samples(trainer, pl_module)  # the module's evaluation before the first update (on_train_start)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self.log_samples(trainer, pl_module)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.log_samples(trainer, pl_module)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.log_samples(trainer, pl_module)  # the module's evaluation after the last update (on_train_end)

    def target(self, trainer: Trainer) -> Path:
        """The file: in the log folder (``metrics.csv``'s), else the run's root folder."""
        return Path(trainer.log_dir or trainer.default_root_dir) / self.filename  # every rank asks: a broadcast

    def log_samples(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Write the samples of the module's last evaluation, unless written already or empty."""
        samples = getattr(pl_module, "evaluated_samples", None)
        if not isinstance(samples, EvaluationSamples) or samples is self.last or not samples.items:
            return
        self.last = samples
        step = int(getattr(pl_module, "weights_updates", trainer.global_step))
        mine = sample_records(samples, step, trainer.global_rank, trainer.world_size, self.max_items)
        records = sorted(
            (r for part in gather_objects(mine, trainer.world_size) for r in part), key=lambda r: r["item"]
        )
        target = self.target(trainer)
        if trainer.is_global_zero:
            self.write(trainer, target, records)

    def write(self, trainer: Trainer, target: Path, records: List[Dict[str, Any]]) -> None:
        """Append ``records`` to ``target`` (the whole file rewritten atomically) and to the W&B table."""
        target.parent.mkdir(parents=True, exist_ok=True)
        self.lines, first = rewrite_lines(target, None, json_lines(records)), self.written is None
        self.written = target
        if first:
            rank_zero_info(f"evaluation samples: {target}")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                columns = table_columns(records)
                logger.log_table(TABLE_KEY, columns, [table_row(record, columns) for record in records])


__all__ = ["SAMPLES_FILE", "TABLE_KEY", "SamplesLog", "json_lines", "sample_records", "table_columns", "table_row"]
