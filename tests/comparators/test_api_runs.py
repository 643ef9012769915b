"""Iterative runs with the API comparator: faults lose no round data, and the key leaks nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import Callback

from comlrl_lightning.comparators import ApiComparator, ComparatorApiError, HttpOptions
from tests.helpers.fake_providers import FakeProvider, Fault
from tests.helpers.iterative_run import make_run

KEY_ENV = "COMLRL_TEST_API_KEY"
KEY = "sk-live-5e8d2c0f7a1b3e9d4c6a"


def api_comparator(provider, **options):
    """The comparator section of a config: switching a run to the API needs nothing else."""
    return {
        "class_path": "comlrl_lightning.comparators.ApiComparator",
        "init_args": {
            "url": provider.url,
            "format": "openai",
            "model": "gpt-test",
            "key_env": KEY_ENV,
            "num_candidates": 4,
            **options,
        },
    }


def api_data(provider, **options):
    """Data options of the tiny run with a fresh API comparator (``options``: its init_args)."""
    comparator = ApiComparator(**api_comparator(provider, **options)["init_args"])
    return dict(comparator=comparator, num_iterations=2, num_train_epochs=1)


def round_files(root):
    return {p.name: p.read_bytes() for p in sorted((Path(root) / "preference_replay").glob("iteration_*.json"))}


def weights(module):
    return {k: v.detach().clone() for k, v in module.team.state_dict().items()}


class AfterRound1(Callback):
    """Changes the provider's behaviour once the first round has trained."""

    def __init__(self, provider, fault):
        self.provider, self.fault = provider, fault
        self.requests_in_round_1 = None

    def on_train_epoch_end(self, trainer, pl_module):
        if self.requests_in_round_1 is None:
            self.requests_in_round_1 = len(self.provider.requests)
        self.provider.always = self.fault


@pytest.mark.slow  # trains long for the everyday tier
def test_retried_faults_change_nothing_and_a_failed_round_is_redone_on_resume(tmp_path, monkeypatch):
    from lightning.pytorch.callbacks import ModelCheckpoint

    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider("openai") as provider:
        module, datamodule, trainer = make_run(tmp_path / "clean", data=api_data(provider), max_epochs=2)
        trainer.fit(module, datamodule)
        clean_files, clean_weights = round_files(tmp_path / "clean"), weights(module)
        assert sorted(clean_files) == ["iteration_0001.json", "iteration_0002.json"]

    root = tmp_path / "faulty"
    with FakeProvider("openai") as provider:
        # round 1: a 500, a 429 and a hung connection, all retried; round 2: the account runs dry
        provider.fail_next(Fault(500), Fault(429, headers={"Retry-After": "0"}), Fault(hang=True))
        checkpoint = ModelCheckpoint(
            dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
        )
        switch = AfterRound1(provider, Fault(402))
        module, datamodule, trainer = make_run(
            root, data=api_data(provider, http=HttpOptions(timeout=0.5)), max_epochs=2, callbacks=[checkpoint, switch]
        )
        datamodule.comparator.backoff_base = 0.01  # before the client is made (in the first round)
        assert datamodule.comparator.client.backoff_base == 0.01
        with pytest.raises(ComparatorApiError, match="HTTP 402 \\(insufficient balance"):
            trainer.fit(module, datamodule)
        assert switch.requests_in_round_1 == 2 * 16 + 3  # one request per agent and item, plus 3 retries
        assert round_files(root) == {"iteration_0001.json": clean_files["iteration_0001.json"]}
        assert not list((root / "preference_replay").glob("*.tmp"))

        provider.always = None  # balance topped up: resume from the end of round 1
        module, datamodule, trainer = make_run(root, data=api_data(provider), max_epochs=2)
        trainer.fit(module, datamodule, ckpt_path=str(root / "ckpt" / "epoch=0-step=3.ckpt"))
    assert round_files(root) == clean_files
    for key, value in clean_weights.items():
        torch.testing.assert_close(weights(module)[key], value, rtol=0, atol=0)


