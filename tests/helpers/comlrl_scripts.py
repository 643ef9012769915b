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


def reference_environment(env: Dict[str, str]) -> Dict[str, str]:
    """The environment a script runs with against the reference: this one without PYTHONPATH, plus ``env``."""
    from comlrl_lightning.defaults import embedded_model_path

    return {
        **{key: value for key, value in os.environ.items() if key not in ("PYTHONPATH",)},
        "SCRIPT_MODEL": str(embedded_model_path()),
        "CUDA_VISIBLE_DEVICES": "",
        "WANDB_SILENT": "true",
        **env,
    }


def reference_result(done: "subprocess.CompletedProcess[str]", name: str) -> Dict[str, Any]:
    """The RESULT of script ``name``'s run against the reference, which must have succeeded."""
    assert done.returncode == 0, f"the reference failed on {name}:\n{done.stderr[-4000:]}"
    return result_of(done.stdout)


def run_reference(name: str, folder: Path, env: Dict[str, str]) -> Dict[str, Any]:
    """Run script ``name`` unchanged against the reference (CoMLRL) in its venv, in ``folder``."""
    python = reference_python()
    done = subprocess.run(
        [str(python), str(SCRIPTS / name)],
        cwd=folder,
        env=reference_environment(env),
        capture_output=True,
        text=True,
        timeout=540,
    )
    return reference_result(done, name)


# One reference process imports torch and CoMLRL once (about 10 s of CPU each time), then runs each script in a
# child forked from it: each still runs as a process of its own, from the same imported state a fresh one has.
FORKING_RUNNER = """
import json, os, runpy, sys, traceback
import torch, comlrl.trainers.preference, comlrl.utils, comlrl.utils.reward_utils
for script, folder, env in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):
    sys.stdout.flush(); sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.chdir(folder)
        os.environ.update(json.loads(env))
        for stream, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), stream)
        sys.argv, sys.path[0] = [script], os.path.dirname(script)  # as `python script` has them
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(status)
    print("EXIT", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), folder, flush=True)
"""


def run_reference_each(envs: Dict[str, Dict[str, str]], folder: Path) -> Dict[str, "subprocess.CompletedProcess[str]"]:
    """Run each script named in ``envs`` unchanged against the reference (CoMLRL) in its venv, with its
    environment, in ``folder / name``: each in a process of its own, forked from one that imported the
    reference once. Each script's run as if by ``subprocess.run``: its exit status, stdout and stderr."""
    python = reference_python()
    arguments = []
    for name, env in envs.items():
        (folder / name).mkdir(parents=True)
        arguments += [str(SCRIPTS / name), str(folder / name), json.dumps(env)]
    runner = subprocess.run(
        [str(python), "-c", FORKING_RUNNER, *arguments],
        env=reference_environment({}),
        capture_output=True,
        text=True,
        timeout=540 * len(envs),
    )
    assert runner.returncode == 0, f"the reference's runner failed:\n{runner.stderr[-4000:]}"
    exits = {
        line.split(" ", 2)[2]: int(line.split(" ", 2)[1])
        for line in runner.stdout.splitlines()
        if line.startswith("EXIT ")
    }
    return {
        name: subprocess.CompletedProcess(
            [name],
            exits.get(str(folder / name), -1),  # -1: the runner never saw this script end
            (folder / name / "stdout").read_text(encoding="utf-8"),
            (folder / name / "stderr").read_text(encoding="utf-8"),
        )
        for name in envs
    }


__all__ = [
    "SCRIPTS",
    "reference_python",
    "result_of",
    "run_here",
    "run_reference",
    "reference_result",
    "run_reference_each",
    "with_our_prefix",
]
