"""The real-model rows on one GPU: SmolLM2-135M's architecture with random weights, bf16, ours against the reference.

    python3 gpu_real.py --model-dir DIR --out OUT            # on a CUDA machine (a few minutes)
    python gpu_real.py --model-dir DIR --out OUT --tiny      # a 2-layer model on the CPU (checks the script)

``DIR`` holds SmolLM2-135M-Instruct's ``config.json`` and tokenizer files (no weights): the model is
built from the config with random weights (seed 0), saved in bf16, and loaded by both sides from that
folder. Speed does not depend on the weights' values here: every completion is forced to the full
token budget (``min_new_tokens``) and the step's pairs are fixed token ids. In one process, one row
after another (the same jobs as ``real_jobs.py``, on ``cuda``, wall seconds after
``torch.cuda.synchronize``): the MADPO step (2 full copies, ours also with ``hold_agent_graphs``
and as a LoRA team of 2 in one pass and per agent; the reference: full copies), and collection with
Hugging Face ``generate()`` (the same chat prompts, candidates and budget); the peak GPU memory of
each row. The reference (comlrl 1.4.3) runs where it imports (its ``wandb`` import is given an empty
module when wandb is missing: it logs nothing here). Writes ``gpu_real.json`` and ``gpu_real.log``
into ``OUT`` and prints ``name: value`` rows.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import real_jobs  # noqa: E402  (limits CPU threads to one, as on the CPU rows)
import torch  # noqa: E402

GPU = dict(
    step=dict(pairs=32, batch_size=8, completion_tokens=128, timing=(2, 3, 2.0)),
    collection=dict(items=16, candidates=8, max_new_tokens=128),
    repeats={"ours": 2, "reference": 1},
)
TINY = dict(
    step=dict(pairs=4, batch_size=2, completion_tokens=8, timing=(1, 1, 0.0)),
    collection=dict(items=2, candidates=2, max_new_tokens=4),
    repeats={"ours": 1, "reference": 1},
)
TINY_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def build_model(model_dir: Path, out: Path, tiny: bool, dtype: torch.dtype) -> Dict[str, Any]:
    """The model of ``model_dir``'s config with random weights (seed 0), saved in ``dtype`` with its tokenizer."""
    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    if tiny:
        for key, value in TINY_CONFIG.items():
            setattr(config, key, value)
    config.dtype = dtype
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES + ("generation_config.json",):
        if (model_dir / name).exists() and not (out / name).exists():
            shutil.copy(model_dir / name, out / name)
    return {"parameters": sum(p.numel() for p in model.parameters()), "layers": config.num_hidden_layers}


def stub_wandb() -> Optional[str]:
    """An empty ``wandb`` module when wandb is not installed (the reference imports it at the top of
    its trainers and logs nothing without a wandb config)."""
    try:
        import wandb  # noqa: F401

        return None
    except ImportError:
        import importlib.machinery

        module = types.ModuleType("wandb")
        module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # find_spec() answers, as for a module
        sys.modules["wandb"] = module
        return "wandb missing: the reference imported an empty module in its place"


