"""The console entry point runs the shipped config end to end (tiny sizes for speed)."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning.cli import main

TINY = [
    "--model.init_args.sampling.max_new_tokens",
    "6",
    "--data.init_args.preference_num_candidates",
    "4",
    "--data.init_args.preference_pairs_per_sample",
    "4",
    "--data.init_args.num_train_epochs",
    "2",
    "--data.init_args.eval_num_samples",
    "4",
    "--trainer.val_check_interval",
    "3",
    "--trainer.enable_progress_bar",
    "false",
]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_trainer_is_built_with_atomic_checkpoints_and_never_changed_after(tmp_path):
    """The command line builds its Trainer with what it adds (the checkpoint record, the resumable
    checkpoint, the atomic checkpoint IO, FSDP2 with atomic folders) instead of changing it once built."""
    from lightning.pytorch import LightningDataModule, LightningModule

    from comlrl_lightning.callbacks.checkpoints import CheckpointRecord, ResumableCheckpoint
    from comlrl_lightning.checkpoints.io import AtomicCheckpointIO, AtomicModelParallelStrategy
    from comlrl_lightning.cli import PreferenceCLI

    def built(*args):
        return PreferenceCLI(
            LightningModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
            args=["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false", *args],
        ).trainer  # fmt: skip

    trainer = built("--config", "configs/madpo_iter.yaml", "--config", "configs/overlays/fsdp.yaml")
    assert type(trainer.strategy) is AtomicModelParallelStrategy  # the config names ModelParallelStrategy
    assert type(trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    assert isinstance(trainer.callbacks[0], CheckpointRecord)
    assert [type(c) for c in trainer.callbacks if isinstance(c, ModelCheckpoint)] == [ResumableCheckpoint]
    assert len(trainer.checkpoint_callbacks) == 1  # the config's own, not a second one
    trainer = built("--model", "comlrl_lightning.MADPOModule", "--data", "comlrl_lightning.PreferenceDataModule")
    assert [type(c) for c in trainer.checkpoint_callbacks] == [ResumableCheckpoint]  # in place of Lightning's default
    trainer = built(
        "--model", "comlrl_lightning.MADPOModule", "--data", "comlrl_lightning.PreferenceDataModule",
        "--trainer.enable_checkpointing", "false",
    )  # fmt: skip
    assert type(trainer.strategy.checkpoint_io) is AtomicCheckpointIO and trainer.checkpoint_callbacks == []
    # a config that lists its checkpoint callback, with the flag: no checkpoint callback (Lightning refuses the pair)
    trainer = built("--config", "configs/madpo.yaml", "--trainer.enable_checkpointing", "false")
    assert trainer.checkpoint_callbacks == [] and isinstance(trainer.callbacks[0], CheckpointRecord)


def _metrics(run_dir: Path) -> list:
    (metrics_file,) = run_dir.glob("lightning_logs/version_0/metrics.csv")
    with open(metrics_file) as handle:
        return list(csv.DictReader(handle))


def test_fit_with_the_shipped_config_writes_checkpoint_config_and_metrics(tmp_path):
    main(["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path), *TINY])
    version = tmp_path / "lightning_logs" / "version_0"
    assert list((version / "checkpoints").glob("*.ckpt"))
    assert (version / "reward_curve.png").stat().st_size > 0  # RewardCurvePlot from the config
    assert (version / "evaluation_samples.jsonl").read_text().count("\n") > 0  # SamplesLog from the config
    config = (version / "config.yaml").read_text()
    assert "comlrl_lightning.MADPOModule" in config and "num_train_epochs: 2" in config
    rows = _metrics(tmp_path)
    columns = set(rows[0])
    for key in (
        "train/loss",
        "train/joint_margin",
        "train/preference_accuracy",
        "train/agent_0/margin",
        "train/agent_1/margin",
        "turn_1/reward_mean",
        "turn_1/expected_return",
        "eval/turn_1/reward_mean",
        "eval/turn_1/expected_return",
        "collect/preference_pairs",
    ):
        assert key in columns, key
    eval_steps = [int(r["step"]) for r in rows if r.get("eval/turn_1/reward_mean")]
    assert eval_steps[0] == 0  # an evaluation precedes the first update
    # the validation loop runs every val_check_interval=3 updates; Lightning logs it at the index
    # of the last update (2, 5, ...), and the final evaluation lands on the last update's index too
    assert eval_steps[1:] == [2, 5, 7]


@pytest.mark.slow
def test_wandb_offline_logger_runs_without_login(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    main(
        [
            "fit",
            "--config",
            "configs/madpo.yaml",
            "--trainer.default_root_dir",
            str(tmp_path),
            *TINY,
            "--trainer.logger",
            "lightning.pytorch.loggers.WandbLogger",
            "--trainer.logger.init_args.offline",
            "true",
            "--trainer.logger.init_args.save_dir",
            str(tmp_path),
        ]
    )
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert runs and runs[0].stat().st_size > 0


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_iterative_config_runs_rounds_and_logs_round_metrics(tmp_path):
    main(
        [
            "fit",
            "--config",
            "configs/madpo_iter.yaml",
            "--trainer.default_root_dir",
            str(tmp_path),
            *TINY,
            "--data.init_args.num_iterations",
            "2",
            "--data.init_args.num_train_epochs",
            "1",
            "--data.init_args.replay.init_args.sample_size",
            "16",
            "--data.init_args.comparator.init_args.num_candidates",
            "3",
        ]
    )
    assert sorted(p.name for p in (tmp_path / "preference_replay").iterdir()) == [
        ".lock",
        "iteration_0001.json",
        "iteration_0002.json",
    ]
    rows = _metrics(tmp_path)
    rounds = [float(r["iter/current_iteration"]) for r in rows if r.get("iter/current_iteration")]
    assert rounds == [1.0, 2.0]
    logged = {
        key: [float(r[key]) for r in rows if r.get(key)]
        for key in ("iter/current_preference_pairs", "iter/total_preference_pairs", "iter/train_preference_pairs")
    }
    written = []  # each round's pairs, as its round file holds them
    for iteration in (1, 2):
        round_file = json.loads((tmp_path / "preference_replay" / f"iteration_000{iteration}.json").read_text())
        assert round_file["num_pairs"] == len(round_file["pairs"]) > 0
        written.append(float(round_file["num_pairs"]))
    assert logged["iter/current_preference_pairs"] == written
    assert logged["iter/total_preference_pairs"] == [written[0], written[0] + written[1]]
    assert logged["iter/train_preference_pairs"] == [16.0, 16.0]  # the replay's sample_size


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_marlhf_config_fits_the_reward_model_then_trains_the_policy(tmp_path):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(
            [
                "fit",
                "--config",
                "configs/marlhf.yaml",
                "--trainer.default_root_dir",
                str(tmp_path),
                *TINY,
                "--model.init_args.num_generations",
                "2",
                "--model.init_args.reward_model.num_train_epochs",
                "1",
                "--data.init_args.num_train_epochs",
                "1",
                "--trainer.limit_train_batches",
                "2",
                "--trainer.log_every_n_steps",
                "1",
            ]
        )
    # the frozen reward model is in eval mode on purpose: Lightning's warning about it is not shown
    assert not [w for w in caught if "in eval mode at the start of training" in str(w.message)]
    rows = _metrics(tmp_path)
    fits = [
        (r["reward_model/epoch"], float(r["reward_model/accuracy"])) for r in rows if r.get("reward_model/accuracy")
    ]
    assert fits and all(epoch == "1.0" and 0.0 <= accuracy <= 1.0 for epoch, accuracy in fits), fits
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses), losses  # one per update, logged every step


@pytest.mark.slow  # trains and resumes
@pytest.mark.parametrize("config", ["marlhf_maac.yaml", "marlhf_iac.yaml"])
def test_an_actor_critic_run_from_the_command_line_writes_plain_checkpoints_and_resumes(tmp_path, config):
    """The critics' learning rate comes from the command line typed as jsonargparse's PositiveFloat: in
    the optimizer's state it made every checkpoint unreadable with ``weights_only=True`` (no resume)."""
    from comlrl_lightning.checkpoints.metadata import load_checkpoint_dict

    def fit(epochs, *extra):
        words = [*TINY, "--data.init_args.num_train_epochs", str(epochs), "--trainer.limit_train_batches", "1"]
        words += ["--model.init_args.num_generations", "2", "--model.init_args.reward_model.num_train_epochs", "1"]
        return main(
            ["fit", "--config", f"configs/{config}", "--trainer.default_root_dir", str(tmp_path), *words, *extra]
        )

    fit(1)
    (last,) = tmp_path.rglob("last.ckpt")
    groups = load_checkpoint_dict(last)["optimizer_states"][0]["param_groups"]
    assert [type(group["lr"]) for group in groups] == [float] * len(groups)
    fit(2, "--ckpt_path", str(last))
    assert load_checkpoint_dict(last)["epoch"] == 1


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_reward_model_config_fits_on_a_folder_of_round_files(tmp_path):
    from comlrl_lightning.rounds.pairs import PreferencePair
    from comlrl_lightning.rounds.replay import ReplayBuffer

    buffer = ReplayBuffer(tmp_path / "rounds")
    for iteration in (1, 2):
        pairs = [
            PreferencePair(
                prompts=["topic: a\nwriter:", "topic: a\nmatcher:"],
                winner_completions=["aeiou" * (i % 3 + 1), "ok"],
                loser_completions=["xyz", "ok"],
                winner_reward=1.0,
                loser_reward=0.0,
                candidate_reward_mean=0.5,
            )
            for i in range(10)
        ]
        buffer.write_round(iteration, [p.to_record() for p in pairs])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(
            [
                "fit",
                "--config",
                "configs/reward_model.yaml",
                "--trainer.default_root_dir",
                str(tmp_path),
                "--data.init_args.replay_dir",
                str(tmp_path / "rounds"),
                "--data.init_args.num_train_epochs",
                "2",
                "--trainer.enable_progress_bar",
                "false",
            ]
        )
    # the backbone stays in eval mode as loaded (no dropout): Lightning's warning about it is not shown
    assert not [w for w in caught if "in eval mode at the start of training" in str(w.message)]
    rows = _metrics(tmp_path)
    assert any(r.get("val/reward_model/accuracy") for r in rows)
    assert max(int(r["epoch"]) for r in rows) == 1  # num_train_epochs=2 set trainer.max_epochs
    from comlrl_lightning.checkpoints.metadata import load_checkpoint_dict

    # plain data (the command line's PositiveFloat learning rate made it unreadable with weights_only)
    (last,) = tmp_path.rglob("last.ckpt")
    assert type(load_checkpoint_dict(last)["optimizer_states"][0]["param_groups"][0]["lr"]) is float


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_optimizer_and_scheduler_classes_get_one_group_per_agent(tmp_path, monkeypatch):
    import types

    import torch

    from comlrl_lightning.modules.base import TeamModule

    spy = types.SimpleNamespace()
    original = TeamModule.configure_optimizers

    def recording(self):
        result = original(self)
        spy.result = result
        return result

    monkeypatch.setattr(TeamModule, "configure_optimizers", recording)
    main(
        [
            "fit",
            "--config",
            "configs/madpo.yaml",
            "--trainer.default_root_dir",
            str(tmp_path),
            *TINY,
            "--model.init_args.agent_learning_rate",
            "[0.01, 0.02]",
            "--model.init_args.optimizer",
            "torch.optim.SGD",
            "--model.init_args.optimizer.init_args.momentum",
            "0.9",
            "--model.init_args.optimizer.init_args.weight_decay",
            "0.01",
            "--model.init_args.lr_scheduler",
            "torch.optim.lr_scheduler.StepLR",
            "--model.init_args.lr_scheduler.init_args.step_size",
            "1",
        ]
    )
    optimizer = spy.result["optimizer"]
    assert isinstance(optimizer, torch.optim.SGD)
    assert [(g["name"], g["momentum"], g["weight_decay"]) for g in optimizer.param_groups] == [
        ("agent_0", 0.9, 0.01),
        ("agent_1", 0.9, 0.01),
    ]
    assert [g["initial_lr"] for g in optimizer.param_groups] == [0.01, 0.02]
    assert isinstance(spy.result["lr_scheduler"], torch.optim.lr_scheduler.StepLR)
    # StepLR (gamma 0.1, every epoch) has stepped after each of the 2 epochs
    assert [round(g["lr"], 8) for g in optimizer.param_groups] == [0.0001, 0.0002]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_help_lists_allowed_values_and_no_unusable_options(capsys):
    import pytest

    with pytest.raises(SystemExit) as exited:
        main(["fit", "--help"])
    text = capsys.readouterr().out
    assert exited.value.code == 0 and "--model" in text and "--data" in text
    assert "--optimizer" not in text and "--lr_scheduler" not in text  # the modules take them as options
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "--config",
                "configs/madpo_iter.yaml",
                "--data.help",
                "comlrl_lightning.IterativePreferenceDataModule",
            ]
        )
    text = capsys.readouterr().out
    assert "{reward_gap,all,random,comparator_reward}" in text
    with pytest.raises(SystemExit):
        main(["fit", "--model.help", "comlrl_lightning.MARLHFModule"])
    text = capsys.readouterr().out
    assert "{magrpo,mareinforce,maremax,marloo,maac,iac}" in text and "{task,reward_model}" in text


