"""``import comlrl_lightning`` (and every module in it) changes nothing global: no warning filter, no
environment variable, no logger's level, filter or handler. The entry points that own a process (the
``comlrl-lightning`` command, the seed API's trainers) install the package's noise filters themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def helper(*words: str) -> str:
    """Run ``tests/helpers/import_effects.py`` in a fresh interpreter; its standard output."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "tests.helpers.import_effects", *words]
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # two fresh interpreters, each importing torch, Lightning and transformers
def test_importing_the_package_and_every_module_in_it_changes_nothing_global(tmp_path):
    # what the package's imports load from elsewhere is imported first: a third-party import's own
    # effects (torch's environment variables, Lightning's loggers) are not the package's
    others = tmp_path / "modules.json"
    others.write_text(helper("modules"), encoding="utf-8")
    assert "lightning" in json.loads(others.read_text(encoding="utf-8"))
    assert json.loads(helper("effects", str(others))) == {"filters": [], "env": [], "loggers": []}


def test_the_change_report_names_a_filter_a_variable_and_a_logger():
    from tests.helpers.import_effects import changes

    before = {"filters": ["a"], "env": {"HOME": "/h"}, "loggers": {"": [30, [], ["h"], True, False]}}
    after = {
        "filters": ["b", "a"],
        "env": {"HOME": "/h", "X": "1"},
        "loggers": {
            "": [30, [], ["h"], True, False],
            "new": [0, ["f"], [], True, False],
            "bare": [0, [], [], True, False],
        },
    }
    assert changes(before, after) == {"filters": ["b"], "env": ["X"], "loggers": ["new"]}
    assert changes(before, before) == {"filters": [], "env": [], "loggers": []}


def noise_filters_installed() -> bool:
    import logging

    from comlrl_lightning.runtime.quiet import LIGHTNING_RANK_ZERO_LOGGER, PYTREE_DEPRECATION, DropCommercialLoggerTip

    logger = logging.getLogger(LIGHTNING_RANK_ZERO_LOGGER)
    tip = any(isinstance(existing, DropCommercialLoggerTip) for existing in logger.filters)
    return tip and any(f[1] is not None and f[1].pattern == PYTREE_DEPRECATION for f in warnings.filters)


@pytest.fixture
def no_noise_filters(monkeypatch):
    """The process as a script that imported the package finds it: none of the package's filters."""
    import logging

    from comlrl_lightning.runtime.quiet import LIGHTNING_RANK_ZERO_LOGGER

    monkeypatch.setattr(logging.getLogger(LIGHTNING_RANK_ZERO_LOGGER), "filters", [])
    with warnings.catch_warnings():
        warnings.resetwarnings()
        assert not noise_filters_installed()
        yield


def test_the_command_installs_the_noise_filters(no_noise_filters, capsys):
    from comlrl_lightning.cli import main

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    capsys.readouterr()
    assert noise_filters_installed()


def test_a_seed_api_trainer_installs_the_noise_filters(no_noise_filters, tmp_path):
    from comlrl_lightning.trainers.configs import MADPOConfig
    from comlrl_lightning.trainers.preference import MADPOTrainer

    MADPOTrainer(agent_model="embedded", args=MADPOConfig(), wandb_config={"output_dir": str(tmp_path)})
    assert noise_filters_installed()
