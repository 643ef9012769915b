"""The seed API's checkpoints: checkpoint-N folders, limits, newest-wins resumes, self-contained
folders, continuing logs and W&B runs, save/load/read, and the errors a user can meet."""

from __future__ import annotations

import csv
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import WandbLogger

from comlrl_lightning.checkpoints.metadata import read_checkpoint_metadata
from comlrl_lightning.runtime.quiet import install_noise_filters
from comlrl_lightning.trainers.configs import MADPOConfig, MADPOIterConfig, MARLHFIterConfig
from comlrl_lightning.trainers.preference import MADPOIterTrainer, MADPOTrainer, MARLHFIterTrainer
from comlrl_lightning.validation import OptionError
from tests.trainers.test_preference import SMALL, SMALL_ITER, SMALL_MARLHF, round_files, weights

HISTORY_NEAREST = {
    **{k: v for k, v in SMALL_ITER.items() if k != "preference_replay_lambda"},
    "preference_replay_mode": "nearest_k",
    "preference_replay_k": 2,
}


def madpo_iter(root: Path, rounds: int, base: dict = SMALL_ITER) -> MADPOIterTrainer:
    torch.manual_seed(0)
    args = MADPOIterConfig(**{**base, "num_iterations": rounds})
    return MADPOIterTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(root)})


def folders(directory: Path) -> list:
    names = [p.name for p in directory.iterdir() if p.name.startswith("checkpoint-")]
    return sorted(names, key=lambda name: int(name.split("-")[1]))


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(weights(a), weights(b)))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Three rounds in one go (history comparator, lambda-decay replay): round files and weights."""
    root = tmp_path_factory.mktemp("uninterrupted")
    trainer = madpo_iter(root, 3)
    trainer.train()
    return dict(files=round_files(root / "preference_replay"), trainer=trainer)


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_total_limit_none_keeps_every_commit_and_checkpoint_2_resumes_round_3(uninterrupted, tmp_path, caplog):
    trainer = madpo_iter(tmp_path, 3)
    trainer.train(checkpoint_dir=str(tmp_path / "ckpt"))  # checkpoint_total_limit=None: one folder per commit
    assert folders(tmp_path / "ckpt") == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    for number in (1, 2, 3):
        metadata = read_checkpoint_metadata(tmp_path / "ckpt" / f"checkpoint-{number}")
        assert metadata["sequence"] == number and metadata["progress"]["round"] == number - 1
    shutil.rmtree(tmp_path / "preference_replay")
    caplog.clear()
    resumed = madpo_iter(tmp_path, 3)
    resumed.train(resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-2"))
    err = "\n".join(caplog.messages)
    assert "resuming at round 3/3 (epoch 3, step 4) from " in err and "checkpoint-2" in err
    assert "Restoring states" not in err and "Restored all states" not in err  # Lightning's lines: replaced
    assert "round 3/3" in err and "round 2/3" not in err  # only round 3 is collected again
    assert round_files(tmp_path / "preference_replay") == uninterrupted["files"]  # 1, 2 restored; 3 redone
    assert same_weights(resumed, uninterrupted["trainer"])
    assert read_checkpoint_metadata(tmp_path / "ckpt")["run_id"] == metadata["run_id"]  # one run throughout


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_total_limit_keeps_the_newest_l_and_interval_skips_commits_but_never_the_last(tmp_path):
    madpo_iter(tmp_path / "a", 3).train(checkpoint_dir=str(tmp_path / "a" / "ckpt"), checkpoint_total_limit=2)
    assert folders(tmp_path / "a" / "ckpt") == ["checkpoint-2", "checkpoint-3"]
    madpo_iter(tmp_path / "b", 3).train(checkpoint_dir=str(tmp_path / "b" / "ckpt"), checkpoint_interval=2)
    assert folders(tmp_path / "b" / "ckpt") == ["checkpoint-2", "checkpoint-3"]  # 3: the forced final commit


@pytest.mark.slow
def test_a_folder_resume_continues_from_the_newest_round_whatever_the_arguments(tmp_path):
    """The issue's scenario: limit 2, then a resume without it, then a folder resume without checkpoint_dir."""
    whole = madpo_iter(tmp_path / "whole", 4)
    whole.train()
    run, ckpt = tmp_path / "run", str(tmp_path / "run" / "ckpt")
    madpo_iter(run, 2).train(checkpoint_dir=ckpt, checkpoint_total_limit=2)
    madpo_iter(run, 3).train(resume_from_checkpoint=ckpt, checkpoint_dir=ckpt)
    assert folders(run / "ckpt") == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    last = madpo_iter(run, 4)
    last.train(resume_from_checkpoint=ckpt)  # the folder: its newest checkpoint, new ones beside it
    assert folders(run / "ckpt") == ["checkpoint-1", "checkpoint-2", "checkpoint-3", "checkpoint-4"]
    assert not list((run / "ckpt").glob("*-v*")) and not list((run / "ckpt").glob("*.ckpt"))
    assert round_files(run / "preference_replay") == round_files(tmp_path / "whole" / "preference_replay")
    assert same_weights(last, whole)
    assert last.trainer.global_step == whole.trainer.global_step
    assert [p.name for p in (run / "lightning_logs").iterdir()] == ["version_0"]  # one log for the run


