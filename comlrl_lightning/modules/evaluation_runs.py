"""Every way a team is evaluated, alike: the seeds of an evaluation, ``test``'s metric names, and
the ``test`` step of a team module (:class:`EvaluationRuns`; its ``predict`` step is the team module's).

**Seeds.** An evaluation samples one joint answer per item; batch ``b`` of the evaluation items
(``eval_batch_size`` items each, in their order) draws from a stream derived from the module's
``seed``, the number of updates the weights have had, the process's rank and ``b``
(:func:`evaluation_stream`). Nothing else enters: not the entry point (``fit``'s evaluations, the
evaluation after the last update, ``validate``, ``test``, ``predict``, the seed API's
``evaluate()``), not the label the run prints, not the Trainer. So the same weights, items,
``eval_batch_size``, sampling settings and number of processes give the same samples and the same
numbers from every entry point. The weights' update count is the running fit's ``global_step``, and
outside a fit the count of the checkpoint loaded last or of the fit that ran last
(:attr:`EvaluationRuns.weights_updates`). The untrained weights (0 updates) keep the key their
evaluation has always had (``"before training"``), so the first numbers the docs quote stand.

**Names.** ``test`` logs what ``validate`` logs, with ``test/`` in place of ``eval/``
(:func:`stage_metric`); ``predict`` returns the samples an evaluation draws, with their rewards.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from lightning.pytorch import LightningModule
from lightning.pytorch.trainer.states import TrainerFn

from comlrl_lightning.runtime.compat import attached_trainer
from comlrl_lightning.runtime.rng import RandomStream

BEFORE_TRAINING = "before training"
"""The key of the untrained weights' evaluation stream."""
EVAL_PREFIX, TEST_PREFIX = "eval/", "test/"


def evaluation_stream_keys(updates: int, rank: int, batch: int) -> tuple:
    """The keys of evaluation batch ``batch`` on process ``rank`` of weights after ``updates`` updates."""
    if updates == 0:
        return ("eval", 0, rank, BEFORE_TRAINING, batch)
    return ("eval", updates, rank, batch)


def evaluation_stream(seed: int, updates: int, rank: int, batch: int) -> RandomStream:
    """The stream evaluation batch ``batch`` samples from (:func:`evaluation_stream_keys` under ``seed``)."""
    return RandomStream.derive(seed, *evaluation_stream_keys(updates, rank, batch))


def stage_metric(name: str, testing: bool) -> str:
    """The name an evaluation metric ``name`` is logged under: ``test/...`` for an ``eval/...`` one
    while testing, else ``name`` as it is."""
    if testing and name.startswith(EVAL_PREFIX):
        return TEST_PREFIX + name[len(EVAL_PREFIX) :]
    return name


class EvaluationRuns(LightningModule):
    """A team module's evaluation seeds (:meth:`evaluation_batch_stream`) and its ``test`` step: the
    validation step's evaluation, logged as ``test/...``."""

    seed: int
    trained_updates: int = 0
    """The updates of the weights outside a fit: the last fit's, or the checkpoint's loaded last."""

    @property
    def weights_updates(self) -> int:
        """The updates the weights have had: the running fit's ``global_step``, else :attr:`trained_updates`."""
        trainer = attached_trainer(self)
        fitting = trainer is not None and trainer.state.fn == TrainerFn.FITTING
        return self.global_step if fitting else self.trained_updates

    def evaluation_batch_stream(self, batch: int) -> RandomStream:
        """The stream of evaluation batch ``batch`` of these weights (:func:`evaluation_stream`)."""
        # the weights and the batch, never the entry point; derived, so no other sampling shifts
        return evaluation_stream(self.seed, self.weights_updates, self.global_rank, batch)

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log``; while testing, an ``eval/...`` metric is logged as ``test/...``."""
        trainer = attached_trainer(self)
        super().log(stage_metric(name, trainer is not None and trainer.testing), value, *args, **kwargs)

    def test_step(self, batch: List[Optional[Dict[str, Any]]], batch_idx: int) -> None:
        """``test``: the validation step on the test items (its metrics named ``test/...``, :meth:`log`)."""
        self.validation_step(batch, batch_idx)

    def on_test_epoch_start(self) -> None:
        self.on_validation_epoch_start()

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()


__all__ = ["BEFORE_TRAINING", "EvaluationRuns", "evaluation_stream", "evaluation_stream_keys", "stage_metric"]
