"""Run a CoMLRL-style script (tests/trainers/scripts/) here with only its import prefix changed, or
as it is against the reference (CoMLRL) in its own venv; either way its ``RESULT {json}`` line comes back."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "trainers" / "scripts"
PREFIX = re.compile(r"\bcomlrl\.")


def with_our_prefix(source: str) -> str:
    """The script with every ``comlrl.`` import (and name) written ``comlrl_lightning.``: the one change a user makes."""
    return PREFIX.sub("comlrl_lightning.", source)


def result_of(output: str) -> Dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the script printed no RESULT line:\n{output[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def run_here(name: str, folder: Path, monkeypatch, capsys, env: Dict[str, str]) -> Dict[str, Any]:
    """Run script ``name`` in this process, its imports changed by prefix only, in ``folder``."""
    from comlrl_lightning.defaults import embedded_model_path

    source = (SCRIPTS / name).read_text(encoding="utf-8")
    rewritten = folder / f"rewritten_{name}"
    rewritten.write_text(with_our_prefix(source), encoding="utf-8")
    monkeypatch.chdir(folder)
    for key, value in {"SCRIPT_MODEL": str(embedded_model_path()), **env}.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    runpy.run_path(str(rewritten), run_name="__main__")
    return result_of(capsys.readouterr().out)


def reference_python() -> Path:
    """The reference's venv interpreter (built on first use), or a skip saying why it cannot be."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import refenv

        return refenv.ensure()
    except Exception as error:  # no network, no wheel: the faithfulness checks cannot run here
        pytest.skip(f"the reference venv cannot be built here: {error}")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def run_reference(name: str, folder: Path, env: Dict[str, str]) -> Dict[str, Any]:
    """Run script ``name`` unchanged against the reference (CoMLRL) in its venv, in ``folder``."""
    from comlrl_lightning.defaults import embedded_model_path

    python = reference_python()
    environment = {
        **{key: value for key, value in os.environ.items() if key not in ("PYTHONPATH",)},
        "SCRIPT_MODEL": str(embedded_model_path()),
        "CUDA_VISIBLE_DEVICES": "",
        "WANDB_SILENT": "true",
        **env,
    }
    done = subprocess.run(
        [str(python), str(SCRIPTS / name)], cwd=folder, env=environment, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, f"the reference failed on {name}:\n{done.stderr[-4000:]}"
    return result_of(done.stdout)


__all__ = ["SCRIPTS", "reference_python", "result_of", "run_here", "run_reference", "with_our_prefix"]
