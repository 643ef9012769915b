"""Faults a user or a doctored file can cause: paths read from checkpoints, remote checkpoints, resumes
with changed options or a different data module."""

from __future__ import annotations

import logging
import os

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning import HistoryComparator, MADPOModule, PreferenceDataModule, TaskOptions
from comlrl_lightning.cli import main, run_cli
from comlrl_lightning.data.replay import ReplayBuffer, ReplayIndexError
from comlrl_lightning.data.snapshots import PolicySnapshots
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_sampling, tiny_team, tiny_trainer
from tests.helpers.cli_helpers import TINY_CLI
from tests.helpers.iterative_run import make_run


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_doctored_snapshot_index_cannot_make_a_resume_delete_outside_the_run(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
    )
    module, datamodule, trainer = make_run(
        tmp_path / "run", data=dict(comparator=HistoryComparator(k=1)), callbacks=[checkpoint], max_epochs=2
    )
    trainer.fit(module, datamodule)
    path = next((tmp_path / "ckpt").glob("epoch=1-*.ckpt"))
    state = torch.load(path, weights_only=True)
    state["callbacks"]["comlrl_lightning.data"]["snapshots"]["saved"].insert(0, "../../victim")
    torch.save(state, path)  # still weights_only-safe: only the index is doctored
    module, datamodule, trainer = make_run(tmp_path / "run", data=dict(comparator=HistoryComparator(k=1)))
    with pytest.raises(ValueError, match=r"snapshot index names '\.\./\.\./victim', which is not a policy snapshot"):
        trainer.fit(module, datamodule, ckpt_path=str(path))
    assert (victim / "precious.txt").read_text() == "keep me"


def test_snapshot_and_replay_indexes_only_name_files_of_their_own_folder(tmp_path):
    snapshots = PolicySnapshots(tmp_path / "snapshots")
    for name in ("../x", "/etc", "initial/../../x", "iteration_1"):
        with pytest.raises(ValueError, match="not a policy snapshot"):
            snapshots.load_state_dict({"saved": [name]})
    snapshots.load_state_dict({"saved": ["initial", "iteration_0003"]})  # names of this folder are fine
    replay = ReplayBuffer(tmp_path / "replay")
    shard = {"iteration": 1, "filename": "../../outside.json", "num_pairs": 1, "sha256": "0" * 64}
    with pytest.raises(
        ReplayIndexError, match=r"names '\.\./\.\./outside\.json' for iteration 1, which is not a round file"
    ):
        replay.load_state_dict({"version": 1, "directory": "x", "shards": [shard]})


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
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "last.ckpt").write_bytes(b"not to be unpickled")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/last.ckpt"
    try:
        module, datamodule = MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
        with pytest.raises(ValueError, match=f"ckpt_path '{url}' is remote"):
            tiny_trainer(tmp_path / "python").fit(module, datamodule, ckpt_path=url)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_resuming_keeps_the_given_options_and_says_what_changed(tmp_path, caplog):
    common = ["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path), *TINY_CLI]
    main(common + ["--data.init_args.num_train_epochs", "1"])
    (last,) = tmp_path.glob("lightning_logs/version_0/checkpoints/last.ckpt")
    with caplog.at_level(logging.INFO):
        cli = run_cli(
            common
            + ["--data.init_args.num_train_epochs", "2", "--model.init_args.dpo_beta", "7", "--ckpt_path", str(last)]
        )
    assert cli.model.dpo_beta == 7.0  # the command line wins over the checkpoint's 0.1
    lines = [m for m in caplog.messages if m.startswith("resumed with changed options: ")]
    assert lines == ["resumed with changed options: model.dpo_beta: 0.1 -> 7.0, data.num_train_epochs: 1 -> 2"]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_base_checkpoint_cannot_resume_an_iterative_data_module(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tiny_trainer(tmp_path, max_epochs=1, callbacks=[checkpoint]).fit(
        MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
    )
    module, datamodule, trainer = make_run(tmp_path / "iterative")
    # refused when the checkpoint is loaded, before any round: the resume rule names both kinds
    with pytest.raises(ValueError, match="with other data.kind \\(data.kind: 'preference' -> 'iterative'"):
        trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))


