"""Per-round reward distributions of an iterative run: histograms, their JSON record, a callback.

Every round, two distributions of RAW rewards (before any reward processor) are recorded, each
for the target side (the team being trained) and the comparator side:

* ``candidate``: every candidate scored in the round's collection, both sides (items x K each);
* ``selected``: the round's training pairs, as the replay rule drew them (possibly from older
  rounds), by their ``target_raw_reward`` / ``comparator_raw_reward``; a pair missing either is
  skipped.

Non-finite values are dropped. Each series is binned into 16 equal bins over the reward
function's declared ``reward_range = (minimum, maximum)`` after clipping into that range, and the
round's record goes to ``<directory>/iteration_NNNN.json`` (1-based) in the layout of the
reference (CoMLRL)'s ``log_reward_distribution``, byte for byte.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from lightning.pytorch import Callback, LightningModule, Trainer

from comlrl_lightning.contracts import round_source, team_side
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.result import CollectionResult
from comlrl_lightning.runtime.files import write_atomically
from comlrl_lightning.tasks.oracle import resolve_callable, resolve_reward_range

NUM_BINS = 16
"""Histogram bins over the reward range (as the reference)."""

CANDIDATE_NAMESPACE = "iter/reward_distribution"
SELECTED_NAMESPACE = "iter/selected_reward_distribution"
PLOT_TAG = "iter/reward_distribution/plot"
REQUIRED_BY = "RewardDistributions (log_reward_distribution=True)"
"""Who needs the reward function's declared range, as its error says."""


class RewardSides(NamedTuple):
    """Raw rewards of the two sides of a round's comparisons."""

    target: List[float]
    comparator: List[float]


# ----------------------------------------------------------------------------------------------
# The math and the record


def bin_edges(reward_range: Tuple[float, float], num_bins: int = NUM_BINS) -> np.ndarray:
    """``num_bins + 1`` equal-width edges ``e_i = lo + i (hi - lo) / num_bins`` (``numpy.linspace``)."""
    return np.linspace(reward_range[0], reward_range[1], num_bins + 1)


def finite_rewards(values: Sequence[Any]) -> List[float]:
    """The values as floats, NaN and ±inf dropped, order kept."""
    return [float(value) for value in values if math.isfinite(float(value))]


def histogram_counts(rewards: Sequence[float], edges: np.ndarray) -> List[int]:
    """Counts per bin of ``clip(r, e_0, e_n)`` under ``numpy.histogram``'s bins.

    Bin ``i`` holds ``e_i <= r < e_{i+1}``; the last bin also holds ``r = e_n``. Clipping first
    puts every value below the range into the first bin and every value above it into the last,
    so the counts always sum to ``len(rewards)``. No rewards: all zeros.
    """
    if len(rewards) == 0:
        return [0] * (len(edges) - 1)
    clipped = np.clip(np.asarray(rewards, dtype=float), float(edges[0]), float(edges[-1]))
    counts, _ = np.histogram(clipped, bins=edges)
    return [int(count) for count in counts.tolist()]


def series_record(rewards: Sequence[float], edges: np.ndarray) -> Dict[str, Any]:
    """``{sample_count, mean, counts, raw_rewards}`` of the finite ``rewards`` (``mean`` is
    ``numpy.mean``, ``None`` when there are none)."""
    finite = finite_rewards(rewards)
    return {
        "sample_count": len(finite),
        "mean": float(np.mean(finite)) if finite else None,
        "counts": histogram_counts(finite, edges),
        "raw_rewards": finite,
    }


def distribution_record(
    iteration: int, reward_range: Tuple[float, float], candidate: RewardSides, selected: RewardSides
) -> Dict[str, Any]:
    """A round's record, keys in the reference's order: ``iteration`` (1-based), ``reward_min``,
    ``reward_max``, ``num_bins``, ``bin_edges`` (``num_bins + 1``), ``bin_centers``
    (``(e_i + e_{i+1}) / 2``), then ``candidate`` and ``selected``, each ``{target, comparator}``
    of :func:`series_record`."""
    edges = bin_edges(reward_range)
    return {
        "iteration": int(iteration),
        "reward_min": float(edges[0]),
        "reward_max": float(edges[-1]),
        "num_bins": NUM_BINS,
        "bin_edges": [float(value) for value in edges.tolist()],
        "bin_centers": [float(value) for value in ((edges[:-1] + edges[1:]) / 2.0).tolist()],
        "candidate": {
            "target": series_record(candidate.target, edges),
            "comparator": series_record(candidate.comparator, edges),
        },
        "selected": {
            "target": series_record(selected.target, edges),
            "comparator": series_record(selected.comparator, edges),
        },
    }


