"""The reference's own venv (``benchmarks/.venv-reference``, git-ignored), created on first use.

torch is installed first and pinned (the local CPU wheel), so that resolving ``comlrl`` never pulls
a CUDA build; transformers is pinned to the version our side uses, so both run the same model code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

REFERENCE = "comlrl==1.4.3"
TORCH = "torch==2.13.0"
DEFAULT_DIR = Path(__file__).resolve().parent / ".venv-reference"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _ready(venv: Path) -> bool:
    check = (
        "from importlib.metadata import version as v; import comlrl.trainers.preference; "
        f"assert v('comlrl') == '1.4.3' and v('torch').startswith('2.13.0') and v('transformers') == '{version('transformers')}'"
    )
    if not _python(venv).exists():
        return False
    return subprocess.run([str(_python(venv)), "-c", check], capture_output=True).returncode == 0


def ensure(venv: Path = DEFAULT_DIR) -> Path:
    """The reference venv's interpreter, installing it when missing or incomplete."""
    if _ready(venv):
        return _python(venv)
    print(f"preparing the reference venv in {venv} ({TORCH}, then {REFERENCE}) ...", flush=True)
    if not _python(venv).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(_python(venv)), "-m", "pip", "install", "--quiet"]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run(pip + [TORCH], check=True, env=env)
    subprocess.run(pip + [REFERENCE, f"transformers=={version('transformers')}", TORCH], check=True, env=env)
    if not _ready(venv):
        raise RuntimeError(f"the reference venv in {venv} is not usable after installation")
    return _python(venv)
