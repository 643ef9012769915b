"""Training curves from a CSV log: read a CSVLogger ``metrics.csv`` into per-key series and plot them.

A CSVLogger writes one row per ``log_metrics`` call, with a ``step`` column and one column per key
ever logged; a row leaves the keys it did not log empty. :func:`read_metrics` turns the file into
per-key series against ``step`` (or another logged key such as ``reward_model/epoch``), and
:func:`plot_curves` draws chosen keys, one panel each. The figure is a plain
:class:`matplotlib.figure.Figure`, made without pyplot: it needs no display, never changes the
process's backend, and shows inline in a notebook when it is a cell's value.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

from comlrl_lightning.errors import DataError, MissingPathError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METRICS_FILE = "metrics.csv"

Row = Dict[str, float]
Series = Tuple[List[float], List[float]]  # (x values, metric values), in file order
PathLike = Union[str, os.PathLike]


def metrics_file(source: PathLike) -> Path:
    """``source`` itself when it is a file, else ``metrics.csv`` inside the folder ``source``."""
    path = Path(source)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise MissingPathError(
            f"no CSV metrics at {path} (a CSVLogger writes <save_dir>/<name>/version_<n>/{METRICS_FILE})"
        )
    return path


def read_metric_rows(source: PathLike) -> List[Row]:
    """The rows of a CSVLogger metrics file (or of the ``metrics.csv`` in a folder), in file order,
    each holding only the keys it logged, as floats (empty and non-numeric cells are left out)."""
    with metrics_file(source).open(newline="") as handle:
        return [_numeric_cells(row) for row in csv.DictReader(handle)]


def _numeric_cells(row: Dict[str, str]) -> Row:
    cells: Row = {}
    for key, text in row.items():
        try:
            value = float(text)
        except (TypeError, ValueError):
            continue  # an empty cell: the row did not log this key
        if not math.isnan(value):
            cells[key] = value
    return cells


def metric_series(rows: Sequence[Row], key: str, x: str = "step") -> Series:
    """``key`` against ``x`` over the rows that logged both, in row order."""
    chosen = [row for row in rows if key in row and x in row]
    return [row[x] for row in chosen], [row[key] for row in chosen]


def read_metrics(source: PathLike, x: str = "step") -> Dict[str, Series]:
    """Every logged key of a CSVLogger metrics file as a series against ``x`` (``x`` itself excluded)."""
    rows = read_metric_rows(source)
    keys = sorted({key for row in rows for key in row} - {x})
    return {key: series for key in keys if (series := metric_series(rows, key, x))[0]}


def grouped_series(rows: Sequence[Row], key: str, x: str, group_by: str) -> Dict[float, Series]:
    """``key`` against ``x``, one series per value of ``group_by`` (e.g. one reward-model fit per round)."""
    groups = sorted({row[group_by] for row in rows if group_by in row and key in row and x in row})
    return {group: metric_series([row for row in rows if row.get(group_by) == group], key, x) for group in groups}


def plot_curves(
    source: Union[PathLike, Sequence[Row]],
    keys: Sequence[str],
    x: str = "step",
    group_by: Optional[str] = None,
    title: Optional[str] = None,
    path: Optional[PathLike] = None,
) -> "Figure":
    """One panel per key, plotted against ``x``, from a CSVLogger metrics file, its folder, or rows
    from :func:`read_metric_rows`.

    Args:
        source: ``metrics.csv``, the folder that holds it, or already read rows.
        keys: the metrics to draw, top to bottom; a key that was never logged is an error.
        x: the horizontal axis, any logged key (default ``step``, the optimizer updates).
        group_by: draw one line per value of this key (e.g. ``reward_model/iteration``).
        title: the figure's title.
        path: also save the figure there (PNG by the file's suffix).

    Returns:
        The figure.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    rows = list(source) if not isinstance(source, (str, os.PathLike)) else read_metric_rows(source)
    missing = [key for key in keys if not metric_series(rows, key, x)[0]]
    if not keys or missing:
        logged = sorted({key for row in rows for key in row})
        raise DataError(f"no values of {missing or 'any key'} against {x!r}; logged keys: {', '.join(logged)}")
    figure = Figure(figsize=(6.4, 2.4 * len(keys) + 0.4), layout="constrained")
    axes = figure.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    for axis, key in zip(axes, keys):
        lines = grouped_series(rows, key, x, group_by) if group_by else {None: metric_series(rows, key, x)}
        for group, (xs, ys) in lines.items():
            axis.plot(xs, ys, marker="o", markersize=3, label=None if group is None else f"{group_by} = {group:g}")
        if all(value.is_integer() for xs, _ in lines.values() for value in xs):
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and epochs: no ticks between them
        axis.set_ylabel(key)
        axis.grid(alpha=0.3)
        if group_by and len(lines) > 1:
            axis.legend(fontsize="small")
    axes[-1].set_xlabel(x)
    if title:
        figure.suptitle(title)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=120)
    return figure
