"""Turn the collected measurements into the markdown table, the docs performance page's results and the summary lines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

START = "<!-- benchmarks/run.py writes the results below; edit benchmarks/report.py, not this text -->"
END = "<!-- end of the results written by benchmarks/run.py -->"
"""The markers of the generated results on the docs performance page (``docs/performance.md``)."""


def _f(value: Optional[float], digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def _ratio(ours: Optional[float], reference: Optional[float]) -> Optional[float]:
    return None if not ours or not reference else ours / reference


def _percent(value: Optional[float]) -> Optional[float]:
    return None if value is None else 100 * value


def _rss(result: Optional[Dict[str, Any]]) -> Optional[float]:
    return None if not result else result.get("peak_rss_mb")


def _load(machine: Dict[str, Any]) -> str:
    """The 1-minute load average at the start and the end of the run, when recorded: other processes
    on the machine slow both sides, so it says how much to trust small differences."""
    load = machine.get("load_average")
    if not load:
        return ""
    return f"; load average {load[0]:.1f} at the start and {load[-1]:.1f} at the end of the run (other processes)"


def summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    """The machine-readable ``name: value`` lines (speedups are ours / reference, higher is better)."""
    lines: List[Tuple[str, Optional[float]]] = []
    steps, largest = results["madpo_step"], max(results["plan"]["batch_sizes"])
    for model in results["plan"]["models"]:
        sides = steps[model][largest]
        lines.append(
            (
                f"madpo_step_speedup_{model}",
                _ratio(sides["ours"]["pairs_per_s"], (sides.get("reference") or {}).get("pairs_per_s")),
            )
        )
    for model in results["plan"]["models"]:
        sides = results["collection"][model]
        name = "collection_speedup" if model == "tiny" else f"collection_speedup_{model}"
        lines.append((name, _ratio(sides["ours"]["per_s"], (sides.get("reference") or {}).get("per_s"))))
    iterative = results["iterative"]
    reference_seconds = (iterative.get("reference") or {}).get("seconds")
    lines.append(("iterative_speedup", _ratio(reference_seconds, iterative["ours"]["seconds"])))
    for model in results["plan"]["models"]:
        lines.append((f"madpo_pairs_per_s_{model}_ours", steps[model][largest]["ours"]["pairs_per_s"]))
        lines.append(
            (f"madpo_pairs_per_s_{model}_reference", (steps[model][largest].get("reference") or {}).get("pairs_per_s"))
        )
    flops = results.get("flops") or {}
    lines.append(("matmul_peak_gflops", results["peak"]["flops_per_s"] / 1e9))
    lines.append(("train_flops_fraction_of_peak_ours", flops.get("ours")))
    lines.append(("train_flops_fraction_of_peak_reference", flops.get("reference")))
    for model, settings in (results.get("madpo_checkpointing") or {}).items():
        reference = steps[model][largest].get("reference") or {}
        for every, ours in settings.items():
            lines.append(
                (
                    f"madpo_step_speedup_{model}_checkpoint_every_{every}",
                    _ratio(ours["pairs_per_s"], reference.get("pairs_per_s")),
                )
            )
            lines.append(
                (
                    f"madpo_step_peak_rss_ours_over_reference_{model}_checkpoint_every_{every}",
                    _ratio(_rss(ours), _rss(reference)),
                )
            )
    for model, bound in (results.get("madpo_attention_free") or {}).items():
        reference = steps[model][largest].get("reference") or {}
        lines.append(
            (
                f"madpo_step_speedup_{model}_attention_free_bound",
                _ratio(bound["pairs_per_s"], reference.get("pairs_per_s")),
            )
        )
    lines.append(("peak_rss_ours_over_reference_max", _max_rss_ratio(_all_pairs(results))))
    # the same with collection's generation batch capped at 64 sequences
    lines.append(
        ("peak_rss_ours_over_reference_max_batch_64", _max_rss_ratio(_all_pairs(results, collection="ours_batch_64")))
    )
    # ... and the largest training batch with every 2nd layer checkpointed
    if results.get("madpo_checkpointing"):
        lines.append(
            (
                "peak_rss_ours_over_reference_max_batch_64_checkpoint_every_2",
                _max_rss_ratio(_all_pairs(results, collection="ours_batch_64", checkpoint_every=2)),
            )
        )
    return lines


def _max_rss_ratio(pairs: List[Dict[str, Any]]) -> Optional[float]:
    ratios = [_ratio(_rss(s.get("ours")), _rss(s.get("reference"))) for s in pairs]
    ratios = [r for r in ratios if r is not None]
    return max(ratios) if ratios else None


def _all_pairs(
    results: Dict[str, Any], collection: str = "ours", checkpoint_every: Optional[int] = None
) -> List[Dict[str, Any]]:
    """Every (ours, reference) measurement; ``collection`` picks which of our collection runs counts,
    ``checkpoint_every`` the checkpointed run that replaces ours at the largest training batch."""
    largest = max(results["plan"]["batch_sizes"])
    pairs = []
    for model, per_model in results["madpo_step"].items():
        for batch, sides in per_model.items():
            if checkpoint_every is not None and batch == largest:
                sides = dict(sides, ours=results["madpo_checkpointing"][model][checkpoint_every])
            pairs.append(sides)
    collected = [{"ours": s.get(collection), "reference": s.get("reference")} for s in results["collection"].values()]
    return pairs + collected + [results["iterative"]]


def markdown(results: Dict[str, Any]) -> str:
    """The results as markdown: the body of ``RESULTS.md`` and of the docs performance page's generated results."""
    plan, machine, versions = results["plan"], results["machine"], results["versions"]
    ours_v, ref_v = versions["ours"], versions.get("reference") or {}
    largest = max(plan["batch_sizes"])
    out = [
        f"Measured by `python benchmarks/run.py{' --quick' if results['quick'] else ''}` on {machine['date']} "
        f"(numbers below come from that run; {'smoke sizes' if results['quick'] else 'full sizes'}).",
        "",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gb']:.0f} GiB; Python {machine['python']}"
        + _load(machine)
        + ".",
        f"- Threads: torch threads {ours_v['threads']} (ours) / {ref_v.get('threads', '-')} (reference), "
        "`OMP_NUM_THREADS=MKL_NUM_THREADS=1`, CPU only.",
        f"- Ours: comlrl-lightning {machine['ours_version']}, torch {ours_v['torch']}, transformers {ours_v['transformers']}, "
        f"lightning {ours_v['lightning']}.",
        f"- Reference: comlrl {ref_v.get('comlrl', '-')} in its own venv, torch {ref_v.get('torch', '-')}, "
        f"transformers {ref_v.get('transformers', '-')}.",
        "- Models: randomly initialised Llamas saved once with `save_pretrained` and loaded by both sides "
        + ", ".join(f"({name}: {info['parameters'] / 1e6:.2f}M parameters)" for name, info in results["models"].items())
        + f"; 2 agents; a {results['vocab_size']}-token character tokenizer.",
        f"- MADPO pairs: identical token ids on both sides; prompts of the toy task (~21 tokens), completions of "
        f"{plan['completion_lengths'][0]}-{plan['completion_lengths'][1]} random tokens + EOS; AdamW lr 1e-4, beta 0.1. "
        "Reference: `MADPOTrainer._update_from_preference_batch`; ours: `collate_pairs` + `margins` + `madpo_loss` + "
        "backward + the module's AdamW step (what automatic optimization runs); best of 3 timed windows.",
        "",
        "| MADPO training | params | batch | reference pairs/s | ours pairs/s | speedup | ours in `Trainer.fit` pairs/s | peak RSS ref / ours (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model in plan["models"]:
        for batch in plan["batch_sizes"]:
            sides = results["madpo_step"][model][batch]
            ref, ours = sides.get("reference") or {}, sides["ours"]
            fit = (results["madpo_fit"].get(model) or {}).get(batch) or {}
            out.append(
                f"| {model} | {results['models'][model]['parameters'] / 1e6:.2f}M | {batch} | {_f(ref.get('pairs_per_s'))} | "
                f"{_f(ours['pairs_per_s'])} | {_f(_ratio(ours['pairs_per_s'], ref.get('pairs_per_s')), 2, 'x')} | "
                f"{_f(fit.get('pairs_per_s'))} | {_f(_rss(ref), 0)} / {_f(_rss(ours), 0)} |"
            )
    checkpointing = results.get("madpo_checkpointing") or {}
    if checkpointing:
        out += [
            "",
            f"The same step at batch {largest} with `gradient_checkpointing: true` (transformers' activation checkpointing, "
            "scoring still packed): `checkpoint_every_n_layers` n recomputes every n-th layer's activations in backward "
            "instead of keeping them. The last row of each model is a bound, not a model: the packed attention replaced "
            "by passing the values through, so it costs everything but attention (collation, layout, the other layers, "
            "loss, AdamW).",
            "",
            "| MADPO training, batch "
            + str(largest)
            + " | setting | ours pairs/s | speedup | peak RSS ref / ours (MB) |",
            "|---|---|---|---|---|",
        ]
        for model, settings in checkpointing.items():
            sides = results["madpo_step"][model][largest]
            ref = sides.get("reference") or {}
            rows = [("default (no checkpointing)", sides["ours"])] + [
                (f"`checkpoint_every_n_layers: {every}`", ours) for every, ours in settings.items()
            ]
            bound = (results.get("madpo_attention_free") or {}).get(model)
            if bound:
                rows.append(("bound: no attention", bound))
            for label, ours in rows:
                out.append(
                    f"| {model} | {label} | {_f(ours['pairs_per_s'])} | {_f(_ratio(ours['pairs_per_s'], ref.get('pairs_per_s')), 2, 'x')} | "
                    f"{_f(_rss(ref), 0)} / {_f(_rss(ours), 0)} |"
                )
    collection = plan["collection"]
    out += [
        "",
        f"Collection: {collection['items']} task items, K = {collection['candidates']} candidates per agent, "
        f"max_new_tokens {collection['max_new_tokens']}, temperature 1.0, top_p 1.0, top_k None (ours: off; the reference "
        "leaves it to `generate()`'s default of 50, a no-op on this vocabulary); sample, score every "
        "joint candidate with the task reward, select pairs (reward_gap, 16 per item); best of 3 passes. Reference: `_build_preference_dataset`; "
        "ours: `PreferenceDataModule.collect` with the default `HFGenerator(batch_size=None)` (automatic: here every "
        "item in one `generate()` per agent), and with it set to 64 sequences per call "
        f"({max(1, 64 // collection['candidates'])} items share a call). Both prefill each prompt once for its K samples.",
        "",
        "| Collection | reference joint candidates/s | ours joint candidates/s | speedup | ours, `HFGenerator(batch_size=64)` | peak RSS ref / ours (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for model in plan["models"]:
        sides = results["collection"][model]
        ref, ours, one = sides.get("reference") or {}, sides["ours"], sides["ours_batch_64"]
        out.append(
            f"| {model} | {_f(ref.get('per_s'))} | {_f(ours['per_s'])} | {_f(_ratio(ours['per_s'], ref.get('per_s')), 2, 'x')} | "
            f"{_f(one['per_s'])} ({_f(_ratio(one['per_s'], ref.get('per_s')), 2, 'x')}; peak RSS {_f(_rss(one), 0)} MB) | "
            f"{_f(_rss(ref), 0)} / {_f(_rss(ours), 0)} |"
        )
    iterative = plan["iterative"]
    ref, ours = results["iterative"].get("reference") or {}, results["iterative"]["ours"]
    out += [
        "",
        f"Iterative MADPO, end to end (trainer construction, model loading, {iterative['rounds']} rounds of collect -> "
        f"round file -> train, history comparator with k = 1): tiny model, {iterative['items']} items, K = K' = "
        f"{iterative['candidates']}, {iterative['pairs_per_sample']} pairs per item, batch {iterative['train_batch_size']}, "
        f"max_new_tokens {iterative['max_new_tokens']}, 1 epoch per round, no evaluation, no checkpoints. "
        "Reference: `MADPOIterTrainer.train()`; ours: `Trainer.fit` with `IterativePreferenceDataModule`.",
        "",
        "| Iterative MADPO (3 rounds) | reference s | ours s | speedup | peak RSS ref / ours (MB) |",
        "|---|---|---|---|---|",
        f"| wall time | {_f(ref.get('seconds'), 2)} | {_f(ours['seconds'], 2)} | "
        f"{_f(_ratio(ref.get('seconds'), ours['seconds']), 2, 'x')} | {_f(_rss(ref), 0)} / {_f(_rss(ours), 0)} |",
    ]
    peak, flops = results["peak"], results.get("flops") or {}
    counted = results.get("flops_counted") or {}
    out += [
        "",
        f"Compute efficiency: dense float32 `torch.mm` ({peak['size']}x{peak['size']}, 1 thread) peaks at "
        f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s. MADPO step on the {plan['flops_model']} model at batch {largest} "
        f"(FLOPs counted by `torch.utils.flop_counter`, matmuls): ours {_f(counted.get('ours'), 1)} GFLOP/step at "
        f"{_f(_percent(flops.get('ours')), 0, '%')} of peak; reference {_f(counted.get('reference'), 1)} GFLOP/step at "
        f"{_f(_percent(flops.get('reference')), 0, '%')} of peak"
        + (
            " (above 100%: the peak was measured while other processes' load slowed it, so these shares are not meaningful)."
            if max(flops.values(), default=0) > 1
            else "."
        ),
        "",
        "Speedups are ours / reference (higher is better); peak RSS is each measurement process's high-water mark. "
        "Collection's default automatic generation batch samples a shard's items at once, so its peak memory grows "
        "with the KV caches of all those sequences; the `HFGenerator(batch_size=64)` column shows the memory-capped "
        "setting. Training holds every agent's graph until the one backward of the joint loss (the reference holds "
        "one agent's at a time, at the cost of an extra no-grad forward of every agent); activation checkpointing "
        "trades that memory back for recomputation, as the second table shows.",
        "",
        "Where the time goes (`torch.profiler`, cProfile): the reference runs every sequence alone (batch 1), four "
        "forwards per pair and agent, so it is bound by per-call overhead on the tiny model and by small matmuls on the "
        "small one. Ours scores each agent's `[winners; losers]` in one forward with grad and one backward, packed "
        "(`packed_scoring.py`): every distinct prompt (winner and loser share it) and every completion token up to the "
        "last scored one runs once, in one sequence without padding, and only attention is gathered back per prompt "
        "and per completion. So it does fewer FLOPs at a higher share of the matmul peak. On the small model the "
        "matmuls take about two thirds of the step at 85-90% of the peak; attention (the CPU flash kernel, forward and "
        "backward) is about a tenth. On the tiny model (hidden size 64, 1.1 GFLOP per step) the matmuls take about a "
        "third of the step, attention's kernels (CPU flash, forward and backward, on 16-wide heads) about a sixth and "
        "its gathers about a tenth; the rest is the elementwise ops and autograd bookkeeping of the Hugging Face layers. "
        'The bound row ("no attention") is the step with attention made free: the tiny model\'s speedup cannot '
        "exceed it whatever the attention layout, so 10x needs that row well above 10x. SDPA's math kernel is slower "
        "than the flash one here, and `torch.compile` of the decoder layers (attention left eager) gained about 4% "
        "on the tiny model and 2% on the small one. Collection: ours samples a shard's items in as few "
        "`generate()` calls as the memory allows, prefills each prompt once for its K samples and, on the CPU, "
        "continues from a preallocated static cache (a growing one is reallocated at every token); what remains is "
        "`generate()`'s per-token decode loop. Attention over the KV cache is about a third of it on both models: on "
        "the small one the cache of a whole shard's sequences outgrows the CPU's caches and attention is bound by "
        "memory bandwidth (the reference's 16 sequences per call stay in cache, at a fraction of the matmul "
        "efficiency), on the tiny one the CPU flash kernel is slow on single queries of 16-wide heads. Matmuls take "
        "about half (small, at the matmul peak) and a fifth (tiny); Hugging Face's per-step bookkeeping the rest. The iterative run gains most from loading the history "
        "comparator once per round (the reference reloads it from disk for every item).",
    ]
    return "\n".join(out) + "\n"


def write_results(path: Path, body: str) -> None:
    path.write_text("# Benchmarks: comlrl-lightning vs the reference (comlrl 1.4.3)\n\n" + body, encoding="utf-8")


def update_page(page: Path, body: str) -> None:
    """Replace the results between the :data:`START` and :data:`END` markers of ``page`` (the docs
    performance page), or append the markers and the results to a page that has none.

    The page is re-read right before the write; everything outside the markers is left exactly as it is.
    """
    text = page.read_text(encoding="utf-8")
    block = f"{START}\n\n{body.rstrip()}\n\n{END}"
    existing = re.search(rf"^{re.escape(START)}\n.*?^{re.escape(END)}$", text, flags=re.S | re.M)
    if existing:
        text = text[: existing.start()] + block + text[existing.end() :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text, encoding="utf-8")