@pytest.mark.slow
def test_the_default_run_prints_what_a_user_needs_and_no_third_party_noise(tmp_path):
    """A real process started as ``python -m comlrl_lightning`` (the package's ``__main__``), with real
    stderr and Python's default warning filters, a fresh model cache (the embedded model is written, then
    loaded), Lightning's progress bar on as by default."""
    import os
    import re

    environment = {**os.environ, "COMLRL_LIGHTNING_CACHE": str(tmp_path / "cache")}
    environment.pop("PYTHONWARNINGS", None)
    tiny = [word for word in TINY if word not in ("--trainer.enable_progress_bar", "false")]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "comlrl_lightning",
            "fit",
            "--config",
            "configs/madpo.yaml",
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            *tiny,
        ],
        cwd=Path(__file__).resolve().parents[1],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    err, printed = result.stderr, result.stdout + result.stderr
    assert "warning" not in err.lower(), err
    assert not re.search(r"\.py:\d+: ", err), err  # the location prefix of every Python (and Lightning) warning
    for noise in (
        "Tip:",
        "litlogger",
        "tensorboard",
        "FLOPs",
        "Loading weights",
        "Writing model shards",
        "Modules in eval mode",
    ):
        assert noise not in printed, noise
    assert "MADPOModule: " in err and " trainable" in err  # the one-line parameter summary
    assert re.search(r"collected \d+ preference pairs from \d+ items", err)
    assert "evaluation (before training, 0 updates)" in err and "evaluation (after training, 8 updates)" in err
    # a log file gets lines, never a redrawn bar: the thread count first, a line per epoch and evaluation
    # (a bar's redraw starts with a carriage return; under CI's load one more appeared once, from
    # where is not known yet, so the check names Lightning's own training bar, which ProgressLines replaces)
    bars = re.findall(r"\r[^\r\n]{0,60}", printed)
    assert not [bar for bar in bars if "Epoch" in bar or "it/s" in bar], bars
    assert "threads: 1 (a small model, 271 K parameters;" in err
    assert re.search(r"^training: 1/\d+ epochs \(\d+s elapsed, about \d+s left\)$", err, re.MULTILINE)