def resume_elsewhere(make, tmp_path: Path, rounds: int, more: int):
    """Run ``rounds`` rounds, copy the last checkpoint folder to a new place, delete the run, and resume
    there for ``more`` rounds: return the resumed trainer and its folder."""
    first = make(tmp_path / "first", rounds)
    first.train(checkpoint_dir=str(tmp_path / "first" / "ckpt"))
    copied = tmp_path / "moved" / "ckpt" / f"checkpoint-{rounds}"
    shutil.copytree(tmp_path / "first" / "ckpt" / f"checkpoint-{rounds}", copied)
    shutil.rmtree(tmp_path / "first")  # the run's replay, snapshot and log folders are gone
    resumed = make(tmp_path / "moved", rounds + more)
    resumed.train(resume_from_checkpoint=str(copied))
    return resumed, tmp_path / "moved"


@pytest.mark.slow
def test_a_copied_madpo_checkpoint_folder_resumes_exactly_with_history_and_nearest_k(tmp_path):
    whole = madpo_iter(tmp_path / "whole", 3, HISTORY_NEAREST)
    whole.train()
    resumed, moved = resume_elsewhere(lambda root, n: madpo_iter(root, n, HISTORY_NEAREST), tmp_path, 2, 1)
    assert round_files(moved / "preference_replay") == round_files(tmp_path / "whole" / "preference_replay")
    assert same_weights(resumed, whole)
    assert (moved / "policy_snapshots" / "iteration_0000" / "agent_0" / "model.safetensors").is_file()
    assert folders(moved / "ckpt") == ["checkpoint-2", "checkpoint-3"]  # new checkpoints beside the copied one


def marlhf_iter(root: Path, rounds: int) -> MARLHFIterTrainer:
    torch.manual_seed(0)
    args = MARLHFIterConfig(
        **SMALL_MARLHF, num_iterations=rounds, preference_scoring_reward="reward_model", comparator_policy="history"
    )
    return MARLHFIterTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(root)})


@pytest.mark.slow
def test_a_copied_marlhf_checkpoint_folder_resumes_exactly_with_the_reward_model_oracle(tmp_path):
    whole = marlhf_iter(tmp_path / "whole", 2)
    whole.train()
    resumed, moved = resume_elsewhere(marlhf_iter, tmp_path, 1, 1)  # round 2 is scored by round 1's reward model
    assert round_files(moved / "preference_replay") == round_files(tmp_path / "whole" / "preference_replay")
    assert same_weights(resumed, whole)
    reward_models = [m.reward_model.state_dict() for m in (whole.module, resumed.module)]
    assert all(torch.equal(a, b) for a, b in zip(*(s.values() for s in reward_models)))


