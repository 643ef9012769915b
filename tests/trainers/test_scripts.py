"""CoMLRL-style scripts (tests/trainers/scripts/) run here with only their import prefix changed, and
(slow) unchanged against the reference (CoMLRL) in its venv, which must print the same RESULT.

Each script records only what both libraries must agree on (attributes, keys, messages, counts),
never sampled values: the two sample with different random streams.
"""

from __future__ import annotations

import subprocess
from typing import Dict

import pytest

from tests.helpers.comlrl_scripts import reference_result, run_here, run_reference_each

SCRIPTS = {
    "madpo_attributes.py": {},
    "constructor_errors.py": {},
    "eval_callbacks.py": {},
    "marlhf_attributes.py": {},
    "generation_kwargs.py": {},
    "model_config.py": {},
    "centralized_eval.py": {},
}
"""Each script and the environment it runs with."""

FAITHFUL = [
    "madpo_attributes.py",
    "constructor_errors.py",
    "eval_callbacks.py",
    "marlhf_attributes.py",
    "generation_kwargs.py",
    "model_config.py",
    "centralized_eval.py",
]
"""The scripts also run against the reference, whose RESULT must be the same."""


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_comlrl_script_runs_with_only_its_import_prefix_changed(name, tmp_path, monkeypatch, capsys):
    result = run_here(name, tmp_path, monkeypatch, capsys, SCRIPTS[name])
    assert result


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory) -> Dict[str, "subprocess.CompletedProcess[str]"]:
    """Every faithful script run against the reference, each in a process of its own forked from one
    that imported the reference once (the import is about 10 s of CPU)."""
    return run_reference_each({name: SCRIPTS[name] for name in FAITHFUL}, tmp_path_factory.mktemp("reference"))


@pytest.mark.slow
@pytest.mark.parametrize("name", FAITHFUL)
def test_the_reference_gives_the_same_result(name, tmp_path, monkeypatch, capsys, reference_runs):
    ours = run_here(name, tmp_path, monkeypatch, capsys, SCRIPTS[name])
    assert reference_result(reference_runs[name], name) == ours
