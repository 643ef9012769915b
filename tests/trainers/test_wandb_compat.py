"""The reference's W&B run under the seed API: run config keys, metric names, env_step as the step,
the training-metric throttle, the reward-distribution panels; offline runs read back from their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from comlrl_lightning.trainers.configs import MADPOConfig, MARLHFIterConfig
from comlrl_lightning.trainers.wandb_compat import reference_run_config, should_log_train
from tests.helpers.comlrl_scripts import run_here, run_reference
from tests.helpers.wandb_records import read_run, run_files

REFERENCE_CONFIG = {
    "model_name",
    "num_agents",
    "num_turns",
    "algorithm",
    "advantage_mode",
    "advantage_normalization",
    "reference_kl_enabled",
    "reference_kl_coef",
    "reference_devices",
    "agent_learning_rate",
    "num_train_epochs",
    "max_new_tokens",
}


def test_the_run_config_has_the_reference_keys_and_values():
    config = reference_run_config(
        MADPOConfig(), "MADPO", "org/model", 2, 2, {"dataset": {"name": "gsm8k", "type": "x"}}
    )
    assert set(config) == REFERENCE_CONFIG | {"dataset", "dataset_name", "dataset_type"}
    assert (config["model_name"], config["algorithm"], config["dataset_name"]) == ("org/model", "MADPO", "gsm8k")
    centralized = reference_run_config(
        MARLHFIterConfig(collaboration_mode="centralized", num_agents=3), "MARLHFIter", "m", 1, 3, {}
    )
    assert centralized["num_generations"] == 4 and centralized["comparator_generation_mode"] == "centralized"
    assert (centralized["num_roles"], centralized["num_actor_models"]) == (3, 1)


@pytest.mark.parametrize(
    "step, last, logging_steps, logged",
    [(0, None, 50, True), (40, 0, 50, False), (50, 0, 50, True), (3, 2, 1, True)],
)
def test_training_metrics_are_throttled_by_environment_steps(step, last, logging_steps, logged):
    assert should_log_train(step, last, logging_steps) is logged


def logged_keys(folder: Path):
    config, history = read_run(run_files(folder)[-1])
    names = set().union(*history)
    # a panel is logged as a file: its keys are <key>/_type, /path, ...; compare the panel's key
    panels = {name.rsplit("/", 1)[0] for name in names if name.endswith("/_type")}
    metrics = {name for name in names if not any(name.startswith(panel + "/") for panel in panels)}
    return set(config) - {"_wandb"}, metrics | panels, history


@pytest.fixture
def offline(monkeypatch):
    import wandb

    wandb.finish()  # a run an earlier test left open in this process would be reused
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.mark.slow
def test_an_offline_facade_run_has_the_reference_keys_names_panels_and_steps(tmp_path, monkeypatch, capsys, offline):
    run_here("wandb_run.py", tmp_path, monkeypatch, capsys, {})
    config, metrics, history = logged_keys(tmp_path / "wandb_out")
    assert REFERENCE_CONFIG | {"dataset_name", "dataset_type"} <= config
    assert {
        "turn_1/reward_mean",
        "turn_1/expected_return",
        "eval/turn_1/reward_mean",
        "iter/current_iteration",
    } <= metrics
    for namespace in ("iter/reward_distribution", "iter/selected_reward_distribution"):
        assert {f"{namespace}/iteration_0002/line_plot", f"{namespace}/iteration_0002/bar_plot"} <= metrics
        assert {f"{namespace}/target_mean", f"{namespace}/comparator_mean"} <= metrics
    train_steps = [row["_step"] for row in history if "turn_1/reward_mean" in row]
    # env_step: 2 per trained pair, 2 pairs per update; one W&B row per update (logging_steps=1)
    assert train_steps == sorted(train_steps) and all(step % 2 == 0 for step in train_steps)
    assert history[-1]["final_model_saved"] == "final"


@pytest.mark.slow
def test_the_reference_logs_no_config_key_or_metric_the_facade_does_not(tmp_path, monkeypatch, capsys, offline):
    (tmp_path / "here").mkdir()
    (tmp_path / "reference").mkdir()
    run_here("wandb_run.py", tmp_path / "here", monkeypatch, capsys, {})
    run_reference("wandb_run.py", tmp_path / "reference", {"WANDB_MODE": "offline"})
    ours = logged_keys(tmp_path / "here" / "wandb_out")
    reference = logged_keys(tmp_path / "reference" / "wandb_out")
    assert reference[0] <= ours[0], sorted(reference[0] - ours[0])
    assert reference[1] <= ours[1], sorted(reference[1] - ours[1])


@pytest.mark.slow
def test_a_trainer_keeps_its_run_open_and_another_trainer_starts_its_own(tmp_path, offline):
    import wandb

    from comlrl_lightning.trainers.configs import MADPOConfig as Config
    from comlrl_lightning.trainers.preference import MADPOTrainer

    def trainer(name):
        args = Config(num_train_epochs=1, max_new_tokens=4, preference_num_candidates=2, eval_interval=0)
        config = {"project": "runs", "name": name, "mode": "offline", "dir": str(tmp_path), "output_dir": str(tmp_path)}
        return MADPOTrainer(agent_model="embedded", args=args, wandb_config=config)

    first = trainer("first")
    first.train()
    run = first.wandb_run()
    first.train()  # a second train() of the same trainer continues its run, as the reference's
    assert first.wandb_run() is run and wandb.run is run
    second = trainer("second")
    second.train()  # another trainer: the first's run is finished, a new one started
    assert first.wandb_run() is None and second.wandb_run().id != run.id
    second.save_model(str(tmp_path / "model"))
    assert wandb.run is None


@pytest.mark.slow
def test_the_run_config_shows_the_sampling_settings_the_run_used_with_its_generation_kwargs(tmp_path, offline):
    from comlrl_lightning.trainers.preference import MADPOTrainer
    from tests.helpers.wandb_records import settled

    args = MADPOConfig(num_train_epochs=1, max_new_tokens=4, preference_num_candidates=2, eval_interval=0)
    config = {"project": "runs", "mode": "offline", "dir": str(tmp_path), "output_dir": str(tmp_path)}
    trainer = MADPOTrainer(agent_model="embedded", args=args, wandb_config=config)
    trainer.train(temperature=0.7, repetition_penalty=1.2)
    trainer.wandb_run().finish()
    logged, _ = read_run(settled(run_files(tmp_path)[-1]))
    assert logged["temperature"] == 0.7 and logged["max_new_tokens"] == 4
    assert logged["sampling"]["extra"] == {"repetition_penalty": 1.2} and logged["sampling"]["temperature"] == 0.7
    assert logged["generation_kwargs"] == {"temperature": 0.7, "repetition_penalty": 1.2}