# ----------------------------------------------------------------------------------------------
# One error family, one line: whatever part of the run finds the mistake


def _one_error_line(capsys, args, code):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == code, err
    assert "Traceback" not in err and len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    return next(line for line in err.splitlines() if line.startswith("error:"))


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_errors_found_in_setup_are_one_line_with_the_exit_status_of_their_kind(tmp_path, capsys):
    from comlrl_lightning.runtime.folder_lock import FolderLock

    common = ["--trainer.default_root_dir", str(tmp_path), *TINY]
    line = _one_error_line(
        capsys,
        [
            "fit",
            "--config",
            "configs/madpo.yaml",
            *common,
            "--data.init_args.task.train_dataset",
            str(tmp_path / "absent.jsonl"),
        ],
        2,  # a configuration error: the option names a file that is not there
    )
    assert line == f"error: train_dataset: {tmp_path}/absent.jsonl does not exist."
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ab"}\n{"prompt": \n')
    line = _one_error_line(
        capsys,
        [
            "fit",
            "--config",
            "configs/madpo.yaml",
            *common,
            "--data.init_args.task.train_dataset",
            str(tmp_path / "bad.jsonl"),
        ],
        1,
    )
    assert line.startswith(f"error: train_dataset: {tmp_path}/bad.jsonl line 2: not valid JSON")
    lock = FolderLock(tmp_path / "preference_replay").acquire()  # another run of this process holds the folder
    try:
        line = _one_error_line(capsys, ["fit", "--config", "configs/madpo_iter.yaml", *common], 1)
    finally:
        lock.release()
    assert line.startswith(f"error: {tmp_path}/preference_replay is in use by another run")
    (tmp_path / "random.ckpt").write_bytes(bytes(range(256)) * 16)
    line = _one_error_line(
        capsys, ["fit", "--config", "configs/madpo.yaml", *common, "--ckpt_path", str(tmp_path / "random.ckpt")], 1
    )
    assert (
        line
        == f"error: ckpt_path '{tmp_path}/random.ckpt' is not a Lightning checkpoint (UnpicklingError); pass a .ckpt file a run wrote."
    )


