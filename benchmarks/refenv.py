"""The other sides' own venvs, git-ignored and created on first use: the reference's
(``benchmarks/.venv-reference``) and Hugging Face TRL's (``benchmarks/.venv-trl``).

torch is installed first and pinned (the local CPU wheel), so that resolving a package never pulls
a CUDA build; transformers is pinned to the version our side uses, so every side runs the same
model code. ``COMLRL_BENCH_TRL_VENV`` names an existing TRL venv to use instead of creating one.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Dict

REFERENCE = "comlrl==1.4.3"
TRL = "trl==1.16.0"
TORCH = "torch==2.13.0"
HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE / ".venv-reference"
TRL_DIR = HERE / ".venv-trl"
TRL_VENV_VARIABLE = "COMLRL_BENCH_TRL_VENV"

SIDES: Dict[str, Dict[str, str]] = {
    "reference": {"package": REFERENCE, "import": "comlrl.trainers.preference"},
    "trl": {"package": TRL, "import": "trl"},
}


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _ready(venv: Path, side: str = "reference") -> bool:
    name, pinned = SIDES[side]["package"].split("==")
    check = (
        f"from importlib.metadata import version as v; import {SIDES[side]['import']}; "
        f"assert v('{name}') == '{pinned}' and v('torch').startswith('2.13.0') "
        f"and v('transformers') == '{version('transformers')}'"
    )
    if not _python(venv).exists():
        return False
    return subprocess.run([str(_python(venv)), "-c", check], capture_output=True).returncode == 0


def ensure(venv: Path = DEFAULT_DIR, side: str = "reference") -> Path:
    """The interpreter of ``side``'s venv, installing it when missing or incomplete (one process at a
    time: parallel test workers wait for the first one's installation instead of mixing theirs in)."""
    if _ready(venv, side):
        return _python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install(venv, side)


def _install(venv: Path, side: str) -> Path:
    if _ready(venv, side):  # installed by the process that held the lock before
        return _python(venv)
    package = SIDES[side]["package"]
    print(f"preparing the {side} venv in {venv} ({TORCH}, then {package}) ...", flush=True)
    if not _python(venv).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(_python(venv)), "-m", "pip", "install", "--quiet"]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run(pip + [TORCH], check=True, env=env)
    subprocess.run(pip + [package, f"transformers=={version('transformers')}", TORCH], check=True, env=env)
    if not _ready(venv, side):
        raise RuntimeError(f"the {side} venv in {venv} is not usable after installation")
    return _python(venv)


def trl_venv() -> Path:
    """Where TRL's venv is: ``$COMLRL_BENCH_TRL_VENV`` when set, else ``benchmarks/.venv-trl``."""
    return Path(os.environ.get(TRL_VENV_VARIABLE) or TRL_DIR)


def trl_ready() -> bool:
    """Whether TRL's venv exists and holds the pinned TRL, torch and our transformers (installs nothing)."""
    return _ready(trl_venv(), "trl")
