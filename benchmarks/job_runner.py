"""One benchmark job on one side, in this process or in its side's interpreter: what
``run.py`` and ``coding_rows.py`` both call (its own module, so neither imports the other)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import common

HERE = Path(__file__).resolve().parent


class Runner:
    """Runs one job on one side and returns its result dict."""

    SCRIPTS = {"ours": "ours.py", "reference": "reference.py", "trl": "trl_jobs.py", "vllm": "ours.py"}
    """The worker script of each side (``vllm``: ours, with the vLLM venv's interpreter)."""

    def __init__(self, in_process: bool, pythons: Optional[Dict[str, Path]] = None) -> None:
        self.in_process = in_process
        # side -> interpreter, absolute: the jobs run in this folder, not in the caller's working directory
        self.pythons = {side: Path(path).absolute() for side, path in dict(pythons or {}, ours=sys.executable).items()}
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env.update({name: str(common.THREADS) for name in common.THREAD_VARIABLES})
        self.env["TOKENIZERS_PARALLELISM"] = "false"
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), self.env.get("PYTHONPATH")]))

    def __call__(self, side: str, job: Dict[str, Any]) -> Dict[str, Any]:
        label = f"{side:9s} {job['job']:11s} " + " ".join(
            f"{k}={v}"
            for k, v in job.items()
            if k
            in (
                "model_name",
                "batch_size",
                "checkpoint_every_n_layers",
                "attention_free",
                "agents",
                "generator",
                "one_pass",
                "team",
                "hold_agent_graphs",
            )
        )
        print(f"  {label} ...", end="", flush=True)
        if side == "ours" and self.in_process:
            import ours

            result = dict(ours.run_job(job), peak_rss_mb=None)
        else:
            done = subprocess.run(
                [str(self.pythons[side]), str(HERE / job.get("script", self.SCRIPTS[side])), json.dumps(job)],
                env=self.env,
                cwd=HERE,
                capture_output=True,
                text=True,
                timeout=job.get("timeout_s", 1800),
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith(common.RESULT_PREFIX)]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"{side} {job} failed ({done.returncode}):\n{done.stderr[-4000:]}")
            result = json.loads(lines[-1][len(common.RESULT_PREFIX) :])
        shown = {k: round(v, 2) for k, v in result.items() if isinstance(v, float) and k != "peak_rss_mb"}
        print(f" {shown} rss={result.get('peak_rss_mb') and round(result['peak_rss_mb'])}MB", flush=True)
        return result
