"""The shipped iterative configs: the comparator samples as many candidates as the team.

A comparator's ``num_candidates`` pinned in a config stays put when ``preference_num_candidates`` is
lowered, and the reward plots then compare the team's few candidates with the comparator's many.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers.configs import OVERLAYS, composed

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def shipped(path: Path) -> dict:
    """A shipped config as it runs: a base alone, an overlay over its base."""
    return composed(path) if path in OVERLAYS else yaml.safe_load(path.read_text())


ITERATIVE = sorted(
    path
    for path in [*CONFIGS.glob("*.yaml"), *OVERLAYS]
    if "comparator" in ((shipped(path).get("data") or {}).get("init_args") or {})
)


def test_the_iterative_configs_are_found():
    found = {path.relative_to(CONFIGS).as_posix() for path in ITERATIVE}
    assert {"madpo_iter.yaml", "overlays/fsdp.yaml", "overlays/api_openai.yaml"} <= found


@pytest.mark.parametrize("path", ITERATIVE, ids=lambda path: path.relative_to(CONFIGS).as_posix())
def test_no_iterative_config_pins_the_comparators_candidates(path):
    comparator = shipped(path)["data"]["init_args"]["comparator"]
    options = comparator.get("init_args") or {}
    source = (options.get("source") or {}).get("init_args") or {}  # a centralized comparator's source
    assert "num_candidates" not in options and "num_candidates" not in source


@pytest.mark.slow  # one iterative round of the shipped config, at tiny sizes
def test_lowering_the_teams_candidates_lowers_the_comparators_too(tmp_path):
    from comlrl_lightning.cli import run_cli

    cli = run_cli(
        [
            "fit",
            "--config",
            str(CONFIGS / "madpo_iter.yaml"),
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
            "--model.init_args.sampling.max_new_tokens",
            "4",
            "--data.init_args.preference_num_candidates",
            "3",
            "--data.init_args.num_iterations",
            "1",
            "--data.init_args.num_train_epochs",
            "1",
            "--data.init_args.replay.init_args.sample_size",
            "8",
            "--data.init_args.eval_num_samples",
            "2",
        ]
    )
    collection = cli.datamodule.last_collection
    team = [len(rewards) for rewards in collection.target_raw_rewards]
    comparator = [len(rewards) for rewards in collection.comparator_raw_rewards]
    assert team == comparator and team[0] == 3  # both sides: 3 joint candidates per item
