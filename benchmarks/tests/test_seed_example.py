"""benchmarks/seed_example.py: the seed's example at its own size, its checks, table and lines."""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
CONFIG_CALL = re.compile(r"^( *)args = MADPOIterConfig\(\n.*?^\1\)$", re.S | re.M)


def config_calls(text: str) -> list:
    """Every ``args = MADPOIterConfig(...)`` call of ``text``, dedented."""
    return [textwrap.dedent(found.group(0)) for found in CONFIG_CALL.finditer(text)]


@pytest.fixture
def seed_example(bench):
    return importlib.import_module("seed_example")


def full_size(**changes) -> dict:
    result = dict(
        updates=768,
        rounds=6,
        round_files=[f"iteration_{r:04d}.json" for r in range(1, 7)],
        reward=0.1234,
        wall_s=600.4,
        cpu_s=590.6,
        load_before=1.0,
        load_after=2.5,
    )
    return dict(result, **changes)


def test_the_benchmark_runs_the_config_the_docs_page_shows(seed_example):
    """The docs page's example (coming-from-comlrl.md) and the benchmark's run build the same config, as written."""
    page = (ROOT / "docs" / "coming-from-comlrl.md").read_text(encoding="utf-8")
    ours = config_calls(inspect.getsource(seed_example.run_example))
    assert len(ours) == 1 and ours == config_calls(page)
    assert "preference_replay_sample_size=256" in ours[0] and seed_example.SAMPLE_SIZE == 256


def test_problems_name_every_size_that_differs_from_the_example(seed_example):
    assert seed_example.problems(full_size()) == []
    found = seed_example.problems(full_size(updates=767, rounds=5, round_files=["iteration_0001.json"]))
    assert found[0].startswith("round files ['iteration_0001.json'], expected ['iteration_0001.json', ")
    assert found[1:] == ["767 updates, expected 768", "5 rounds, expected 6"]


def test_the_table_and_the_lines_hold_the_run(seed_example):
    table = seed_example.markdown(full_size(), "today", "2 usable cores")
    assert "| 6 | 768 | 600 | 591 | 0.1234 | 1.0 / 2.5 |" in table and "Every round trained." in table
    assert "`python benchmarks/seed_example.py`, today, 2 usable cores." in table
    short = seed_example.markdown(full_size(rounds=5, reward=None), "today", "x")
    assert (
        "| 5 | 768 | 600 | 591 | n/a |" in short and "Differs from the example's sizes: 5 rounds, expected 6." in short
    )
    assert seed_example.summary_lines(full_size()) == [
        "seed_example_wall_s: 600.4",
        "seed_example_cpu_s: 590.6",
        "seed_example_updates: 768",
        "seed_example_reward: 0.1234",
        "seed_example_problems: 0",
    ]