@pytest.mark.slow
def test_no_file_of_a_cli_run_contains_the_key(tmp_path, monkeypatch, capfd):
    """config.yaml, hparams.yaml, metrics, checkpoints, round files and wandb offline files."""
    from comlrl_lightning.cli import main

    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    root = tmp_path / "run"
    with FakeProvider("openai") as provider:
        config = {
            "seed_everything": 0,
            "trainer": {
                "accelerator": "cpu",
                "devices": 1,
                "default_root_dir": str(root),
                "enable_progress_bar": False,
                "check_val_every_n_epoch": None,
                "val_check_interval": 2,
                "logger": [
                    {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(root)}},
                    {
                        "class_path": "lightning.pytorch.loggers.WandbLogger",
                        "init_args": {"offline": True, "save_dir": str(root), "project": "secret-scan"},
                    },
                ],
                "callbacks": [
                    {
                        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                        "init_args": {"dirpath": str(root / "ckpt"), "save_last": True},
                    }
                ],
            },
            "model": {
                "class_path": "comlrl_lightning.MADPOModule",
                "init_args": {
                    "team": {"agent_model": "embedded", "num_agents": 2},
                    "sampling": {"max_new_tokens": 6},
                },
            },
            "data": {
                "class_path": "comlrl_lightning.IterativePreferenceDataModule",
                "init_args": {
                    "comparator": api_comparator(provider),
                    "num_iterations": 2,
                    "num_train_epochs": 1,
                    "task": {"train_dataset": "embedded", "eval_dataset": "embedded"},
                    "preference_num_candidates": 4,
                    "train_batch_size": 8,
                    "eval_num_samples": 4,
                    "eval_batch_size": 4,
                },
            },
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        try:
            main(["fit", "--config", str(path)])
        finally:
            import wandb

            wandb.finish()  # the next WandbLogger in this process must not reuse this run
        assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in provider.requests)  # the key was used

    files = [p for p in root.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"config.yaml", "hparams.yaml", "metrics.csv", "last.ckpt", "iteration_0002.json"} <= names
    assert any(p.suffix == ".wandb" for p in files), sorted(names)  # the offline wandb run
    saved_config = yaml.safe_load(next(p for p in files if p.name == "config.yaml").read_text())
    saved_comparator = saved_config["data"]["init_args"]["comparator"]
    assert saved_comparator["class_path"] == "comlrl_lightning.comparators.ApiComparator"
    assert saved_comparator["init_args"]["key_env"] == KEY_ENV  # the name is saved, not the value
    leaks = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert leaks == []
    out, err = capfd.readouterr()
    assert KEY not in out and KEY not in err
    assert "comparator/api_requests" in next(p for p in files if p.name == "metrics.csv").read_text()


