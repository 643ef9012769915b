"""Local paths only, and paths from checkpoints confined to their folder (links and ``..`` resolved)."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning import MADPOModule, PreferenceDataModule
from comlrl_lightning.cli import main
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.paths import (
    confine_model_checkpoint_state,
    is_remote,
    make_folder,
    require_local,
    resolves_inside,
)
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_team, tiny_trainer


@pytest.mark.parametrize(
    "path",
    [
        "https://example.invalid/last.ckpt",
        "http://127.0.0.1:9/last.ckpt",
        "simplecache::http://127.0.0.1:9/last.ckpt",  # an fsspec chain: the scheme is not alphanumeric
        "filecache::s3://bucket/last.ckpt",
        "s3://bucket/last.ckpt",
        "hf://datasets/org/name/data.jsonl",
        "git+https://example.invalid/repo",
        "file:///tmp/last.ckpt",  # local, but spelled as a URL: say it as a path
        "  https://example.invalid/x",
        "blockcache::/tmp/local/through/a/chain",
    ],
)
def test_every_remote_spelling_is_remote_and_refused_naming_the_option(path):
    assert is_remote(path)
    with pytest.raises(ConfigurationError, match=r"^ckpt_path '.*' is remote; only a local path is accepted"):
        require_local(path, "ckpt_path")


@pytest.mark.parametrize("path", ["/tmp/last.ckpt", "runs/x/last.ckpt", "epoch=1-step=3.ckpt", "C:/data/x.json"])
def test_local_paths_pass(path):
    assert not is_remote(path) and require_local(path, "ckpt_path") == path


def test_resolves_inside_follows_links_and_dotdot(tmp_path):
    folder, outside = tmp_path / "ckpt", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "escape").symlink_to(outside)
    assert resolves_inside("last.ckpt", folder) and resolves_inside(folder / "sub" / "x", folder)
    assert not resolves_inside("../victim.txt", folder)
    assert not resolves_inside(folder / ".." / "victim.txt", folder)
    assert not resolves_inside("escape/victim.txt", folder)  # a link inside that leads out
    assert not resolves_inside("/etc/passwd", folder)
    assert not resolves_inside(str(tmp_path / "ckpt-sibling" / "x"), folder)  # a prefix is not a parent


def test_a_model_checkpoint_state_keeps_only_paths_inside_its_folder(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "out").symlink_to(tmp_path)
    inside = str(folder / "epoch=0-step=3.ckpt")
    state = {
        "dirpath": str(folder),
        "last_model_path": str(folder / ".." / "victim.txt"),
        "best_model_path": str(folder / "out" / "victim.txt"),
        "best_model_score": 0.5,
        "kth_best_model_path": inside,
        "best_k_models": {inside: 0.5, "/etc/passwd": 0.1, str(folder): 0.2},
    }
    with pytest.warns(UserWarning, match=r"ModelCheckpoint: the checkpoint names '.*/ckpt/\.\./victim\.txt'"):
        dropped = confine_model_checkpoint_state(state, folder, "ModelCheckpoint")
    assert sorted(dropped) == sorted(
        [str(folder / ".." / "victim.txt"), str(folder / "out" / "victim.txt"), "/etc/passwd", str(folder)]
    )
    assert state["last_model_path"] == "" and state["best_model_path"] == "" and state["best_model_score"] is None
    assert state["kth_best_model_path"] == inside and state["best_k_models"] == {inside: 0.5}
    assert os.path.isdir(tmp_path)  # nothing was touched, only the state


def test_a_remote_checkpoint_folder_keeps_its_own_paths_only():
    state = {"last_model_path": "s3://bucket/run/last.ckpt", "best_model_path": "s3://bucket/run/../other/x.ckpt"}
    state["best_k_models"] = {"s3://bucket/run/a.ckpt": 1.0, "s3://bucket/elsewhere/b.ckpt": 2.0, "/tmp/c.ckpt": 3.0}
    with pytest.warns(UserWarning):
        dropped = confine_model_checkpoint_state(state, "s3://bucket/run", "ModelCheckpoint")
    assert sorted(dropped) == ["/tmp/c.ckpt", "s3://bucket/elsewhere/b.ckpt", "s3://bucket/run/../other/x.ckpt"]
    assert state["last_model_path"] == "s3://bucket/run/last.ckpt" and list(state["best_k_models"]) == [
        "s3://bucket/run/a.ckpt"
    ]


def test_make_folder_creates_a_folder_and_names_a_file_in_the_way(tmp_path):
    make_folder(tmp_path / "a" / "b", "cache_dir")
    assert (tmp_path / "a" / "b").is_dir()
    make_folder(tmp_path / "a" / "b", "cache_dir")  # an existing folder is fine
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file", tmp_path / "file" / "under"):
        with pytest.raises(ConfigurationError) as error:
            make_folder(path, "COMLRL_LIGHTNING_CACHE")
        assert str(error.value) == (
            f"COMLRL_LIGHTNING_CACHE names {path}, which is (or lies under) a file, not a folder; name a folder."
        )


@contextlib.contextmanager
def served_checkpoint(folder: Path) -> Iterator[Tuple[str, List[tuple]]]:
    """A real HTTP server on 127.0.0.1 serving ``folder/last.ckpt`` (bytes that would run code if
    unpickled): its URL, and the requests it logged (filled as they come)."""
    requests: List[tuple] = []

    class Recording(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(args)

    folder.mkdir()
    (folder / "last.ckpt").write_bytes(b"not to be unpickled")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Recording, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/last.ckpt", requests
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_checkpoint_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                "configs/madpo.yaml",
                "--trainer.default_root_dir",
                str(tmp_path),
                "--ckpt_path",
                "https://example.invalid/last.ckpt",
            ]
        )
    assert (
        exit_info.value.code == 2 and "is remote; only a local checkpoint file is accepted" in capsys.readouterr().err
    )
    assert not list(tmp_path.glob("**/config.yaml"))  # refused before anything ran
    # from Python too: a real server on 127.0.0.1 serves a file that would run code if loaded
    with served_checkpoint(tmp_path / "served") as (url, _):
        module, datamodule = MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
        with pytest.raises(ValueError, match=f"ckpt_path '{url}' is remote"):
            tiny_trainer(tmp_path / "python").fit(module, datamodule, ckpt_path=url)


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_remote_checkpoint_sources_in_every_spelling_are_refused_before_any_request(tmp_path, capsys):
    with served_checkpoint(tmp_path / "served") as (url, requests):
        for spelling in (f"simplecache::{url}", f"filecache::{url}", f"blockcache::{url}", url.replace("http", "HTTP")):
            with pytest.raises(SystemExit) as exit_info:
                main(
                    [
                        "fit",
                        "--config",
                        "configs/madpo.yaml",
                        "--trainer.default_root_dir",
                        str(tmp_path),
                        "--ckpt_path",
                        spelling,
                    ]
                )
            assert exit_info.value.code == 2
            assert f"error: ckpt_path '{spelling}' is remote" in capsys.readouterr().err
            with pytest.raises(ConfigurationError, match="is remote; only a local checkpoint file is accepted"):
                tiny_trainer(tmp_path / "python").fit(
                    MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA), ckpt_path=spelling
                )
            for source in (spelling.replace("last.ckpt", "model"), f"hf://{spelling.split('://')[1]}"):
                with pytest.raises(ConfigurationError, match="model source '.*' is remote"):
                    MADPOModule(**{**TINY_MODEL, "team": tiny_team(agent_model=source)}).team
    assert requests == []  # nothing was downloaded, not even to look


@pytest.mark.parametrize("escape", ["dotdot", "link"])
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_doctored_model_checkpoint_state_cannot_make_the_next_save_delete_outside(tmp_path, escape):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "ckpt"

    def checkpoint():
        return ModelCheckpoint(dirpath=folder, save_last=True, save_top_k=-1, save_on_train_epoch_end=True)

    tiny_trainer(tmp_path, max_epochs=1, callbacks=[checkpoint()]).fit(
        MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
    )
    (folder / "escape").symlink_to(tmp_path)  # a link inside the folder that leads out of it
    doctored = str(folder / ".." / "victim.txt") if escape == "dotdot" else str(folder / "escape" / "victim.txt")
    state = torch.load(folder / "last.ckpt", weights_only=True)
    (key,) = [key for key in state["callbacks"] if key.startswith("ModelCheckpoint")]
    state["callbacks"][key]["last_model_path"] = doctored  # Lightning removes the previous last file at the next save
    state["callbacks"][key]["best_k_models"][doctored] = torch.tensor(-1.0)
    torch.save(state, folder / "last.ckpt")  # still weights_only-safe: only paths are doctored
    with pytest.warns(UserWarning, match=rf"ModelCheckpoint: the checkpoint names '{doctored}', which is not inside"):
        tiny_trainer(tmp_path, max_epochs=2, callbacks=[checkpoint()]).fit(
            MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA), ckpt_path=str(folder / "last.ckpt")
        )
    assert victim.read_text() == "keep me"
    assert list(folder.glob("epoch=1-*.ckpt"))  # the resumed run saved on (and removed nothing outside)
