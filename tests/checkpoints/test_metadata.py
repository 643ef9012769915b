"""Reading a checkpoint's record and progress, and which checkpoint of a folder is the newest."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from comlrl_lightning.checkpoints.metadata import (
    METADATA_KEY,
    CheckpointNotFoundError,
    NoRunRecordError,
    checkpoint_progress,
    load_checkpoint_dict,
    newest_checkpoint,
    read_checkpoint_metadata,
    resolve_checkpoint,
)
from comlrl_lightning.errors import DataError

RUN_ID = "0123456789abcdef0123456789abcdef"


def fake_checkpoint(path: Path, epochs: int, step: int, batches: int = 0, record: dict = None) -> Path:
    """The parts of a Lightning checkpoint that say how far a run got (and optionally a run record)."""
    progress = lambda n: {"total": {"processed": n}, "current": {"processed": n}}  # noqa: E731
    state = {
        "epoch": epochs,
        "global_step": step,
        "loops": {"fit_loop": {"epoch_progress": progress(epochs), "epoch_loop.batch_progress": progress(batches)}},
        "callbacks": {"comlrl_lightning.data": {"built_round": epochs // 2}},
        "state_dict": {"w": torch.zeros(2)},
    }
    if record is not None:
        state[METADATA_KEY] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path


def record(**overrides) -> dict:
    return {
        "version": 1,
        "trainer_class": "MADPOIterTrainer",
        "sequence": 3,
        "run_id": RUN_ID,
        "wandb": {"id": "abc123", "project": "p"},
        "logs": None,
        **overrides,
    }


def test_the_newest_checkpoint_is_the_one_with_the_most_progress_whatever_its_name(tmp_path):
    fake_checkpoint(tmp_path / "last.ckpt", epochs=2, step=4)  # an older state under the name "last"
    fake_checkpoint(tmp_path / "last-v1.ckpt", epochs=3, step=6)
    fake_checkpoint(tmp_path / "checkpoint-2" / "checkpoint.ckpt", epochs=3, step=6, batches=1)
    fake_checkpoint(tmp_path / "epoch=2-step=5.ckpt", epochs=2, step=5)
    assert newest_checkpoint(tmp_path) == tmp_path / "checkpoint-2" / "checkpoint.ckpt"
    fake_checkpoint(tmp_path / "epoch=4-step=6.ckpt", epochs=4, step=6)  # an empty round: more epochs, same steps
    assert newest_checkpoint(tmp_path) == tmp_path / "epoch=4-step=6.ckpt"


def test_equal_progress_picks_the_file_written_last(tmp_path):
    first = fake_checkpoint(tmp_path / "b.ckpt", epochs=1, step=2)
    second = fake_checkpoint(tmp_path / "a.ckpt", epochs=1, step=2)
    os.utime(first, ns=(time.time_ns(), time.time_ns() - 10**9))
    assert newest_checkpoint(tmp_path) == second


def test_resolving_a_file_a_checkpoint_folder_and_a_folder_of_checkpoints(tmp_path):
    inner = fake_checkpoint(tmp_path / "ckpt" / "checkpoint-1" / "checkpoint.ckpt", epochs=1, step=2)
    newer = fake_checkpoint(tmp_path / "ckpt" / "checkpoint-2" / "checkpoint.ckpt", epochs=2, step=4)
    assert resolve_checkpoint(inner) == inner
    assert resolve_checkpoint(inner.parent) == inner  # a checkpoint-N folder: its own checkpoint
    assert resolve_checkpoint(tmp_path / "ckpt") == newer
    (tmp_path / "sharded" / "last.ckpt").mkdir(parents=True)  # a distributed checkpoint is a folder
    assert resolve_checkpoint(tmp_path / "sharded" / "last.ckpt") == tmp_path / "sharded" / "last.ckpt"
    with pytest.raises(CheckpointNotFoundError, match="No checkpoint at"):
        resolve_checkpoint(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointNotFoundError, match="holds no checkpoint"):
        resolve_checkpoint(tmp_path / "empty")


def test_checkpoints_behind_symbolic_links_are_not_candidates(tmp_path):
    outside = fake_checkpoint(tmp_path / "outside" / "far.ckpt", epochs=9, step=99)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "far.ckpt").symlink_to(outside)
    (tmp_path / "ckpt" / "checkpoint-9").symlink_to(outside.parent, target_is_directory=True)
    mine = fake_checkpoint(tmp_path / "ckpt" / "mine.ckpt", epochs=1, step=2)
    assert newest_checkpoint(tmp_path / "ckpt") == mine


def test_metadata_has_the_references_fields_and_the_progress(tmp_path):
    path = fake_checkpoint(tmp_path / "checkpoint-3" / "checkpoint.ckpt", epochs=3, step=6, record=record())
    metadata = read_checkpoint_metadata(tmp_path / "checkpoint-3")
    assert {key: metadata[key] for key in ("version", "trainer_class", "sequence", "run_id", "wandb")} == {
        "version": 1,
        "trainer_class": "MADPOIterTrainer",
        "sequence": 3,
        "run_id": RUN_ID,
        "wandb": {"id": "abc123", "project": "p"},
    }
    assert metadata["progress"] == {"epochs": 3, "step": 6, "batches": 0, "round": 1}
    assert metadata["path"] == str(path)
    assert checkpoint_progress(torch.load(path, weights_only=True)).step == 6


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(version=2), "unsupported checkpoint record version 2"),
        (dict(trainer_class=""), "names no trainer class"),
        (dict(sequence=-1), "invalid checkpoint sequence"),
        (dict(run_id="../../x"), "invalid run id"),
        (dict(wandb={"id": "a", "token": "secret"}), "invalid W&B run identity"),
        (dict(wandb={"id": "../../x"}), "invalid W&B run identity"),  # the id becomes a folder name
        (dict(logs={"save_dir": "/r", "name": "lightning_logs", "version": "../../etc", "rows": 1}), "invalid log"),
        (dict(logs={"save_dir": "/r", "name": "../x", "version": 0, "rows": 1}), "invalid log record"),
        (dict(logs={"save_dir": "/r", "name": "lightning_logs", "version": 0, "rows": -1}), "invalid log record"),
    ],
)
def test_a_malformed_record_is_named(tmp_path, overrides, message):
    fake_checkpoint(tmp_path / "a.ckpt", epochs=1, step=1, record=record(**overrides))
    with pytest.raises(ValueError, match=message):
        read_checkpoint_metadata(tmp_path / "a.ckpt")


def test_a_checkpoint_without_a_record_says_so(tmp_path):
    fake_checkpoint(tmp_path / "a.ckpt", epochs=1, step=1)
    with pytest.raises(NoRunRecordError, match="has no comlrl_lightning run record"):
        read_checkpoint_metadata(tmp_path / "a.ckpt")


@pytest.mark.parametrize(
    "content",
    [
        b"a user's file",  # IndexError inside torch.load
        b"hello world\n" * 10,  # KeyError
        b"\x80",  # IndexError
        b"G\xae",  # struct.error
        b"}cJ\xe9Y",  # UnicodeDecodeError
        b"\x80\x02XA\xdf\x00\xff",  # EOFError
        b"\x80\x02J\x95\x8f\x953.Q\x19\xba\x93J\xd1\xf4\xb5M3\x90",  # a torn legacy file: "Invalid magic number"
        b"PK\x03\x04garbage",  # a torn zip archive
        b"",
    ],
)
def test_any_bytes_that_are_not_a_checkpoint_are_one_named_error_and_no_warning(tmp_path, content):
    import warnings

    (tmp_path / "x.ckpt").write_bytes(content)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match=r"'.*x\.ckpt' is not a Lightning checkpoint"):
            load_checkpoint_dict(tmp_path / "x.ckpt")


def test_code_in_a_checkpoint_is_never_run(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    torch.save({"global_step": 1, METADATA_KEY: record(), "x": Payload()}, tmp_path / "evil.ckpt")
    with pytest.raises(DataError, match="is not a Lightning checkpoint"):
        read_checkpoint_metadata(tmp_path / "evil.ckpt")
    assert not (tmp_path / "pwned").exists()


def _corrupt(state: dict, field: str, value) -> dict:
    """``state`` with the dotted ``field`` (``loops.fit_loop`` style, a key may hold dots) set to ``value``."""
    if field in state or "." not in field:
        state[field] = value
        return state
    for key in state:
        if field.startswith(f"{key}.") and isinstance(state[key], dict):
            _corrupt(state[key], field[len(key) + 1 :], value)
            return state
    raise AssertionError(field)


@pytest.mark.parametrize(
    "field, value",
    [
        ("loops.fit_loop.epoch_progress.current.processed", "3"),
        ("loops.fit_loop.epoch_progress.current.processed", float("inf")),
        ("loops.fit_loop.epoch_loop.batch_progress.current.processed", None),
        ("loops.fit_loop.epoch_progress", [1]),
        ("global_step", "7"),
        ("global_step", -1),
        ("loops", "x"),
        ("callbacks", ["x"]),
        ("callbacks.comlrl_lightning.data", "x"),
        ("callbacks.comlrl_lightning.data.built_round", 1.5),
        ("hyper_parameters", 3),
    ],
)
def test_a_corrupt_or_newer_progress_field_is_one_error_naming_the_file_and_the_field(tmp_path, field, value):
    path = fake_checkpoint(tmp_path / "bad.ckpt", epochs=2, step=4, record=record())
    state = torch.load(path, weights_only=True)
    torch.save(_corrupt(state, field, value), path)
    with pytest.raises(DataError) as caught:
        read_checkpoint_metadata(path)
    message = str(caught.value)
    shown = field.split(".comlrl_lightning.data")[0] if field.startswith("callbacks.comlrl_lightning.data.") else field
    assert str(path) in message and shown.split(".current")[0] in message and "\n" not in message


def test_one_unreadable_file_in_a_folder_is_skipped_with_a_warning_naming_it(tmp_path):
    good = fake_checkpoint(tmp_path / "epoch=1.ckpt", epochs=1, step=2)
    bad = fake_checkpoint(tmp_path / "last.ckpt", epochs=5, step=10)
    torch.save(_corrupt(torch.load(bad, weights_only=True), "global_step", "ten"), bad)
    (tmp_path / "torn.ckpt").write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning) as caught:
        assert newest_checkpoint(tmp_path) == good
    assert {Path(str(w.message).split(" ")[1]).name for w in caught} == {"last.ckpt", "torn.ckpt"}
    good.unlink()
    with pytest.warns(UserWarning), pytest.raises(CheckpointNotFoundError, match="2 unreadable: last.ckpt, torn.ckpt"):
        newest_checkpoint(tmp_path)


def test_a_checkpoint_without_weights_is_not_resumable_and_the_error_names_the_field(tmp_path):
    from comlrl_lightning.checkpoints.metadata import resumable

    path = fake_checkpoint(tmp_path / "a.ckpt", epochs=1, step=2)
    state = torch.load(path, weights_only=True)
    assert resumable(state, path) is state
    del state["state_dict"]
    with pytest.raises(DataError, match="a.ckpt: checkpoint field state_dict is None, not a dict"):
        resumable(state, path)