def has_samples(record: Dict[str, Any]) -> bool:
    """Whether any series of the record holds a reward (the reference writes only such records)."""
    return any(
        series["sample_count"] > 0 for section in ("candidate", "selected") for series in record[section].values()
    )


def candidate_rewards(collection: CollectionResult) -> RewardSides:
    """Every candidate's finite raw reward of a round's collection, item by item, per side."""
    return RewardSides(
        target=finite_rewards([value for per_item in collection.target_raw_rewards for value in per_item]),
        comparator=finite_rewards([value for per_item in collection.comparator_raw_rewards for value in per_item]),
    )


def selected_rewards(pairs: Sequence[PreferencePair]) -> RewardSides:
    """The training pairs' ``target_raw_reward`` and ``comparator_raw_reward``; a pair missing
    either is skipped, and each side drops its own non-finite values (as the reference)."""
    target: List[float] = []
    comparator: List[float] = []
    for pair in pairs:
        if pair.target_raw_reward is None or pair.comparator_raw_reward is None:
            continue
        target += finite_rewards([pair.target_raw_reward])
        comparator += finite_rewards([pair.comparator_raw_reward])
    return RewardSides(target, comparator)


def distribution_metrics(
    namespace: str, iteration: int, sides: RewardSides, pair_count: Optional[int] = None
) -> Dict[str, float]:
    """``<namespace>/{current_iteration, pair_count, target_sample_count, comparator_sample_count,
    target_mean, comparator_mean}``; ``pair_count`` only when given, a mean only for a side with
    rewards, nothing at all when both sides are empty (as the reference)."""
    if not sides.target and not sides.comparator:
        return {}
    metrics = {f"{namespace}/current_iteration": float(iteration)}
    if pair_count is not None:
        metrics[f"{namespace}/pair_count"] = float(pair_count)
    metrics[f"{namespace}/target_sample_count"] = float(len(sides.target))
    metrics[f"{namespace}/comparator_sample_count"] = float(len(sides.comparator))
    if sides.target:
        metrics[f"{namespace}/target_mean"] = float(np.mean(sides.target))
    if sides.comparator:
        metrics[f"{namespace}/comparator_mean"] = float(np.mean(sides.comparator))
    return metrics


def encode_record(record: Dict[str, Any]) -> bytes:
    """The record's file bytes: ``json.dumps(record, ensure_ascii=False, indent=2)`` as UTF-8, the
    same bytes as the reference's ``json.dump`` into a UTF-8 text file."""
    return json.dumps(record, ensure_ascii=False, indent=2).encode("utf-8")


def record_path(directory: Path, iteration: int) -> Path:
    return Path(directory) / f"iteration_{iteration:04d}.json"


def write_record(directory: Path, record: Dict[str, Any]) -> Path:
    """Write ``<directory>/iteration_NNNN.json`` atomically (never a torn file) and return its path."""
    path = record_path(directory, record["iteration"])
    write_atomically(path, encode_record(record))
    return path


# ----------------------------------------------------------------------------------------------
# The callback


