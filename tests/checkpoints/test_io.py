"""Checkpoints are streamed into their temporary file (no copy of their bytes held in memory); the plugin the entry points add."""

from __future__ import annotations

import tracemalloc

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning import MADPOModule, PreferenceDataModule
from comlrl_lightning.checkpoints.io import AtomicCheckpointIO
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_trainer


def test_a_checkpoint_is_written_without_a_copy_of_its_bytes_in_memory(tmp_path):
    weights = torch.zeros(8 * 1024 * 1024)  # 32 MiB: a bytes buffer of the checkpoint would hold as much again
    checkpoint = {"state_dict": {"w": weights}, "epoch": 3}
    tracemalloc.start()
    try:
        AtomicCheckpointIO().save_checkpoint(checkpoint, tmp_path / "last.ckpt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"{peak / 2**20:.1f} MiB of Python memory while saving 32 MiB"
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["epoch"] == 3 and torch.equal(saved["state_dict"]["w"], weights)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left


def test_the_atomic_checkpoint_io_is_added_unless_a_checkpoint_io_is_given():
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
    from lightning.pytorch.plugins import MixedPrecision

    from comlrl_lightning.checkpoints.io import atomic_checkpoint_plugins

    assert [type(p) for p in atomic_checkpoint_plugins()] == [AtomicCheckpointIO]
    precision = MixedPrecision("bf16-mixed", "cpu")
    assert [type(p) for p in atomic_checkpoint_plugins(precision)] == [MixedPrecision, AtomicCheckpointIO]
    own = TorchCheckpointIO()
    assert atomic_checkpoint_plugins([precision, own]) == [precision, own]  # the config's own is kept


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