def run_row(
    name: str, function: Callable[[Dict[str, Any]], Dict[str, Any]], job: Dict[str, Any], log
) -> Dict[str, Any]:
    """One row: its result with the peak GPU memory (GiB) and its seconds, or the error it raised."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        result = function(job)
    except Exception as error:  # a failed row is recorded, the others still run
        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    result["row_s"] = time.perf_counter() - started
    if torch.cuda.is_available():
        result["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in result.items() if k != "traceback"}
    print(f"{name}: {json.dumps(shown)}", file=log, flush=True)
    return result


def rows(plan: Dict[str, Any], base: Dict[str, Any], sides: List[str]) -> List[tuple]:
    """(name, function, job) of every row, ours first."""
    step = dict(base, job="real_step", profile=False, **plan["step"])
    collect = dict(base, job="real_collection", profile=False, **plan["collection"])
    planned = [
        ("ours_step_full", real_jobs.ours_step, dict(step, team="full")),
        ("ours_step_full_hold_agent_graphs", real_jobs.ours_step, dict(step, team="full", hold_agent_graphs=True)),
        ("ours_step_lora_one_pass", real_jobs.ours_step, dict(step, team="lora", one_pass=True)),
        ("ours_step_lora_per_agent", real_jobs.ours_step, dict(step, team="lora", one_pass=False)),
        (
            "ours_collection_full",
            real_jobs.ours_collection,
            dict(collect, team="full", repeats=plan["repeats"]["ours"]),
        ),
        (
            "ours_collection_lora_one_pass",
            real_jobs.ours_collection,
            dict(collect, team="lora", one_pass=True, repeats=plan["repeats"]["ours"]),
        ),
    ]
    if "reference" in sides:
        planned += [
            ("reference_step_full", real_jobs.reference_step, dict(step, team="full")),
            (
                "reference_collection_full",
                real_jobs.reference_collection,
                dict(collect, team="full", repeats=plan["repeats"]["reference"]),
            ),
        ]
    return [row for row in planned if row[0].split("_")[0] in sides]


def summary(results: Dict[str, Dict[str, Any]]) -> List[tuple]:
    """``name: value`` rows: speed-ups over the reference, LoRA one pass over per agent, peak GPU memory."""

    def ratio(ours: str, theirs: str, key: str) -> Optional[float]:
        a, b = results.get(ours, {}), results.get(theirs, {})
        return a[key] / b[key] if key in a and key in b else None

    lines = [
        ("gpu_real_madpo_step_speedup", ratio("ours_step_full", "reference_step_full", "pairs_per_s")),
        (
            "gpu_real_madpo_step_speedup_hold_agent_graphs",
            ratio("ours_step_full_hold_agent_graphs", "reference_step_full", "pairs_per_s"),
        ),
        ("gpu_real_madpo_step_speedup_lora", ratio("ours_step_lora_one_pass", "reference_step_full", "pairs_per_s")),
        ("gpu_real_collection_speedup", ratio("ours_collection_full", "reference_collection_full", "per_s")),
        (
            "gpu_real_lora_team_step_speedup_2",
            ratio("ours_step_lora_one_pass", "ours_step_lora_per_agent", "pairs_per_s"),
        ),
    ]
    for name, result in results.items():
        for key in ("pairs_per_s", "per_s", "peak_gpu_gib"):
            if key in result:
                lines.append((f"gpu_{name}_{key}", result[key]))
    return lines


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="config.json and tokenizer files of the model")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_real_out")))
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model of the same vocabulary on the CPU")
    parser.add_argument("--sides", nargs="+", default=["ours", "reference"], choices=["ours", "reference"])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.tiny else "cuda"
    dtype = torch.float32 if args.tiny else torch.bfloat16
    plan = TINY if args.tiny else GPU
    started = time.perf_counter()
    report: Dict[str, Any] = {"plan": plan, "device": device, "dtype": str(dtype), "weights": "random (seed 0)"}
    with open(args.out / "gpu_real.log", "w") as log, tempfile.TemporaryDirectory(prefix="gpu-real-") as folder:
        import transformers

        report["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        if torch.cuda.is_available():
            report["gpu"] = torch.cuda.get_device_name(0)
        report["model"] = build_model(args.model_dir, Path(folder), args.tiny, dtype)
        print(f"model: {json.dumps(report['model'])} (random weights, {dtype}, {device})", file=log, flush=True)
        base = {"model": folder, "device": device, "dtype": "bfloat16" if dtype == torch.bfloat16 else "float32"}
        report["rows"] = {}
        for name, function, job in rows(plan, base, args.sides):
            if name.startswith("reference") and "wandb" not in report:  # after ours: our imports see no wandb
                report["wandb"] = stub_wandb()
            report["rows"][name] = run_row(name, function, job, log)
        report["seconds"] = time.perf_counter() - started
        lines = summary(report["rows"])
        for name, value in lines:
            print(f"{name}: {'n/a' if value is None else round(value, 4)}", file=log, flush=True)
    (args.out / "gpu_real.json").write_text(json.dumps(report, indent=1, default=str))
    print((args.out / "gpu_real.log").read_text())
    return report


if __name__ == "__main__":
    main()