def test_the_traceback_variable_shows_the_traceback_too(tmp_path, capsys, monkeypatch):
    import pytest

    monkeypatch.setenv("COMLRL_LIGHTNING_TRACEBACK", "1")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                "configs/madpo.yaml",
                "--trainer.default_root_dir",
                str(tmp_path / "run"),
                "--data.init_args.task.train_dataset",
                str(tmp_path / "x.jsonl"),
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback (most recent call last)" in err and "MissingPathError" in err
    assert err.rstrip().splitlines()[-1] == f"error: train_dataset: {tmp_path}/x.jsonl does not exist."


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_lora_is_a_peft_lora_config_and_round_trips_through_config_hparams_and_checkpoint(tmp_path, capsys):
    import warnings

    import pytest
    import torch
    import yaml
    from peft import LoraConfig

    from comlrl_lightning import MADPOModule
    from comlrl_lightning.cli import run_cli
    from comlrl_lightning.team.lora import LoraAgent

    lora = "{class_path: peft.LoraConfig, init_args: {r: 4, lora_alpha: 16, target_modules: [c_attn]}}"
    run = tmp_path / "run"
    common = ["--data.init_args.num_train_epochs", "1", "--model.init_args.team.lora", lora]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = run_cli(["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(run), *TINY, *common])
    # peft's notice about the loftq_config jsonargparse fills with defaults is not the user's to act on
    assert not [w for w in caught if "loftq" in str(w.message)]

    def check(module):
        config = module.team_options.lora
        assert isinstance(config, LoraConfig) and (config.r, config.lora_alpha) == (4, 16)
        assert set(config.target_modules) == {"c_attn"}
        assert all(isinstance(agent, LoraAgent) for agent in module.team.agents)
        assert [agent.adapter for agent in module.team.agents] == ["agent_0", "agent_1"]

    check(cli.model)
    version = run / "lightning_logs" / "version_0"
    # the saved config.yaml parses again, as --print_config shows it
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(version / "config.yaml"), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["team"]["lora"]["class_path"] == "peft.LoraConfig"
    assert printed["model"]["init_args"]["team"]["lora"]["init_args"]["r"] == 4
    # hparams.yaml says it the way a config does, and a checkpoint holds plain values only
    hparams = yaml.safe_load((version / "hparams.yaml").read_text())
    assert hparams["team"]["lora"]["class_path"] == "peft.LoraConfig"
    assert hparams["team"]["lora"]["init_args"]["lora_alpha"] == 16
    (last,) = version.glob("checkpoints/last.ckpt")
    assert (
        torch.load(last, weights_only=True, map_location="cpu")["hyper_parameters"]["team"]["lora"]["init_args"]["r"]
        == 4
    )
    check(MADPOModule.load_from_checkpoint(last))  # rebuilt from hparams through the command line's parser


ITER_TINY = [
    *TINY,
    "--data.init_args.num_train_epochs",
    "1",
    "--data.init_args.replay.init_args.sample_size",
    "16",
    "--data.init_args.comparator.init_args.num_candidates",
    "3",
]


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_logger_save_dir_given_on_the_command_line_is_used(tmp_path):
    root, logs = tmp_path / "root", tmp_path / "logs"
    main(["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(root), *TINY])
    assert (root / "lightning_logs" / "version_0" / "metrics.csv").is_file()  # no save_dir: the root's
    main(
        [
            "fit",
            "--config",
            "configs/madpo.yaml",
            "--trainer.default_root_dir",
            str(tmp_path / "root2"),
            *TINY,
            "--trainer.logger.save_dir",
            str(logs),
        ]
    )
    assert (logs / "lightning_logs" / "version_0" / "metrics.csv").is_file()
    assert not (tmp_path / "root2" / "lightning_logs").exists()


@pytest.mark.slow
def test_a_cli_folder_resume_takes_the_newest_checkpoint_and_continues_the_log(tmp_path):
    import warnings

    from comlrl_lightning.runtime.quiet import install_noise_filters

    def fit(root, rounds, *extra):
        return main(
            [
                "fit",
                "--config",
                "configs/madpo_iter.yaml",
                "--trainer.default_root_dir",
                str(root),
                *ITER_TINY,
                "--data.init_args.num_iterations",
                str(rounds),
                *extra,
            ]
        )

    fit(tmp_path / "whole", 3)
    run = tmp_path / "run"
    checkpoints = run / "lightning_logs" / "version_0" / "checkpoints"
    with warnings.catch_warnings(record=True) as fresh:
        install_noise_filters()
        fit(run, 2)
    first = _metrics(run)
    # a resume from the folder, with other checkpoint options (keep every epoch's checkpoint now)
    callbacks = [
        {"class_path": "comlrl_lightning.callbacks.RewardCurvePlot"},
        {
            "class_path": "comlrl_lightning.callbacks.ResumableCheckpoint",
            "init_args": {"save_last": True, "save_top_k": -1, "save_on_train_epoch_end": True},
        },
    ]
    with warnings.catch_warnings(record=True) as caught:
        install_noise_filters()
        fit(run, 3, "--ckpt_path", str(checkpoints), f"--trainer.callbacks={json.dumps(callbacks)}")
    # the resume warns about nothing the fresh run did not (no "not empty" folder, no missing callbacks)
    assert {str(w.message)[:60] for w in caught} <= {str(w.message)[:60] for w in fresh}
    assert sorted(p.name for p in (run / "lightning_logs").iterdir()) == ["version_0"]
    assert not list(checkpoints.glob("*-v*.ckpt"))  # last.ckpt holds the newest state, no copies beside it
    from comlrl_lightning.checkpoints.metadata import newest_checkpoint, read_checkpoint_metadata

    assert newest_checkpoint(checkpoints).name == "last.ckpt"
    assert read_checkpoint_metadata(checkpoints / "last.ckpt")["progress"]["epochs"] == 3
    rows = _metrics(run)
    assert rows[: len(first)] == first and [
        r["iter/current_iteration"] for r in rows if r.get("iter/current_iteration")
    ] == [
        "1.0",
        "2.0",
        "3.0",
    ]
    whole = {p.name: p.read_bytes() for p in (tmp_path / "whole" / "preference_replay").glob("iteration_*.json")}
    assert {p.name: p.read_bytes() for p in (run / "preference_replay").glob("iteration_*.json")} == whole


@pytest.mark.slow  # wandb starts its service process
def test_a_cli_resume_continues_the_wandb_run_of_its_checkpoint_under_the_root_dir(tmp_path, monkeypatch):
    """A WandbLogger without a save_dir writes under trainer.default_root_dir (never the working
    directory), and a resume from the checkpoint folder continues its W&B run in the same folder."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    from comlrl_lightning.checkpoints.metadata import read_checkpoint_metadata
    from comlrl_lightning.cli import run_cli

    wandb.finish()  # a run an earlier test left open in this process would be reused by the logger
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    config, root = str(Path(__file__).parents[1] / "configs" / "madpo.yaml"), tmp_path / "root"

    def fit(epochs, *extra):
        words = [*TINY, "--data.init_args.num_train_epochs", str(epochs), *extra]
        logger = ["--trainer.logger", "lightning.pytorch.loggers.WandbLogger", "--trainer.logger.init_args.offline"]
        return run_cli(["fit", "--config", config, "--trainer.default_root_dir", str(root), *words, *logger, "true"])

    def wandb_run_id(cli):  # the CSV log the command line adds beside W&B is the first logger
        return next(logger for logger in cli.trainer.loggers if isinstance(logger, WandbLogger)).version

    first = fit(1)
    run_id = wandb_run_id(first)
    (checkpoints,) = {path.parent for path in root.rglob("last.ckpt")}
    assert read_checkpoint_metadata(checkpoints)["wandb"]["id"] == run_id
    wandb.finish()
    second = fit(2, "--ckpt_path", str(checkpoints))
    assert wandb_run_id(second) == run_id  # the same W&B run, continued
    assert {path.parent for path in root.rglob("last.ckpt")} == {checkpoints}  # in the same folder
    assert read_checkpoint_metadata(checkpoints)["progress"]["epochs"] == 2
    records = sorted(root.rglob("run-*.wandb"))
    assert len(records) == 2 and {path.name for path in records} == {f"run-{run_id}.wandb"}
    assert not list((tmp_path / "cwd").iterdir())  # nothing in the working directory


def test_the_vllm_overlay_changes_only_the_generator_and_the_run_folder_of_the_iterative_default():
    """``configs/overlays/vllm.yaml`` over ``madpo_iter.yaml``: the same trainer, model and data but
    for its folder and its generator."""
    from tests.helpers.configs import CONFIGS, composed

    default, vllm = yaml_of(CONFIGS / "madpo_iter.yaml"), composed(CONFIGS / "overlays" / "vllm.yaml")
    assert vllm["model"]["init_args"].pop("generator")["class_path"] == "comlrl_lightning.generation.VLLMGenerator"
    default["model"]["init_args"].pop("generator")
    assert vllm["trainer"].pop("default_root_dir") == "runs/madpo_iter_vllm"
    default["trainer"].pop("default_root_dir")
    assert vllm == default


def yaml_of(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_a_cli_resume_uses_the_given_options_lists_them_in_one_line_and_refuses_a_fixed_one(tmp_path, caplog, capsys):
    """The options given with --ckpt_path are the run's: a new learning rate on the restored optimizer,
    a new temperature in the resumed round's sampling, a data option; a new model is refused before
    training, naming the option and both values; a corrupt checkpoint field is one error line."""
    from comlrl_lightning.cli import run_cli
    from comlrl_lightning.defaults import embedded_model_path

    def args(rounds, *extra):
        root = ["--trainer.default_root_dir", str(tmp_path), "--data.init_args.num_iterations", str(rounds)]
        return ["fit", "--config", "configs/madpo_iter.yaml", *root, *ITER_TINY, *extra]

    main(args(1))
    checkpoints = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    caplog.clear()
    changed = ["--model.init_args.agent_learning_rate", "0.0001", "--model.init_args.sampling.temperature", "0.9"]
    cli = run_cli(args(2, *changed, "--data.init_args.eval_num_samples", "2", "--ckpt_path", str(checkpoints)))
    lines = [m for m in caplog.messages if m.startswith("resumed with changed options: ")]
    assert lines == [
        "resumed with changed options: model.agent_learning_rate: 0.003 -> 0.0001, model.sampling.temperature: "
        "1.0 -> 0.9, data.eval_num_samples: 4 -> 2, data.num_iterations: 1 -> 2"
    ]
    assert [group["lr"] for group in cli.trainer.optimizers[0].param_groups] == [0.0001, 0.0001]
    assert cli.model.generation_settings.temperature == 0.9 and cli.datamodule.eval_num_samples == 2
    assert "temperature: 0.9" in (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_status:
        main(args(3, "--model.init_args.team.agent_model", str(embedded_model_path()), "--ckpt_path", str(checkpoints)))
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_status.value.code == 2 and len(err) == 1
    assert err[0].startswith("error: cannot resume ") and "model.team.agent_model: 'embedded' -> '" in err[0]
    import torch

    state = torch.load(checkpoints / "last.ckpt", weights_only=True)
    state["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"] = "two"
    torch.save(state, tmp_path / "corrupt.ckpt")
    with pytest.raises(SystemExit):
        main(args(3, "--ckpt_path", str(tmp_path / "corrupt.ckpt")))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint field loops.fit_loop.epoch_progress.current.processed is 'two'" in err[0]


@pytest.mark.slow  # parses the command line three times (no run)
def test_an_option_needs_no_init_args_once_its_class_is_known_as_model_help_spells_it(capsys):
    import yaml

    def printed(*words):
        with pytest.raises(SystemExit):
            main(["fit", *words, "--print_config"])
        return yaml.safe_load(capsys.readouterr().out)

    config = ["--config", "configs/madpo.yaml"]
    short = printed(*config, "--model.dpo_beta", "0.25", "--data.eval_num_samples", "8", "--model.sampling.top_k", "5")
    long = printed(*config, "--model.init_args.dpo_beta", "0.25", "--data.init_args.eval_num_samples", "8",
                   "--model.init_args.sampling.top_k", "5")  # fmt: skip
    assert short == long and short["model"]["init_args"]["dpo_beta"] == 0.25
    assert short["data"]["init_args"]["eval_num_samples"] == 8 and short["model"]["init_args"]["sampling"]["top_k"] == 5
    with pytest.raises(SystemExit):  # before --config the class is not known yet: no such option, either spelling
        main(["fit", "--model.dpo_beta", "0.25", *config, "--print_config"])
    assert "--model.dpo_beta: no such option" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fit", "--model.help", "comlrl_lightning.MADPOModule"])
    text = capsys.readouterr().out
    assert "--model.dpo_beta DPO_BETA" in text and "--model.init_args." not in text
