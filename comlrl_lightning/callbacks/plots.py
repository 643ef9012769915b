"""Figures of an iterative run: a round's reward distributions and the replay rules' weights.

Every function returns a :class:`matplotlib.figure.Figure` built without ``pyplot`` (no global
state, drawn with the Agg canvas), so it works in a training process, a script or a notebook
(in a notebook, show it as the cell's value or save it with ``figure.savefig``). Curves of logged
metrics are drawn by :mod:`comlrl_lightning.callbacks.curves`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from comlrl_lightning.rounds.replay import ReplayRule

TARGET_COLOR = "#e87030"
COMPARATOR_COLOR = "#6e6e6e"

Rules = Union[Mapping[str, ReplayRule], Sequence[ReplayRule]]


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # the Agg canvas: savefig and notebooks work without pyplot
    return figure


# ----------------------------------------------------------------------------------------------
# Reward distributions


def _series_label(side: str, series: Dict[str, Any]) -> str:
    mean = series["mean"]
    return f"{side} (n={series['sample_count']}" + (f", mean {mean:.3f})" if mean is not None else ")")


def reward_distribution_figure(record: Dict[str, Any]) -> Figure:
    """Histograms of one round's record (a dict read from a ``reward_distributions/iteration_NNNN.json``).

    Two panels side by side, the round's candidates and its selected training pairs; in each,
    every bin shows the target side (orange) and the comparator side (grey) next to each other,
    bars ``0.4`` of a bin wide, over the record's ``[reward_min, reward_max]``.
    """
    edges, centers = record["bin_edges"], record["bin_centers"]
    width = (edges[-1] - edges[0]) / record["num_bins"]
    figure = _figure(11.0, 3.8)
    panels = figure.subplots(1, 2)
    for axes, section, title in zip(panels, ("candidate", "selected"), ("Candidates", "Selected training pairs")):
        for side, color, offset in (("target", TARGET_COLOR, -0.2), ("comparator", COMPARATOR_COLOR, 0.2)):
            series = record[section][side]
            axes.bar(
                [c + offset * width for c in centers],
                series["counts"],
                width=0.4 * width,
                color=color,
                label=_series_label(side, series),
            )
        axes.set_xlim(edges[0], edges[-1])
        axes.set_title(title)
        axes.set_xlabel("raw reward")
        axes.set_ylabel("count")
        axes.legend(loc="best", fontsize="small")
    figure.suptitle(f"Reward distribution, round {record['iteration']}")
    return figure


# ----------------------------------------------------------------------------------------------
# Replay weights


def replay_weight_table(rules: Rules, num_rounds: int) -> Tuple[List[str], List[List[float]]]:
    """Each rule's name and its :meth:`ReplayRule.round_weights` over ``num_rounds`` non-empty rounds.

    Row ``m``, column ``i`` is the probability with which a draw of mode ``m`` picks round ``i + 1``
    when training at round ``num_rounds`` (0: not used); a list of rules is named by ``repr``.
    """
    named = list(rules.items()) if isinstance(rules, Mapping) else [(repr(rule), rule) for rule in rules]
    return [name for name, _ in named], [rule.round_weights([1] * num_rounds) for _, rule in named]


def replay_weights_figure(rules: Rules, num_rounds: int) -> Figure:
    """A grid of replay weights: one row per mode, one column per round dataset (1 to
    ``num_rounds``, newest on the right), each cell the weight with which the mode samples that
    round when training at round ``num_rounds``, annotated (``0``: not used)."""
    names, table = replay_weight_table(rules, num_rounds)
    figure = _figure(1.0 + 0.9 * num_rounds + 0.12 * max(len(name) for name in names), 0.8 + 0.6 * len(names))
    axes = figure.subplots()
    axes.imshow(table, cmap="Oranges", vmin=0.0, vmax=1.0, aspect="auto")
    for row, weights in enumerate(table):
        for column, weight in enumerate(weights):
            text = "0" if weight == 0 else f"{weight:.2f}"
            axes.text(column, row, text, ha="center", va="center", color="white" if weight > 0.6 else "black")
    axes.set_xticks(range(num_rounds), [str(number) for number in range(1, num_rounds + 1)])
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel(f"round dataset (training at round {num_rounds})")
    axes.set_title("Replay weights")
    return figure


__all__ = ["replay_weight_table", "replay_weights_figure", "reward_distribution_figure"]
