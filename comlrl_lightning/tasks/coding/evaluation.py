"""What the team wrote at each evaluation: pass@1 and the other coding metrics, and a readable sample.

:class:`CodingEvaluationLog` is a callback: it makes itself the team module's evaluation domain
metrics (:mod:`comlrl_lightning.modules.evaluation_metrics`), so every evaluation's joint samples
(one per held-out problem) come to it. It scores them again with the coding reward (the test runner
runs each combined program once more) and logs, beside ``eval/turn_1/reward_mean``:

* ``eval/pass_at_1``: share of problems whose combined program passes every test;
* ``eval/code_reward_mean``: mean reward before the training shift (0 to 4);
* ``eval/parse_rate``: share of combined programs that parse;
* ``eval/calls_aux_rate``: share where the entry point calls ``aux``.

With several turns these are the final answers', and ``eval/turn_<t>/pass_at_1`` (and the other three)
are the answers after turn ``t`` (a trajectory that ended earlier keeps its last answer); each
sample record then says its ``turn``.

The first ``sample_size`` programs, with both completions and their test reports, are appended to
``evaluation_programs.jsonl`` beside the CSV log (one JSON object per program, rewritten atomically),
and logged as a W&B table ``eval/programs`` when a W&B logger is attached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.files import write_atomically
from comlrl_lightning.runtime.text import one_line_text, valid_text
from comlrl_lightning.tasks.coding.reward import CodeScore, CooperativeCodeReward, cooperative_code_reward

if TYPE_CHECKING:
    from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples

SAMPLES_FILE = "evaluation_programs.jsonl"
TABLE_COLUMNS = [
    "step",
    "task_id",
    "reward",
    "status",
    "passed",
    "total",
    "program",
    "aux_completion",
    "main_completion",
]


def coding_metrics(scores: List[CodeScore]) -> Dict[str, float]:
    """pass@1, the mean reward, the parse share and the calls-``aux`` share of one evaluation's scores."""
    count = max(len(scores), 1)
    return {
        "pass_at_1": sum(score.passed_all for score in scores) / count,
        "code_reward_mean": sum(score.reward for score in scores) / count,
        "parse_rate": sum(score.joint.parses for score in scores) / count,
        "calls_aux_rate": sum(score.joint.calls_aux for score in scores) / count,
    }


DETAIL_CHARS = 400


def sample_record(step: int, item: Dict[str, Any], completions: List[str], score: CodeScore) -> Dict[str, Any]:
    """One evaluated program as the samples file keeps it: the report's detail as one safe line, every
    text valid UTF-8 (:mod:`comlrl_lightning.runtime.text`; a lone surrogate becomes U+FFFD)."""
    report = score.report
    task_id = item.get("task_id")
    return {
        "step": step,
        "task_id": valid_text(task_id) if isinstance(task_id, str) else task_id,
        "reward": score.reward,
        "status": getattr(report, "status", "not run"),
        "passed": getattr(report, "passed", 0),
        "total": getattr(report, "total", 0),
        "detail": one_line_text(str(getattr(report, "detail", "")), DETAIL_CHARS),
        "passed_all": score.passed_all,
        "parses": score.joint.parses,
        "calls_aux": score.joint.calls_aux,
        "program": valid_text(score.joint.program),
        "aux_completion": valid_text(completions[0]),
        "main_completion": valid_text(completions[1]),
    }


def answers_after_each_turn(samples: "EvaluationSamples") -> List[List[List[str]]]:
    """``answers[t][k]``: item ``k``'s joint answer (one completion per role) after turn ``t + 1``; a
    trajectory that ended before a turn keeps its last answer. One entry for a single-turn evaluation."""
    roles = len(samples.completions[0]) if samples.completions else 0
    per_role = [samples.turns_of(role) for role in range(roles)]
    turns = max((len(texts) for texts in per_role[0]), default=1) if per_role else 1
    return [
        [[per_role[r][k][min(t, len(per_role[r][k]) - 1)] for r in range(roles)] for k in range(len(samples.items))]
        for t in range(turns)
    ]


class CodingEvaluationLog(Callback):
    """Coding metrics of every evaluation and a sample of its programs (see the module's docstring).

    Args:
        sample_size: programs of each evaluation written to the samples file (and W&B table).
        reward: the reward that scores them (default: :data:`cooperative_code_reward`).
    """

    def __init__(self, sample_size: int = 8, reward: Optional[CooperativeCodeReward] = None) -> None:
        if sample_size < 0:
            raise ConfigurationError(f"CodingEvaluationLog sample_size must be at least 0 (got {sample_size}).")
        self.sample_size = sample_size
        self.reward = reward if reward is not None else cooperative_code_reward
        self.trainer: Any = None
        self.previous: Optional[Callable[[Any], Dict[str, Any]]] = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if not hasattr(pl_module, "evaluation_metrics"):
            raise ConfigurationError(f"CodingEvaluationLog needs a team module; {type(pl_module).__name__} is not one.")
        self.trainer = trainer
        if pl_module.evaluation_metrics is not self:
            self.previous = pl_module.evaluation_metrics  # a user's own metrics keep being logged
            pl_module.evaluation_metrics = self

    def __call__(self, samples: "EvaluationSamples") -> Dict[str, Any]:
        items = list(samples.items)
        metrics: Dict[str, Any] = dict(self.previous(samples)) if self.previous is not None else {}
        answers = answers_after_each_turn(samples)
        records = []
        for turn, completions in enumerate(answers, start=1):
            scores = self.reward.score([c[0] for c in completions], [c[1] for c in completions], items)
            if turn == len(answers):
                metrics.update(coding_metrics(scores))
            if len(answers) > 1:
                metrics.update({f"turn_{turn}/{key}": value for key, value in coding_metrics(scores).items()})
            shown = list(zip(items, completions, scores))[: self.sample_size]
            turn_key = {"turn": turn} if len(answers) > 1 else {}
            records += [{**sample_record(0, item, list(texts), score), **turn_key} for item, texts, score in shown]
        if self.trainer is not None and self.trainer.is_global_zero and self.sample_size:
            step = int(self.trainer.global_step)
            self.write([{**record, "step": step} for record in records])
        return metrics

    def folder(self) -> Path:
        """Where the samples file goes: the CSV log's folder, else the run's root folder."""
        for logger in self.trainer.loggers:
            if isinstance(logger, CSVLogger):
                return Path(logger.log_dir)
        return Path(self.trainer.default_root_dir)

    def write(self, records: List[Dict[str, Any]]) -> None:
        """Append ``records`` to the samples file (the whole file rewritten atomically) and the W&B table.
        Each line is valid UTF-8 whatever a record holds (a lone surrogate anywhere becomes U+FFFD)."""
        path = self.folder() / SAMPLES_FILE
        old = path.read_bytes() if path.is_file() else b""
        new = "".join(valid_text(json.dumps(record, ensure_ascii=False)) + "\n" for record in records).encode("utf-8")
        write_atomically(path, old + new)
        for logger in self.trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_table("eval/programs", TABLE_COLUMNS, [[r[c] for c in TABLE_COLUMNS] for r in records])


__all__ = ["CodingEvaluationLog", "answers_after_each_turn", "coding_metrics", "sample_record"]
