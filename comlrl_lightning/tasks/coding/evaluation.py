"""What the team wrote at each evaluation: pass@1 and the other coding metrics, and a readable sample.

:class:`CodingEvaluationLog` is an evaluation observer
(:class:`~comlrl_lightning.modules.evaluation_metrics.EvaluationObserver`): the team module hands it
every evaluation's joint samples (one per held-out problem) with what the configured reward reported
on each when the evaluation scored it (a :class:`~comlrl_lightning.tasks.coding.reward.CodeScore`
with the program's test report: each program's tests run once, under the run's ``timeout``). From
these it logs, beside ``eval/turn_1/reward_mean``:

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
from typing import Any, Callable, Dict, List, Optional

from lightning.pytorch.loggers import CSVLogger, WandbLogger

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.modules.evaluation_metrics import EvaluationObserver, EvaluationSamples
from comlrl_lightning.runtime.files import write_atomically
from comlrl_lightning.runtime.text import one_line_text, valid_text
from comlrl_lightning.tasks.coding.reward import CodeScore, CooperativeCodeReward

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


def answers_after_each_turn(samples: EvaluationSamples) -> List[List[List[str]]]:
    """``answers[t][k]``: item ``k``'s joint answer (one completion per role) after turn ``t + 1``; a
    trajectory that ended before a turn keeps its last answer. One entry for a single-turn evaluation."""
    roles = len(samples.completions[0]) if samples.completions else 0
    per_role = [samples.turns_of(role) for role in range(roles)]
    turns = max((len(texts) for texts in per_role[0]), default=1) if per_role else 1
    return [
        [[per_role[r][k][min(t, len(per_role[r][k]) - 1)] for r in range(roles)] for k in range(len(samples.items))]
        for t in range(turns)
    ]


def configured_reward(trainer: Any) -> CooperativeCodeReward:
    """The coding reward of the task the Trainer's data module runs (its ``timeout``, its runner)."""
    task = getattr(getattr(trainer, "datamodule", None), "task", None)
    reward = getattr(getattr(task, "oracle", None), "reward_func", None)
    if not isinstance(reward, CooperativeCodeReward):
        raise ConfigurationError(
            "CodingEvaluationLog needs the coding task's reward_func (comlrl_lightning.tasks.coding.cooperative_code_reward"
            f" or a CooperativeCodeReward); the run's is {reward!r}."
        )
    return reward


def answer_scores(
    samples: EvaluationSamples, answers: List[List[List[str]]], reward: Callable[[], CooperativeCodeReward]
) -> List[List[CodeScore]]:
    """``scores[t][k]``: the :class:`CodeScore` of item ``k``'s answer after turn ``t + 1``: the report
    the reward made when the evaluation scored it, else (a centralized team's evaluation, whose
    oracle keeps no reports) that answer scored now with ``reward()``, the run's configured reward."""
    scores: List[List[Optional[CodeScore]]] = [
        [samples.report_after_turn(k, turn) for k in range(len(samples.items))] for turn in range(len(answers))
    ]
    missing = [(t, k) for t, row in enumerate(scores) for k, score in enumerate(row) if score is None]
    if missing:
        made = reward().code_scores(
            [answers[t][k][0] for t, k in missing],
            [answers[t][k][1] for t, k in missing],
            [samples.items[k] for _, k in missing],
        )
        for (t, k), score in zip(missing, made):
            scores[t][k] = score
    return [[score for score in row if score is not None] for row in scores]


class CodingEvaluationLog(EvaluationObserver):
    """Coding metrics of every evaluation and a sample of its programs (see the module's docstring).

    Args:
        sample_size: programs of each evaluation written to the samples file (and W&B table).
    """

    def __init__(self, sample_size: int = 8) -> None:
        if sample_size < 0:
            raise ConfigurationError(f"CodingEvaluationLog sample_size must be at least 0 (got {sample_size}).")
        self.sample_size = sample_size

    def on_evaluation_samples(self, trainer: Any, pl_module: Any, samples: EvaluationSamples) -> Dict[str, Any]:
        items = list(samples.items)
        metrics: Dict[str, Any] = {}
        answers = answers_after_each_turn(samples)
        scores_after = answer_scores(samples, answers, lambda: configured_reward(trainer))
        records = []
        for turn, (completions, scores) in enumerate(zip(answers, scores_after), start=1):
            if turn == len(answers):
                metrics.update(coding_metrics(scores))
            if len(answers) > 1:
                metrics.update({f"turn_{turn}/{key}": value for key, value in coding_metrics(scores).items()})
            shown = list(zip(items, completions, scores))[: self.sample_size]
            turn_key = {"turn": turn} if len(answers) > 1 else {}
            records += [{**sample_record(0, item, list(texts), score), **turn_key} for item, texts, score in shown]
        if trainer is not None and trainer.is_global_zero and self.sample_size:
            step = int(trainer.global_step)
            self.write(trainer, [{**record, "step": step} for record in records])
        return metrics

    @staticmethod
    def folder(trainer: Any) -> Path:
        """Where the samples file goes: the CSV log's folder, else the run's root folder."""
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                return Path(logger.log_dir)
        return Path(trainer.default_root_dir)

    def write(self, trainer: Any, records: List[Dict[str, Any]]) -> None:
        """Append ``records`` to the samples file (the whole file rewritten atomically) and the W&B table.
        Each line is valid UTF-8 whatever a record holds (a lone surrogate anywhere becomes U+FFFD)."""
        path = self.folder(trainer) / SAMPLES_FILE
        old = path.read_bytes() if path.is_file() else b""
        new = "".join(valid_text(json.dumps(record, ensure_ascii=False)) + "\n" for record in records).encode("utf-8")
        write_atomically(path, old + new)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_table("eval/programs", TABLE_COLUMNS, [[r[c] for c in TABLE_COLUMNS] for r in records])


__all__ = [
    "CodingEvaluationLog",
    "answer_scores",
    "answers_after_each_turn",
    "coding_metrics",
    "configured_reward",
    "sample_record",
]
