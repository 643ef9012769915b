"""The reference's reward-distribution panels: the same SVG markup, character for character."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from comlrl_lightning.callbacks.reward_distribution_svg import axis_tick, distribution_panels, distribution_svg
from tests.helpers.comlrl_scripts import reference_python

EDGES = np.linspace(-1.0, 1.0, 17)
TARGET = [0, 1, 2, 3, 0, 0, 5, 1, 0, 0, 0, 2, 0, 0, 0, 1]
COMPARATOR = [1, 0, 0, 0, 4, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 2]


def test_tick_labels_follow_the_magnitude():
    assert [axis_tick(v) for v in (2.0, -1.5, 0.25, 0.0625)] == ["2", "-1.5", "0.25", "0.062"]


def test_panels_have_the_reference_keys_and_nothing_without_series():
    panels = distribution_panels("iter/reward_distribution", "T", 3, EDGES, TARGET, COMPARATOR)
    assert sorted(panels) == [
        "iter/reward_distribution/iteration_0003/bar_plot",
        "iter/reward_distribution/iteration_0003/line_plot",
    ]
    assert all(markup.startswith('<div style="max-width:240px') for markup in panels.values())
    assert '<polyline points="' in panels["iter/reward_distribution/iteration_0003/line_plot"]
    assert 'fill="#e87030"' in panels["iter/reward_distribution/iteration_0003/bar_plot"]
    assert distribution_svg("T", EDGES, [], "line") == ""


@pytest.mark.slow
def test_the_markup_is_the_references(tmp_path):
    script = (
        "import json, numpy as np\n"
        "from comlrl.trainers.preference.iterative import MADPOIterTrainer\n"
        f"edges = np.linspace(-1.0, 1.0, 17); t = np.array({TARGET}); c = np.array({COMPARATOR})\n"
        "print(json.dumps({kind: MADPOIterTrainer._reward_distribution_image(kind=kind, title='A <b> & \"c\"', "
        "edges=edges, series=[('target', t), ('comparator', c)]).html for kind in ('line', 'bar')}))\n"
    )
    done = subprocess.run([str(reference_python()), "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reference = json.loads(done.stdout.strip().splitlines()[-1])
    import wandb

    for kind in ("line", "bar"):
        series = [("target", np.array(TARGET)), ("comparator", np.array(COMPARATOR))]
        assert wandb.Html(distribution_svg('A <b> & "c"', EDGES, series, kind)).html == reference[kind]
