"""Collection and evaluation progress: a live bar with a time estimate on a terminal, periodic lines in a log.

A collection has two phases, sampling (units: agent prompts, each sampled ``K`` times) and scoring
(units: items). Each phase is one :class:`Progress`:

* a tqdm bar with elapsed and remaining time, on rank 0, when the run shows Lightning's progress
  bar and standard output renders one (a terminal or a Jupyter kernel; see :func:`show_bars`);
  the bar is removed when the phase ends, and the collection's summary line stays;
* otherwise a line ``"<label>: <done>/<total> <unit>s (<s> elapsed, about <s> left)"`` through
  Lightning's ``rank_zero_info`` at most every ``interval`` seconds, so a log file shows that a
  long collection is moving without one line per batch.

Lightning's own progress bar redraws itself with carriage returns, which fill a log file; where
standard output renders no bar, :func:`progress_callbacks` gives a run :class:`ProgressLines` in its
place: one line per training epoch (a round of the iterative modules' training) with elapsed time
and an estimate, and one per evaluation in the validation loop with its headline metric.

Sampling advances after each batch a generation backend finishes: :class:`~comlrl_lightning.team.Team`
reports its batches through :func:`report_generated`, and :meth:`Progress.part` counts whatever a
backend did not report when its call returns, so a backend that reports nothing still advances
the bar once per call.
"""

from __future__ import annotations

import contextlib
import sys
import time
from contextvars import ContextVar
from typing import Any, Callable, Iterator, List, Optional

from lightning.pytorch.callbacks import Callback, ProgressBar
from lightning.pytorch.utilities import rank_zero_info

LINE_INTERVAL_S = 30.0
"""Seconds between two progress lines when no bar is shown."""

_generation_sink: ContextVar[Optional[Callable[[int], None]]] = ContextVar("generation_sink", default=None)


def report_generated(count: int) -> None:
    """Called by a generation backend after each batch: ``count`` more prompts are sampled.

    Does nothing outside :meth:`Progress.part`, so backends may call it unconditionally.
    """
    sink = _generation_sink.get()
    if sink is not None:
        sink(count)


def seconds_left(done: float, total: float, elapsed: float) -> Optional[float]:
    """Estimated seconds to finish at the average rate so far: ``elapsed / done * (total - done)``.

    ``None`` before the first unit is done (no rate yet).
    """
    if done <= 0:
        return None
    return elapsed / done * max(total - done, 0)


def progress_line(label: str, done: int, total: int, unit: str, elapsed: float) -> str:
    """``"<label>: <done>/<total> <unit>s (<elapsed>s elapsed, about <left>s left)"``."""
    left = seconds_left(done, total, elapsed)
    estimate = f", about {left:.0f}s left" if left is not None else ""
    return f"{label}: {done}/{total} {unit}s ({elapsed:.0f}s elapsed{estimate})"


def renders_live(stream: Any) -> bool:
    """Whether ``stream`` redraws a bar in place: a terminal, or a Jupyter kernel's output stream
    (which is no terminal, but its front end honours carriage returns)."""
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return True
    return type(stream).__module__.startswith("ipykernel")


def show_bars(trainer: Any) -> bool:
    """Live bars on rank 0 only, only when the run shows Lightning's progress bar, and only where
    standard output renders them (elsewhere a bar's redraws would fill the log)."""
    if trainer is None or not trainer.is_global_zero or trainer.progress_bar_callback is None:
        return False
    return renders_live(sys.stdout)


