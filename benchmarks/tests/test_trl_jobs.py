"""benchmarks/trl_jobs.py against ours.py: both sides see the same DPO batch (TRL in its own venv)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_ours_and_trl_see_identical_token_ids_and_equal_margins(bench, tmp_path):
    """Both sides' ``dpo_check`` on the tiny benchmark model: TRL tokenizes the pairs' text and
    collates them itself, ours takes the ids; the batch TRL computes on must hold exactly our ids,
    and the margins of the same weights must agree. TRL runs in its own venv (it pins other versions)."""
    refenv = importlib.import_module("refenv")
    if not refenv.trl_ready():
        pytest.skip(
            f"no TRL venv at {refenv.trl_venv()} (python benchmarks/run.py creates it, or set "
            f"{refenv.TRL_VENV_VARIABLE}): TRL runs in a venv of its own"
        )
    model = importlib.import_module("models").build(tmp_path, ["tiny"])["tiny"]["path"]
    job = {
        "job": "dpo_check",
        "model": model,
        "pair_pool": 16,
        "completion_lengths": [8, 32],
        "batch_size": 8,
        "agents": 1,
        "score_last_token": True,
    }
    env = dict(os.environ, PYTHONPATH=str(BENCHMARKS.parent), OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    views = {}
    for side, python, script in (
        ("ours", sys.executable, "ours.py"),
        ("trl", str(refenv.trl_venv() / "bin" / "python"), "trl_jobs.py"),
    ):
        done = subprocess.run(
            [python, str(BENCHMARKS / script), json.dumps(job)],
            cwd=BENCHMARKS,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        line = [x for x in done.stdout.splitlines() if x.startswith(bench.common.RESULT_PREFIX)][-1]
        views[side] = json.loads(line[len(bench.common.RESULT_PREFIX) :])
    assert bench.common.dpo_disagreements(views["ours"], views["trl"]) == []
    assert len(views["ours"]["pairs"]) == 8 and all(p["chosen_ids"][-1] == 0 for p in views["trl"]["pairs"])  # EOS
    assert views["ours"]["positions"] < views["trl"]["positions"]  # each prompt once, no padding
