"""The reward-curve plot: the evaluation reward against optimizer updates, as a PNG in the log folder.

The curve is the evaluations' headline metric, the one their printed line names
(:func:`~comlrl_lightning.modules.turn_evaluation.headline_key`): ``eval/turn_1/reward_mean`` for a
one-turn task, ``eval/return_mean`` (the mean return) for a multi-turn one; the y axis is labelled
with that name and the x axis has whole updates only.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from comlrl_lightning.contracts import evaluated_module
from comlrl_lightning.modules.turn_evaluation import RETURN_MEAN_KEY, TURN_1_KEY
from comlrl_lightning.runtime.files import write_atomically

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EVAL_KEY = TURN_1_KEY
"""The headline of a module that does not name its own (``headline_metric``)."""
TITLES = {TURN_1_KEY: "evaluation task reward", RETURN_MEAN_KEY: "evaluation return"}


def reward_curve_figure(points: Sequence[Tuple[int, float]], metric: str) -> "Figure":
    """``metric`` (its values ``points``: ``(updates, value)``) against optimizer updates: the y axis
    labelled ``metric``, ticks on whole updates only. A Figure on its own Agg canvas, without pyplot:
    switching the process's backend (``matplotlib.use``) would stop a notebook's inline figures."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps, values = zip(*sorted(points))
    figure = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    axis.plot(steps, values, marker="o")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # updates are whole: no tick between two
    axis.set_xlabel("optimizer updates")
    axis.set_ylabel(metric)
    axis.set_title(TITLES.get(metric, "evaluation"))
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def headline_metric(module: LightningModule) -> str:
    """The metric ``module``'s evaluations report first (a team module's ``headline_metric``)."""
    return str(getattr(module, "headline_metric", EVAL_KEY))


class RewardCurvePlot(Callback):
    """Plots the evaluation reward against optimizer updates into ``<log_dir>/reward_curve.png``.

    The reward is the evaluations' headline metric (the module's ``headline_metric``, the name the
    printed evaluation lines and the y axis give; for a multi-turn task the return). Points come from the module's evaluations before the first update and after the last (the
    :class:`~comlrl_lightning.contracts.EvaluatedModule` contract, checked when fitting starts)
    and from every validation loop. They are part of every checkpoint, so the plot of a resumed
    run covers the whole run.

    Args:
        filename: image name inside the trainer's log dir (or ``default_root_dir`` without a logger).
    """

    def __init__(self, filename: str = "reward_curve.png") -> None:
        self.filename = filename
        self.points: List[Tuple[int, float]] = []
        self.metric = EVAL_KEY
        """The metric plotted (the module's headline metric, read when fitting starts)."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            evaluated_module(pl_module, "RewardCurvePlot")

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.metric = headline_metric(pl_module)  # the data module's task is built by now

    @property
    def state_key(self) -> str:
        return f"{type(self).__qualname__}[{self.filename}]"  # two plots of one run keep their own points

    def state_dict(self) -> Dict[str, Any]:
        return {"points": [[step, value] for step, value in self.points]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.points = [(int(step), float(value)) for step, value in state_dict.get("points", [])]

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # after the module's on_train_start, which runs the evaluation before the first update
        if not self.points:
            self._record(trainer, evaluated_module(pl_module, "RewardCurvePlot").initial_eval_reward, 0)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking and self.metric in trainer.callback_metrics:
            self._record(trainer, float(trainer.callback_metrics[self.metric]), trainer.global_step)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # after the module's own on_train_end, which runs the final evaluation
        self._record(trainer, evaluated_module(pl_module, "RewardCurvePlot").final_eval_reward, trainer.global_step)
        # trainer.log_dir is a collective call under DDP: every rank asks, rank 0 plots
        self.plot(Path(trainer.log_dir or trainer.default_root_dir))

    def _record(self, trainer: Trainer, value: Optional[float], step: int) -> None:
        if value is not None and (not self.points or self.points[-1] != (step, value)):
            self.points.append((step, value))

    @rank_zero_only
    def plot(self, directory: Path) -> Optional[Path]:
        if not self.points:
            return None
        figure = reward_curve_figure(self.points, self.metric)
        path = directory / self.filename
        image = io.BytesIO()
        figure.savefig(image, format="png", dpi=120)
        write_atomically(path, image.getbuffer())  # replaced, never written through a link planted there
        rank_zero_info(f"reward curve: {path}")
        return path