@pytest.mark.slow  # wandb starts its service process
def test_a_resumed_run_continues_its_csv_log_and_wandb_run_without_lightning_warnings(tmp_path, caplog, monkeypatch):
    import wandb

    wandb.finish()  # a run an earlier test left open in this process would be reused by the logger
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = {"output_dir": str(tmp_path), "project": "resume", "mode": "offline", "dir": str(tmp_path)}

    def make(rounds):
        torch.manual_seed(0)
        args = MADPOIterConfig(**{**SMALL_ITER, "num_iterations": rounds})
        return MADPOIterTrainer(agent_model="embedded", args=args, wandb_config=config)

    with warnings.catch_warnings(record=True) as fresh:
        install_noise_filters()  # the package's filters, as in a real process (pytest replaces them per test)
        first = make(1)
        first.train(checkpoint_dir=str(tmp_path / "ckpt"))
    first_rows = _rows(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")
    caplog.clear()
    with warnings.catch_warnings(record=True) as caught:
        install_noise_filters()
        second = make(2)
        second.train(resume_from_checkpoint=str(tmp_path / "ckpt"))
    printed = "\n".join([*caplog.messages, *(str(w.message) for w in caught)])
    # the resume warns about nothing the fresh run did not: no folder "not empty", no callbacks notice
    assert {str(w.message) for w in caught} <= {str(w.message) for w in fresh}, [str(w.message) for w in caught]
    assert "exists and is not empty" not in printed and "Be aware" not in printed
    assert "Restoring states" not in printed and "Restored all states" not in printed
    assert sum("resuming at round 2/2 (epoch 2, step 2) from " in m for m in caplog.messages) == 1
    assert [p.name for p in (tmp_path / "lightning_logs").iterdir()] == ["version_0"]
    rows = _rows(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")
    assert rows[: len(first_rows)] == first_rows and len(rows) > len(first_rows)  # appended, not replaced
    rounds = [row["iter/current_iteration"] for row in rows if row.get("iter/current_iteration")]
    assert rounds == ["1.0", "2.0"]
    # two offline W&B records (where wandb put them: an earlier run in this process may have fixed its
    # root), one run id: the one the checkpoint recorded
    runs = [next(x for x in t.trainer.loggers if isinstance(x, WandbLogger))._experiment for t in (first, second)]
    files = [Path(run.settings.sync_file) for run in runs]
    assert files[0] != files[1] and all(path.is_file() for path in files)
    assert runs[0].id == runs[1].id == read_checkpoint_metadata(tmp_path / "ckpt")["wandb"]["id"]
    assert files[0].name == files[1].name == f"run-{runs[0].id}.wandb"


def _rows(path: Path) -> list:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_save_load_and_read_a_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # nothing is written outside the runs' folders
    trainer = madpo_iter(tmp_path / "run", 1)
    with pytest.raises(OptionError, match="call train"):
        trainer.save_checkpoint(str(tmp_path / "saved"))
    trainer.train()
    folder = Path(trainer.save_checkpoint(str(tmp_path / "saved")))
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.assets", "checkpoint.ckpt", "checkpoint_owner.json"]
    metadata = read_checkpoint_metadata(folder)
    assert metadata["trainer_class"] == "MADPOIterTrainer" and metadata["wandb"] is None
    fresh = madpo_iter(tmp_path / "other", 1)
    progress = fresh.load_checkpoint(str(folder))
    assert progress == {"epochs": 1, "step": 2, "batches": 2, "round": 0}
    assert same_weights(fresh, trainer) and fresh.evaluate() == trainer.evaluate()
    assert not list((tmp_path / "cwd").iterdir())
    (tmp_path / "not-a-checkpoint").mkdir()
    (tmp_path / "not-a-checkpoint" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a checkpoint"):
        trainer.save_checkpoint(str(tmp_path / "not-a-checkpoint"))


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_checkpoint_of_another_trainer_or_run_is_refused_before_training(tmp_path):
    iterative = madpo_iter(tmp_path / "run", 1)
    iterative.train(checkpoint_dir=str(tmp_path / "ckpt"))
    base = MADPOTrainer(agent_model="embedded", args=MADPOConfig(**SMALL, num_train_epochs=1))
    with pytest.raises(OptionError, match="was written by MADPOIterTrainer; a MADPOTrainer cannot continue it"):
        base.train(resume_from_checkpoint=str(tmp_path / "ckpt"))
    with pytest.raises(OptionError, match="was written by MADPOIterTrainer"):
        base.load_checkpoint(str(tmp_path / "ckpt" / "checkpoint-1"))
    other = madpo_iter(tmp_path / "other", 1)  # a fresh run into a folder holding another run's checkpoints
    with pytest.raises(OptionError, match="already holds checkpoint-1 of another run"):
        other.train(checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(OptionError, match="resume_from_checkpoint: No checkpoint at"):
        other.train(resume_from_checkpoint=str(tmp_path / "missing"))


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_the_base_trainers_commit_after_collection_and_after_every_epoch(tmp_path):
    torch.manual_seed(0)
    args = MADPOConfig(**SMALL, num_train_epochs=2)
    whole = MADPOTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path / "whole")})
    whole.train(checkpoint_dir=str(tmp_path / "ckpt"))
    assert folders(tmp_path / "ckpt") == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert read_checkpoint_metadata(tmp_path / "ckpt" / "checkpoint-1")["progress"]["step"] == 0  # pairs only
    torch.manual_seed(0)
    resumed = MADPOTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path / "part")})
    resumed.train(resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-1"), checkpoint_dir=str(tmp_path / "c2"))
    assert same_weights(resumed, whole) and folders(tmp_path / "c2") == ["checkpoint-2", "checkpoint-3"]


# ----------------------------------------------------------------------------------------------
# The resume rule: a resumed run uses the options it was given


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_resume_with_changed_options_lists_them_in_one_line_and_they_take_effect(tmp_path, caplog):
    """A new learning rate is on the restored optimizer's groups, a new temperature is what the resumed
    round samples with (the saved generation kwargs kept, as none were given), a data option is used;
    hparams.yaml shows the settings the run used."""
    madpo_iter(tmp_path, 1).train(checkpoint_dir=str(tmp_path / "ckpt"), repetition_penalty=1.3)
    torch.manual_seed(0)
    changed = {"num_iterations": 2, "agent_learning_rate": 1e-4, "temperature": 0.9, "train_batch_size": 3}
    args = MADPOIterConfig(**{**SMALL_ITER, **changed})
    resumed = MADPOIterTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path)})
    sampled = []
    generate_team = resumed.module.generator.generate_team

    def spy(team, prompts, num_samples, settings, stream=None):
        sampled.append(settings)
        return generate_team(team, prompts, num_samples, settings, stream)

    resumed.module.generator.generate_team = spy
    caplog.clear()
    resumed.train(resume_from_checkpoint=str(tmp_path / "ckpt"))
    lines = [m for m in caplog.messages if m.startswith("resumed with changed options: ")]
    assert lines == [
        "resumed with changed options: model.agent_learning_rate: 0.003 -> 0.0001, model.sampling.temperature: "
        "1.0 -> 0.9, data.num_iterations: 1 -> 2, data.train_batch_size: 8 -> 3"
    ]
    groups = resumed.trainer.optimizers[0].param_groups
    assert [(g["name"], g["lr"]) for g in groups] == [("agent_0", 1e-4), ("agent_1", 1e-4)]
    assert sampled and {(s.temperature, s.extra["repetition_penalty"]) for s in sampled} == {(0.9, 1.3)}
    hparams = (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").read_text()
    assert "temperature: 0.9" in hparams and "repetition_penalty: 1.3" in hparams


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_resume_that_changes_the_team_is_refused_before_training_naming_the_option_and_both_values(tmp_path):
    from comlrl_lightning.errors import ConfigurationError

    madpo_iter(tmp_path, 1).train(checkpoint_dir=str(tmp_path / "ckpt"))
    torch.manual_seed(0)
    args = MADPOIterConfig(**{**SMALL_ITER, "num_iterations": 2, "collaboration_mode": "centralized"})
    other = MADPOIterTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path)})
    with pytest.raises(
        ConfigurationError, match=r"cannot resume .*checkpoint-1.* with other model.collaboration"
    ) as caught:
        other.train(resume_from_checkpoint=str(tmp_path / "ckpt"))
    assert "model.collaboration: 'decentralized' -> 'centralized'" in str(caught.value)
    assert other.trainer is None  # before any Lightning trainer, model load or sampling


@pytest.mark.slow  # three runs
def test_a_resume_whose_log_folder_now_holds_another_runs_log_starts_a_new_version(tmp_path):
    logs = tmp_path / "lightning_logs"
    madpo_iter(tmp_path, 1).train(checkpoint_dir=str(tmp_path / "ckpt"))
    shutil.move(logs / "version_0", tmp_path / "moved")  # the run's log folder was moved away
    madpo_iter(tmp_path, 1).train(checkpoint_dir=str(tmp_path / "other"))  # another run logs in version_0 now
    others = (logs / "version_0" / "metrics.csv").read_bytes()
    madpo_iter(tmp_path, 2).train(resume_from_checkpoint=str(tmp_path / "ckpt"))
    assert (logs / "version_0" / "metrics.csv").read_bytes() == others  # neither continued nor cut
    assert sorted(p.name for p in logs.iterdir()) == ["version_0", "version_1"]
    assert [
        row["iter/current_iteration"]
        for row in _rows(logs / "version_1" / "metrics.csv")
        if row.get("iter/current_iteration")
    ] == ["2.0"]
