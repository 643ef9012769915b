"""Collection with the vLLM generator against our Hugging Face path (run.py's vLLM rows).

Run when vLLM is importable: by this interpreter (run.py started in the vLLM venv), or by the venv
``$COMLRL_BENCH_VLLM_VENV`` names (one made as ``.ci/vllm`` makes it). Both paths then run with that
venv's interpreter, each in its own process, on the same model folders: one round's
``PreferenceDataModule.collect`` (2 agents, K candidates per item, scoring and pairing included),
with ``HFGenerator`` and with ``VLLMGenerator``. vLLM's CPU attention runs head sizes of 32 and up,
so the tiny benchmark model (16-wide heads) is left out; ``medium`` is the largest model whose
collections fit the benchmark's few minutes.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import common
from report import _f, _ratio, _rss

VENV_VARIABLE = "COMLRL_BENCH_VLLM_VENV"
FULL = dict(models=["small", "medium"], collection=common.FULL["collection"])
QUICK = dict(models=["small"], collection=common.QUICK["collection"])


def vllm_python() -> Tuple[Optional[Path], str]:
    """``(interpreter that imports vLLM, where it came from)``, or ``(None, why not)``."""
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable), "this interpreter"
    venv = os.environ.get(VENV_VARIABLE)
    if not venv:
        return None, f"vLLM is not importable here and ${VENV_VARIABLE} is not set"
    python = Path(venv) / "bin" / "python"
    check = subprocess.run([str(python), "-c", "import vllm"], capture_output=True)
    if check.returncode != 0:
        return None, f"{python} cannot import vLLM"
    return python, f"${VENV_VARIABLE} ({venv})"


def measure(
    run: Callable[[str, Dict[str, Any]], Dict[str, Any]], models: Dict[str, Dict], quick: bool
) -> Dict[str, Any]:
    """One collection per model with each generator, both with the vLLM venv's interpreter (side ``vllm``)."""
    plan = QUICK if quick else FULL
    results: Dict[str, Any] = {"plan": plan, "versions": run("vllm", {"job": "versions"}), "collection": {}}
    for name in plan["models"]:
        job = dict(model=models[name]["path"], model_name=name, job="collection", **plan["collection"])
        results["collection"][name] = {
            generator: run("vllm", dict(job, generator=generator)) for generator in ("hf", "vllm")
        }
    return results


def _speedup(results: Dict[str, Any], model: str) -> Optional[float]:
    sides = results["collection"][model]
    return _ratio(sides["vllm"]["per_s"], sides["hf"]["per_s"])


def summary(results: Optional[Dict[str, Any]]) -> List[Tuple[str, Optional[float]]]:
    """``vllm_collection_speedup`` (the largest model measured) and one line per model: vLLM / Hugging Face."""
    if not results or "collection" not in results:
        return [("vllm_collection_speedup", None)]
    models = results["plan"]["models"]
    lines = [("vllm_collection_speedup", _speedup(results, models[-1]))]
    return lines + [(f"vllm_collection_speedup_{model}", _speedup(results, model)) for model in models]


def markdown(results: Optional[Dict[str, Any]], parameters: Dict[str, Dict]) -> str:
    out = ["### Sampling with vLLM", ""]
    if not results or "collection" not in results:
        reason = (results or {}).get("skipped", "not measured")
        return "\n".join(out + [f"Not measured in this run: {reason}."]) + "\n"
    plan, versions = results["plan"], results["versions"]
    collection = plan["collection"]
    out += [
        f"`VLLMGenerator` against `HFGenerator` (the default), both in the vLLM venv (torch {versions['torch']}, "
        f"transformers {versions['transformers']}), each in its own process, 1 thread: one round's collection as in "
        f"the collection rows ({collection['items']} items x K = {collection['candidates']} x "
        f"{collection['max_new_tokens']} tokens, 2 agents, scoring and pairing included), best of 3 passes; before "
        "every vLLM pass the weights are marked updated, so both agents' weights are pushed into the engine as after "
        "a training step. The engine's start (once per process) is the warm-up, shown apart.",
        "",
        "| vLLM collection | params | Hugging Face joint candidates/s | vLLM joint candidates/s | speedup | vLLM engine start (s) | peak RSS HF / vLLM (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in plan["models"]:
        hf, vllm = results["collection"][model]["hf"], results["collection"][model]["vllm"]
        out.append(
            f"| {model} | {parameters[model]['parameters'] / 1e6:.2f}M | {_f(hf['per_s'])} | {_f(vllm['per_s'])} | "
            f"{_f(_speedup(results, model), 2, 'x')} | {_f(vllm['warmup_s'], 1)} | {_f(_rss(hf), 0)} / {_f(_rss(vllm), 0)} |"
        )
    return "\n".join(out) + "\n"