HOLD_LOCK = """
import sys, time
from comlrl_lightning.runtime.folder_lock import FolderLock
FolderLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_two_runs_cannot_share_a_replay_folder_and_a_dead_runs_lock_does_not_block(tmp_path):
    import subprocess
    import sys

    from comlrl_lightning.runtime.folder_lock import FolderInUseError

    replay = tmp_path / "run" / "preference_replay"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(replay)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        module, datamodule, trainer = make_run(tmp_path / "run", data=dict(num_iterations=1), max_epochs=2)
        with pytest.raises(FolderInUseError, match=rf"{replay} is in use by another run \(process {holder.pid} on "):
            trainer.fit(module, datamodule)
        assert not list(replay.glob("iteration_*.json"))  # refused before the first round was collected
    finally:
        holder.kill()  # SIGKILL: no clean-up, the kernel drops the lock
        holder.wait()
    module, datamodule, trainer = make_run(tmp_path / "run", data=dict(num_iterations=1), max_epochs=2)
    trainer.fit(module, datamodule)
    assert [p.name for p in replay.glob("iteration_*.json")] == ["iteration_0001.json"]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_second_run_in_the_same_process_is_refused_and_a_finished_run_releases(tmp_path):
    from comlrl_lightning.runtime.folder_lock import FolderInUseError, FolderLock

    other = FolderLock(tmp_path / "preference_replay").acquire()  # a run of this process that is still going
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=1), max_epochs=2)
    with pytest.raises(FolderInUseError, match=f"process {os.getpid()} on"):
        trainer.fit(module, datamodule)
    other.release()
    module, datamodule, trainer = make_run(tmp_path, data=dict(num_iterations=1), max_epochs=2)
    trainer.fit(module, datamodule)
    assert not any(lock.held for lock in datamodule.folder_locks) and datamodule.folder_locks == []
    FolderLock(tmp_path / "preference_replay").acquire().release()  # free again after the run


# ---------------------------------------------------------------------------------------------
# Bad data: found when it is loaded, before any model work, with the file, line, item and field


def _fit_with(tmp_path, **task):
    module = MADPOModule(**{**TINY_MODEL, "team": tiny_team(agent_model="/nonexistent/never/loaded")})  # no load
    return tiny_trainer(tmp_path).fit(module, PreferenceDataModule(**{**TINY_DATA, "task": TaskOptions(**task)}))


def test_a_malformed_jsonl_line_is_named_with_file_and_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"prompt": "ab"}\n\n{"prompt": "cd"\n')
    with pytest.raises(ValueError, match=rf"train_dataset: {path} line 3: not valid JSON"):
        _fit_with(tmp_path, train_dataset=str(path), reward_func=lambda a, b: [0.0])


@pytest.mark.parametrize(
    "items, formatters, message",
    [
        ([{"prompt": "ab"}, {"question": "no prompt"}], None, "train_dataset: item 1: field 'prompt' is missing"),
        (
            [{"prompt": "ab"}, {"prompt": None}],
            None,
            "train_dataset: item 1: field 'prompt' is a NoneType, expected a string",
        ),
        ([{"prompt": ["a"]}], None, "train_dataset: item 0: field 'prompt' is a list, expected a string"),
        (
            [{"q": "x"}, {"q": "y"}, {"r": 1}],
            ["Q: {q}", "A: {q}"],
            "train_dataset: item 2: formatter template 'Q: {q}' needs field 'q'",
        ),
    ],
)
def test_items_a_formatter_cannot_prompt_are_named_before_any_model_loads(tmp_path, items, formatters, message):
    with pytest.raises(ValueError) as error:
        _fit_with(tmp_path, train_dataset=items, formatters=formatters, reward_func=lambda a, b: [0.0])
    assert message in str(error.value)


def test_a_missing_model_path_says_it_does_not_exist():
    with pytest.raises(FileNotFoundError, match="model path /nonexistent/model/path does not exist"):
        MADPOModule(team=tiny_team(agent_model="/nonexistent/model/path")).team


def test_a_reward_function_that_raises_inside_is_called_once():
    from comlrl_lightning.data.oracle import call_reward_function

    calls = []

    def reward(writer, matcher):
        calls.append(1)  # a side effect: a second call would run it twice
        raise TypeError("bug inside the reward")

    with pytest.raises(RuntimeError, match="reward function .*reward raised TypeError: bug inside the reward"):
        call_reward_function(reward, [["a"], ["b"]], ["p"], [{}])
    assert calls == [1]


# ---------------------------------------------------------------------------------------------
# Checkpoints on a full disk


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_full_disk_never_leaves_a_torn_checkpoint(tmp_path, monkeypatch):
    import builtins
    import errno

    from comlrl_lightning.runtime import checkpoint_io, files

    class FullDisk:
        """A file that takes half of what is written, then reports ENOSPC."""

        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    class FillDiskAfterFirstEpoch(ModelCheckpoint):
        def on_train_epoch_end(self, trainer, pl_module):
            super().on_train_epoch_end(trainer, pl_module)
            monkeypatch.setattr(files, "open", lambda path, mode: FullDisk(builtins.open(path, mode)), raising=False)

    checkpoint = FillDiskAfterFirstEpoch(
        dirpath=tmp_path / "ckpt", save_last=True, save_top_k=-1, save_on_train_epoch_end=True
    )
    trainer = tiny_trainer(tmp_path, max_epochs=2, callbacks=[checkpoint])
    module = MADPOModule(**TINY_MODEL)
    with pytest.raises(OSError, match="No space left on device"):
        trainer.fit(module, PreferenceDataModule(**TINY_DATA))
    assert isinstance(trainer.strategy.checkpoint_io, checkpoint_io.AtomicCheckpointIO)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)  # complete: the first epoch's
    assert saved["epoch"] == 0 and not list((tmp_path / "ckpt").glob("*.tmp"))
    monkeypatch.undo()
    module, datamodule = MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
    tiny_trainer(tmp_path, max_epochs=2).fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))


def test_a_prompt_that_does_not_fit_the_context_is_named_before_sampling(tmp_path):
    items = [{"prompt": "ab"}, {"prompt": "x" * 496}]  # the embedded GPT-2 has 512 positions
    module = MADPOModule(**{**TINY_MODEL, "sampling": tiny_sampling(max_new_tokens=20)})
    data = PreferenceDataModule(
        **{**TINY_DATA, "task": TaskOptions(train_dataset=items, reward_func=lambda a, b: [0.0])}
    )
    with pytest.raises(
        ValueError,
        match=r"train_dataset: item 1: agent 0's prompt has 49\d tokens; with "
        r"max_new_tokens=20 that is \d+ more than the model's context of 512",
    ):
        tiny_trainer(tmp_path).fit(module, data)


def test_a_slow_reward_function_shows_progress():
    from comlrl_lightning.data.oracle import Oracle, ScoringProgress
    from comlrl_lightning.runtime.progress import Progress

    lines = []
    clock = iter([0.0, 4.0, 11.0, 12.0, 25.0])  # monotonic seconds at the start and after each of 4 items
    progress = Progress("collection scoring", 5, "item", report=lines.append, interval=10.0, clock=lambda: next(clock))
    scoring = ScoringProgress(Oracle(lambda a, b: [1.0]), progress)
    for _ in range(4):
        assert scoring.score([["a"], ["b"]], ["p"], {}) == ([1.0], [1.0])
    assert lines == [
        "collection scoring: 2/5 items (11s elapsed, about 16s left)",
        "collection scoring: 4/5 items (25s elapsed, about 6s left)",
    ]


def test_an_empty_dataset_is_an_error_before_any_model_loads(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match="train_dataset: training requires at least one task item."):
        _fit_with(tmp_path, train_dataset=str(path), reward_func=lambda a, b: [0.0])


# ---------------------------------------------------------------------------------------------
# Round three: every path confined, local sources only, files never followed, one error family


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


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_remote_checkpoint_sources_in_every_spelling_are_refused_before_any_request(tmp_path, capsys):
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from comlrl_lightning.errors import ConfigurationError

    requests = []

    class Recording(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(args)

    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "last.ckpt").write_bytes(b"not to be unpickled")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Recording, directory=str(tmp_path / "served")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/last.ckpt"
    try:
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
    finally:
        server.shutdown()
        server.server_close()
    assert requests == []  # nothing was downloaded, not even to look


def test_a_file_that_is_not_a_checkpoint_is_named_without_torchs_weights_only_page(tmp_path):
    from comlrl_lightning.errors import DataError

    for name, data in [("random.ckpt", bytes(range(256)) * 64), ("empty.ckpt", b""), ("text.ckpt", b"hello\n")]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError) as error:
            tiny_trainer(tmp_path / "run").fit(
                MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA), ckpt_path=str(tmp_path / name)
            )
        assert str(error.value).startswith(f"ckpt_path '{tmp_path / name}' is not a Lightning checkpoint")
        assert "weights_only" not in str(error.value)
    torch.save([1, 2, 3], tmp_path / "list.ckpt")
    with pytest.raises(DataError, match=r"is not a Lightning checkpoint \(a saved list without a state_dict\)"):
        tiny_trainer(tmp_path / "run").fit(
            MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA), ckpt_path=str(tmp_path / "list.ckpt")
        )


@pytest.mark.parametrize("name", ["config.yaml", "hparams.yaml", "metrics.csv"])
def test_files_rewritten_in_place_are_never_written_through_a_planted_link(tmp_path, capsys, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    log_dir = tmp_path / "run" / "lightning_logs" / "fixed"  # a fixed log folder, as a resumed run may keep
    log_dir.mkdir(parents=True)
    (log_dir / name).symlink_to(victim)
    args = ["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path / "run")]
    args += ["--trainer.logger.init_args.version", "fixed", "--data.init_args.num_train_epochs", "1", *TINY_CLI]
    # metrics.csv too: the CSV log a resumed run continues is read and appended to, never through a link
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and f"error: {log_dir / name} (" in err
    assert "is a symbolic link, not a regular file" in err
    assert victim.read_text() == "keep me"


def test_a_read_only_replay_folder_is_named_before_the_first_round(tmp_path):
    from comlrl_lightning.errors import RunStateError
    from tests.helpers.read_only import read_only_folder

    with read_only_folder(tmp_path / "replay") as folder:
        module, datamodule, trainer = make_run(tmp_path, data=dict(preference_replay_dir=str(folder)), max_epochs=2)
        with pytest.raises(RunStateError, match=rf"^{folder} is not writable \(.*\); the run writes its files there"):
            trainer.fit(module, datamodule)
        assert module._team is None  # named before any model loaded


def test_snapshots_and_round_files_that_are_links_leading_out_are_never_used(tmp_path):
    import hashlib

    outside = tmp_path / "outside"
    (outside / "agent_0").mkdir(parents=True)
    (outside / "agent_0" / "precious.txt").write_text("keep me")
    snapshots = PolicySnapshots(tmp_path / "snapshots")
    snapshots.directory.mkdir()
    (snapshots.directory / "initial").symlink_to(outside)
    with pytest.warns(UserWarning, match=r"snapshots/initial leads outside .*snapshots \(a link\); dropped"):
        snapshots.load_state_dict({"saved": ["initial"]})
    snapshots.prune(5)
    assert snapshots.saved == [] and (outside / "agent_0" / "precious.txt").read_text() == "keep me"
    with pytest.raises(FileNotFoundError, match="Policy snapshot .*initial is missing"):
        snapshots.require(0)
    from comlrl_lightning import Team
    from comlrl_lightning.errors import RunStateError

    with pytest.raises(RunStateError, match=r"snapshots/initial is a symbolic link; policy snapshots are folders"):
        snapshots.save(0, Team(["embedded"]))  # never written through the link
    assert sorted(p.name for p in outside.rglob("*")) == ["agent_0", "precious.txt"]
    data = b'{"iteration": 1, "num_pairs": 1, "pairs": [{}]}'
    (outside / "round.json").write_bytes(data)
    replay = ReplayBuffer(tmp_path / "replay")
    replay.directory.mkdir()
    (replay.directory / "iteration_0001.json").symlink_to(outside / "round.json")
    shard = {
        "iteration": 1,
        "filename": "iteration_0001.json",
        "num_pairs": 1,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    with pytest.raises(ReplayIndexError, match=r"iteration_0001\.json leads outside .*replay \(a link\)"):
        replay.load_state_dict({"version": 1, "directory": "x", "shards": [shard]})
