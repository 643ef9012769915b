"""benchmarks/checkpoint_space.py: what a checkpoint's round files cost on disk."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_checkpoint_assets_are_copies_once_then_hard_links_between_checkpoints(tmp_path, monkeypatch):
    """benchmarks/checkpoint_space.py on 3 rounds: every checkpoint carries its rounds' files; the first
    checkpoint that carries one copies it from the live file (a live file edited in place never
    changes a checkpoint), later ones hard-link that copy, so a later checkpoint adds on disk only its
    directory blocks and the files no earlier checkpoint had."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    space = importlib.import_module("checkpoint_space")
    results = space.measure(tmp_path, 3, [1, 3])
    first, last = results[1], results[3]
    assert (first["round_files"], last["round_files"]) == (1, 3) and last["snapshots"] >= 1
    assert last["apparent"] > first["apparent"] > 0  # what copies would cost grows with the rounds
    ckpt = tmp_path / "ckpt"
    assets = ckpt / "checkpoint-3" / "checkpoint.assets"
    live = tmp_path / "preference_replay" / "iteration_0001.json"
    early = ckpt / "checkpoint-1" / "checkpoint.assets" / "preference_replay" / live.name
    assert os.stat(assets / "preference_replay" / live.name).st_ino == os.stat(early).st_ino != os.stat(live).st_ino
    own = [path for path in assets.rglob("*") if path.is_file() and os.lstat(path).st_nlink == 1]
    assert (assets / "preference_replay" / "iteration_0003.json") in own  # the newest round: no earlier copy
    directories = sum(os.lstat(path).st_blocks * 512 for path in [assets, *assets.rglob("*")] if path.is_dir())
    assert last["added"] == directories + sum(os.lstat(path).st_blocks * 512 for path in own)
    assert "| 3 rounds |" in space.table(results, 3)