class Progress:
    """Progress of one phase of ``total`` units: a bar when ``bar``, else periodic lines.

    Args:
        label: what the phase is, e.g. ``"round 2/5 sampling"``.
        total: units in the phase.
        unit: the unit's name, singular (``"prompt"``, ``"item"``).
        bar: show a tqdm bar (see :func:`show_bars`) instead of lines.
        report: where lines go (rank 0 only by default).
        interval: seconds between lines.
        clock: monotonic seconds (replaceable in tests).
    """

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        bar: bool = False,
        report: Callable[[str], None] = rank_zero_info,
        interval: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.report, self.interval, self.clock = report, interval, clock
        self.done = 0
        self.started = self.last_line = clock()
        self.bar = None
        if bar:
            from tqdm import tqdm  # plain tqdm: tqdm.auto would need notebook widgets

            self.bar = tqdm(total=total, desc=label, unit=unit, file=sys.stdout, leave=False, dynamic_ncols=True)

    @classmethod
    def for_trainer(cls, trainer: Any, label: str, total: int, unit: str) -> "Progress":
        """A phase shown the way ``trainer``'s run shows progress (:func:`show_bars`)."""
        return cls(label, total, unit, bar=show_bars(trainer), interval=LINE_INTERVAL_S)

    def advance(self, count: int = 1) -> None:
        if count <= 0:
            return
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
            return
        now = self.clock()
        if now - self.last_line >= self.interval:
            self.last_line = now
            self.report(progress_line(self.label, self.done, self.total, self.unit, now - self.started))

    @contextlib.contextmanager
    def part(self, size: int) -> Iterator[None]:
        """A block worth ``size`` units: generation reports inside it advance this phase (at most
        ``size`` in all), and what they left out is added when the block ends."""
        outer = _generation_sink.get()  # a part inside a part counts toward the outer one
        forward = outer if outer is not None else self.advance
        reported = 0

        def sink(count: int) -> None:
            nonlocal reported
            step = min(count, size - reported)
            if step > 0:
                reported += step
                forward(step)

        token = _generation_sink.set(sink)
        try:
            yield
        finally:
            _generation_sink.reset(token)
        sink(size - reported)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class ProgressLines(ProgressBar):
    """Lightning's progress bar as lines, for output that is no terminal (a log file, CI).

    Prints ``"training: <epoch>/<epochs> epochs (<s> elapsed, about <s> left)"`` after each training
    epoch and ``"evaluation at <n> updates: <metric> = <value> (<s> elapsed)"`` after each evaluation
    in the validation loop; nothing is redrawn. Being a ``ProgressBar``, it takes the place of
    Lightning's bar (which needs ``enable_progress_bar`` left on).

    Args:
        report: where lines go (rank 0 only by default).
        clock: monotonic seconds (replaceable in tests).
    """

    def __init__(
        self, report: Callable[[str], None] = rank_zero_info, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.report, self.clock = report, clock
        self.enabled = True
        self.started: Optional[float] = None

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def _elapsed(self) -> float:
        if self.started is None:
            self.started = self.clock()
        return self.clock() - self.started

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.started = self.clock()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not self.enabled or not trainer.is_global_zero:
            return
        done, total = trainer.current_epoch + 1, trainer.max_epochs
        if total is None or total < 0:  # no epoch limit: no estimate
            self.report(f"training: epoch {done} ({self._elapsed():.0f}s elapsed)")
            return
        self.report(progress_line("training", done, total, "epoch", self._elapsed()))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not self.enabled or trainer.sanity_checking or not trainer.is_global_zero:
            return
        name = getattr(pl_module, "headline_metric", None)
        value = trainer.callback_metrics.get(name) if name else None
        result = f": {name} = {float(value):.4f}" if value is not None else ""
        self.report(f"evaluation at {trainer.global_step} updates{result} ({self._elapsed():.0f}s elapsed)")


def progress_callbacks(enabled: bool, given: List[Any]) -> List[Callback]:
    """``[ProgressLines()]`` for a run whose progress bar is ``enabled`` (``enable_progress_bar``)
    where standard output renders no bar and ``given`` (the run's callbacks) holds no progress bar;
    else nothing (Lightning's bar, or none)."""
    if not enabled or renders_live(sys.stdout) or any(isinstance(callback, ProgressBar) for callback in given):
        return []
    return [ProgressLines()]


__all__ = [
    "Progress",
    "ProgressLines",
    "progress_callbacks",
    "report_generated",
    "seconds_left",
    "progress_line",
    "renders_live",
    "show_bars",
]