class RewardDistributions(Callback):
    """Writes, logs and plots each round's reward distributions (the reference's ``log_reward_distribution``).

    Once per round, after :class:`~comlrl_lightning.datamodules.IterativePreferenceDataModule` has
    built it (Lightning reloads the train dataloader, which builds the round, just before
    ``on_train_epoch_start``), on global rank 0:

    * ``<directory>/iteration_NNNN.json``: the record of :func:`distribution_record` (only when
      some series holds a reward);
    * ``<directory>/iteration_NNNN.png``: :func:`comlrl_lightning.callbacks.plots.reward_distribution_figure`,
      also sent to a TensorBoard logger (``add_figure``) or a W&B logger (``log_image``) under
      ``iter/reward_distribution/plot``;
    * metrics ``iter/reward_distribution/*`` and ``iter/selected_reward_distribution/*`` (see
      :func:`distribution_metrics`) through the module's loggers, and to a W&B logger the
      reference's panels ``.../iteration_NNNN/line_plot`` and ``bar_plot`` (:func:`log_panels`).

    Every rank holds the whole round (collection results are gathered on every rank), so the
    files are complete under DDP. A run resumed inside a round does not report that round again:
    its candidates were collected by the process that was stopped.

    The reward function must declare ``reward_range = (minimum, maximum)``; without a valid one
    the run fails while the data module is set up, before the model is loaded.

    Args:
        directory: where the files go (default ``<trainer.default_root_dir>/reward_distributions``).
    """

    def __init__(self, directory: Optional[str] = None) -> None:
        self.directory = directory
        self.output: Optional[Path] = None
        self.reward_range: Optional[Tuple[float, float]] = None
        self._reported: Optional[CollectionResult] = None

    def check_data_module(self, datamodule: Any) -> None:
        """Fail unless ``datamodule`` builds rounds (:class:`~comlrl_lightning.contracts.RoundSource`)
        and its reward function declares a valid range.

        The iterative data module calls it in its ``setup``, before the team is loaded; :meth:`setup`
        calls it again for any other data module.
        """
        source = round_source(datamodule, "RewardDistributions")
        reward_func = resolve_callable(source.reward_func, "reward_func")
        self.reward_range = resolve_reward_range(reward_func, required_by=REQUIRED_BY)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.check_data_module(trainer.datamodule)  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
        self.output = (
            Path(self.directory) if self.directory else Path(trainer.default_root_dir) / "reward_distributions"
        )
        self._reported = None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        source = round_source(trainer.datamodule, "RewardDistributions")  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
        round_index, collection = source.round_collection()
        # a round spans num_train_epochs epochs: only the epoch that built it has a new collection
        if collection is None or round_index is None or collection is self._reported:
            return
        self._reported = collection
        _, pairs = source.round_pairs()
        self.report_round(trainer, round_index + 1, candidate_rewards(collection), list(pairs or []))

    def report_round(
        self, trainer: Trainer, iteration: int, candidate: RewardSides, pairs: List[PreferencePair]
    ) -> None:
        """Log the round's metrics (every rank; loggers write on rank 0) and, on rank 0, write its files."""
        selected = selected_rewards(pairs)
        metrics = distribution_metrics(CANDIDATE_NAMESPACE, iteration, candidate)
        if pairs:
            metrics.update(distribution_metrics(SELECTED_NAMESPACE, iteration, selected, pair_count=len(pairs)))
        if metrics:
            team_side(trainer).log_metrics_now(metrics)
        assert self.reward_range is not None and self.output is not None, "set up in setup()"
        record = distribution_record(iteration, self.reward_range, candidate, selected)
        if trainer.is_global_zero and has_samples(record):
            log_panels(trainer.loggers, record, pairs_selected=bool(pairs), step=trainer.global_step)
            path = write_record(self.output, record)
            self.plot(trainer, record, path.with_suffix(".png"))

    def plot(self, trainer: Trainer, record: Dict[str, Any], path: Path) -> None:
        from comlrl_lightning.callbacks.plots import (
            reward_distribution_figure,  # matplotlib only once a round is plotted
        )

        figure = reward_distribution_figure(record)
        image = io.BytesIO()
        figure.savefig(image, format="png", dpi=100)
        write_atomically(path, image.getbuffer())
        log_figure(trainer.loggers, PLOT_TAG, figure, path, trainer.global_step)


PANEL_TITLES = {
    "candidate": (CANDIDATE_NAMESPACE, "Candidate Reward Distribution"),
    "selected": (SELECTED_NAMESPACE, "Selected Preference Reward Distribution"),
}


def log_panels(loggers: Sequence[Any], record: Dict[str, Any], pairs_selected: bool, step: int) -> None:
    """Send a round's ``line_plot`` / ``bar_plot`` panels (the reference's keys and SVG markup, as
    ``wandb.Html``) to every W&B logger; a section without rewards (or, for ``selected``, without
    pairs) has none, as in the reference."""
    from lightning.pytorch.loggers import WandbLogger

    from comlrl_lightning.callbacks.reward_distribution_svg import distribution_panels

    wandb_loggers = [logger for logger in loggers if isinstance(logger, WandbLogger)]
    if not wandb_loggers:
        return
    import wandb

    panels: Dict[str, Any] = {}
    edges = np.asarray(record["bin_edges"])
    for section, (namespace, title) in PANEL_TITLES.items():
        sides = record[section]
        if section == "selected" and not pairs_selected or not any(s["sample_count"] for s in sides.values()):
            continue
        counts = [sides[side]["counts"] for side in ("target", "comparator")]
        for key, markup in distribution_panels(namespace, title, record["iteration"], edges, *counts).items():
            panels[key] = wandb.Html(markup)
    for logger in wandb_loggers:
        logger.log_metrics(panels, step=step)


def log_figure(loggers: Sequence[Any], tag: str, figure: Any, png_path: Path, step: int) -> None:
    """Send a figure to every logger that takes images: TensorBoard (``add_figure``) and W&B
    (``log_image``, from the saved PNG); other loggers (CSV) keep only the file."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure(tag, figure, global_step=step, close=False)
        elif isinstance(logger, WandbLogger):
            logger.log_image(key=tag, images=[str(png_path)], step=step)


__all__ = [
    "NUM_BINS",
    "RewardDistributions",
    "RewardSides",
    "bin_edges",
    "candidate_rewards",
    "distribution_metrics",
    "distribution_record",
    "encode_record",
    "histogram_counts",
    "selected_rewards",
    "series_record",
    "write_record",
]
