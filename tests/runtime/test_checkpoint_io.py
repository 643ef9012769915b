"""Checkpoints are streamed into their temporary file (no copy of their bytes held in memory); the plugin the entry points add."""

from __future__ import annotations

import tracemalloc

import torch

from comlrl_lightning.runtime.checkpoint_io import AtomicCheckpointIO


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

    from comlrl_lightning.runtime.checkpoint_io import atomic_checkpoint_plugins

    assert [type(p) for p in atomic_checkpoint_plugins()] == [AtomicCheckpointIO]
    precision = MixedPrecision("bf16-mixed", "cpu")
    assert [type(p) for p in atomic_checkpoint_plugins(precision)] == [MixedPrecision, AtomicCheckpointIO]
    own = TorchCheckpointIO()
    assert atomic_checkpoint_plugins([precision, own]) == [precision, own]  # the config's own is kept
