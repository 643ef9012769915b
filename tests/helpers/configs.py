"""The shipped configs: bases per algorithm and the overlays that change one thing about a base.

An overlay (``configs/overlays/*.yaml``) names its base in its run line
(``--config configs/<base>.yaml --config configs/overlays/<overlay>.yaml``); :func:`composed` merges
the two as the CLI's parser does for the tests that read a config's YAML without parsing it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict

import yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
OVERLAYS = sorted((CONFIGS / "overlays").glob("*.yaml"))
RUN_LINE = re.compile(r"--config configs/(\w+)\.yaml --config configs/overlays/(\w+)\.yaml")


def base_of(overlay: Path) -> Path:
    """The base config ``overlay``'s run line names (its first ``--config``)."""
    found = RUN_LINE.search(overlay.read_text(encoding="utf-8"))
    assert found and found.group(2) == overlay.stem, f"{overlay}: no run line naming its base and itself"
    return CONFIGS / f"{found.group(1)}.yaml"


def merged(base: Any, overlay: Any) -> Any:
    """``overlay`` over ``base``: mappings merge key by key, a new ``class_path`` replaces the whole
    object (its ``init_args`` belong to the old class), anything else (lists, scalars, null) replaces."""
    if not (isinstance(base, dict) and isinstance(overlay, dict)):
        return overlay
    if "class_path" in overlay and overlay["class_path"] != base.get("class_path"):
        return overlay
    return {**base, **{key: merged(base.get(key), value) for key, value in overlay.items()}}


def composed(overlay: Path) -> Dict[str, Any]:
    """The YAML of ``overlay``'s base with ``overlay`` over it."""
    base = yaml.safe_load(base_of(overlay).read_text(encoding="utf-8"))
    return merged(base, yaml.safe_load(overlay.read_text(encoding="utf-8")))


def run_arguments(overlay: Path) -> list:
    """``--config`` arguments that run ``overlay`` on its base, relative to the repository."""
    return ["--config", f"configs/{base_of(overlay).name}", "--config", f"configs/overlays/{overlay.name}"]
