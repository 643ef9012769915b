"""``predict``'s output: each agent's completion for every item, with its reward, as a JSONL file.

``comlrl-lightning predict --config C --ckpt_path .../last.ckpt`` samples what an evaluation of the
checkpoint samples (the same items as ``test``, the same seeds: the rewards are the ones ``test``
averages) and writes one line per item, in the items' order:
``{"item": {...}, "prompts": [one per role], "completions": [one per role], "reward": r}`` (a
multi-turn task adds ``"earlier_turns"``: each earlier turn's completions, one per role). The file
is written whole or not at all, by rank 0, after every process's samples are gathered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples
from comlrl_lightning.runtime.distributed import gather_objects
from comlrl_lightning.runtime.files import write_atomically

PREDICTIONS_FILE = "predictions.jsonl"
"""The file ``predict`` writes in its log folder unless given another path."""


def completion_records(samples: EvaluationSamples) -> List[Dict[str, Any]]:
    """One JSON-ready record per item of ``samples``: the item, each role's prompt and completion, the reward."""
    records = []
    for k, item in enumerate(samples.items):
        record: Dict[str, Any] = {
            "item": item,
            "prompts": list(samples.role_prompts[k]),
            "completions": list(samples.completions[k]),
            "reward": samples.rewards[k],
        }
        if samples.earlier_turns[k]:
            record["earlier_turns"] = [list(turn) for turn in samples.earlier_turns[k]]
        records.append(record)
    return records


def in_item_order(parts: Sequence[Sequence[Any]]) -> List[Any]:
    """Every rank's records (``parts[r]``: rank ``r``'s share, every ``world``-th item from ``r``) in
    the items' order."""
    longest = max((len(part) for part in parts), default=0)
    return [part[position] for position in range(longest) for part in parts if position < len(part)]


def jsonl(records: Sequence[Dict[str, Any]]) -> bytes:
    """``records`` as JSON lines (values JSON cannot hold are written as their text)."""
    return "".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records).encode("utf-8")


class CompletionsWriter(BasePredictionWriter):
    """Writes ``predict``'s samples (the team module's ``predict_step`` returns them) as JSON lines.

    Args:
        path: the file (``None``: ``predictions.jsonl`` in the run's log folder, ``trainer.log_dir``).
    """

    def __init__(self, path: Optional[str] = None) -> None:
        super().__init__(write_interval="epoch")
        self.path = path
        self.written: Optional[Path] = None

    def target(self, trainer: Trainer) -> Path:
        """Where the file goes."""
        if self.path is not None:
            return Path(self.path)
        return Path(trainer.log_dir or trainer.default_root_dir) / PREDICTIONS_FILE

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        # one dataloader: a list of batches' samples (several: one such list per dataloader)
        batches = [p for p in predictions if isinstance(p, EvaluationSamples)]
        batches += [s for p in predictions if isinstance(p, list) for s in p if isinstance(s, EvaluationSamples)]
        mine = [record for samples in batches for record in completion_records(samples)]
        records = in_item_order(gather_objects(mine, trainer.world_size))
        target = self.target(trainer)  # every rank asks: log_dir is a broadcast
        if trainer.is_global_zero:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(target, jsonl(records))
            self.written = target
            rank_zero_info(f"predictions: {len(records)} items, each agent's completion and the reward, in {target}")


__all__ = ["PREDICTIONS_FILE", "CompletionsWriter", "completion_records", "in_item_order", "jsonl"]