def _peak_of_a_run(tmp_path, name, fault):
    """The peak resident memory of a tiny two-round run (its own process) against a server with ``fault``."""
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, KEY_ENV: KEY, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    with FakeProvider("openai") as provider:
        provider.always = fault
        result = subprocess.run(
            [sys.executable, "-m", "tests.helpers.api_memory_run", provider.url, str(tmp_path / name)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_run_against_a_gzip_bomb_peaks_within_100_mb_of_a_normal_run(tmp_path):
    """Eight requests in flight, each answered with 1 GiB of zeros in 1 MiB of gzip: httpx decoded a
    whole 64 KiB network chunk (64 MiB) at once in each (measured on the previous main: 482 MB for a
    normal run, 1247 MB against the bomb); decoded piece by piece it stays near the normal run."""
    from tests.comparators.test_response_body import zeros_gzip

    normal = _peak_of_a_run(tmp_path, "normal", None)
    bomb = _peak_of_a_run(tmp_path, "bomb", Fault(body=zeros_gzip(1 << 30), headers={"Content-Encoding": "gzip"}))
    assert normal["error"] is None and "answered with more than max_response_bytes=4194304 bytes" in bomb["error"]
    assert bomb["peak_mb"] - normal["peak_mb"] < 100, (normal, bomb)


@pytest.mark.parametrize(
    "where, value, named",
    [
        (("data", "comparator", "extra_body"), {"api_key": "another-key"}, "carry a credential (extra_body.api_key)"),
        (("data", "comparator", "extra_body"), {"user": "Bearer another-key-0123"}, "(extra_body.user holds one)"),
        (("data", "comparator", "extra_body"), {"user": KEY}, "comparator.init_args.extra_body.user holds the value"),
        (("data", "comparator", "headers"), {"X-Anything": KEY}, "headers.X-Anything holds the value of"),
        (("data", "comparator", "url"), "PATH", "url holds the value of COMLRL_TEST_API_KEY"),
        (
            ("model", "team", "agent_model"),
            KEY,
            "model.init_args.team.agent_model holds the value of COMLRL_TEST_API_KEY",
        ),
    ],
    ids=["extra-body-name", "extra-body-bearer", "extra-body-value", "header-value", "url-path", "another-section"],
)
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_key_anywhere_in_the_config_stops_the_run_before_any_file_is_written(
    tmp_path, monkeypatch, capfd, where, value, named
):
    from comlrl_lightning.cli import main

    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    root = tmp_path / "run"
    with FakeProvider("openai") as provider:
        comparator = api_comparator(provider)
        config = {
            "trainer": {
                "default_root_dir": str(root),
                "logger": {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"offline": True}},
            },
            "model": {"class_path": "comlrl_lightning.MADPOModule", "init_args": {"team": {"agent_model": "embedded"}}},
            "data": {
                "class_path": "comlrl_lightning.IterativePreferenceDataModule",
                "init_args": {"comparator": comparator},
            },
        }
        section = config[where[0]]["init_args"]
        section = section["comparator"]["init_args"] if where[1] == "comparator" else section
        section = section["team"] if where[1] == "team" else section
        section[where[-1]] = provider.url.replace("/v1/", f"/{KEY}/v1/") if value == "PATH" else value
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", str(path)])
    out, err = capfd.readouterr()
    assert exit_info.value.code == 2 and named in err and KEY not in out + err and "another-key" not in err
    assert not provider.requests and not root.exists()  # nothing ran, nothing was written (W&B included)


def echoed_key(prompt, index):
    """An endpoint that echoes the key it was sent: whole, in part, URL-encoded, or not at all."""
    import urllib.parse

    return [f"my key is {KEY}", f"key={KEY[:-3]}", urllib.parse.quote(KEY, safe=""), f"plain {index}"][index % 4]


def key_runs(data: bytes, length: int = 8) -> list:
    text = data.decode("utf-8", errors="replace")
    return [KEY[i : i + length] for i in range(len(KEY) - length + 1) if KEY[i : i + length] in text]


@pytest.mark.slow  # trains
def test_an_echoed_key_is_redacted_before_any_round_file_checkpoint_or_asset_holds_it(tmp_path, monkeypatch):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.conftest import tiny_sampling

    monkeypatch.setenv(KEY_ENV, KEY)
    root = tmp_path / "run"
    with FakeProvider("openai", text=echoed_key) as provider:
        checkpoint = ModelCheckpoint(
            dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
        )
        module, datamodule, trainer = make_run(
            root,
            data=api_data(provider),
            model=dict(sampling=tiny_sampling(max_new_tokens=40)),  # room for the whole key
            max_epochs=2,
            callbacks=[checkpoint],
        )
        trainer.fit(module, datamodule)
        assert provider.requests and all(r.headers["authorization"] == f"Bearer {KEY}" for r in provider.requests)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".ckpt" for p in files) and any(p.name == "iteration_0002.json" for p in files)
    assert any(p.name == "iteration_0001.json" and p.parent.parent.name.endswith(".assets") for p in files)
    leaks = {str(p): key_runs(p.read_bytes()) for p in files if key_runs(p.read_bytes())}
    assert leaks == {}
    stored = (root / "preference_replay" / "iteration_0001.json").read_text()
    assert "[redacted]" in stored and "plain" in stored  # the echo was redacted, the rest kept


def test_the_keys_value_in_the_models_options_stops_a_lightning_run_before_any_request(tmp_path, monkeypatch):
    """A special token (or any option) holding the key would land in hparams.yaml and every checkpoint."""
    from comlrl_lightning import TeamOptions
    from comlrl_lightning.errors import ConfigurationError

    monkeypatch.setenv(KEY_ENV, KEY)
    root = tmp_path / "run"
    with FakeProvider("openai") as provider:
        team = TeamOptions(special_tokens={"additional_special_tokens": ["<tool>", KEY]})
        module, datamodule, trainer = make_run(root, data=api_data(provider), model=dict(team=team), max_epochs=1)
        with pytest.raises(ConfigurationError) as error:
            trainer.fit(module, datamodule)
        assert not provider.requests
    message = str(error.value)
    assert "model.team.special_tokens.additional_special_tokens[1] holds the value of COMLRL_TEST_API_KEY" in message
    assert KEY not in message
    assert not list(root.rglob("*.ckpt")) and not list(root.rglob("iteration_*.json"))
