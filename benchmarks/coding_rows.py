"""One iterative MADPO round of the cooperative coding task, ours against the reference (comlrl 1.4.3).

    python benchmarks/coding_rows.py              # 8 training problems, K = 4, 128 new tokens, 8 held out
    python benchmarks/coding_rows.py --quick      # 2 problems, K = 2, 16 new tokens, 2 held out (a smoke run)
    python benchmarks/run.py --only-coding-round  # the same (``--quick`` too)

Each side runs ``coding_round.py``'s job in its own process with its own interpreter (the
reference's venv: ``refenv.py``), ours first; ``CODING_ROUND.md`` and ``coding_round.json`` get the
phase table (where each side's time goes) and what each side did, and the checks that both did the
same work (the same prompts, tokens sampled and joint answers scored) are printed. The row
``real_coding_round_speedup`` is the reference's wall seconds over ours (target: 3x). With
``--sides ... vllm`` (a vLLM venv: ``vllm_rows.vllm_python``) our round also runs with
``VLLMGenerator`` in that venv: ``real_coding_round_speedup_vllm`` (target: 5x).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from coding_round import EVAL_COUNT, PHASES, TRAIN_COUNT  # noqa: E402

FULL = dict(items=8, candidates=4, max_new_tokens=128, eval_items=8)
QUICK = dict(items=2, candidates=2, max_new_tokens=16, eval_items=2)
TARGET = 3.0
ROW = "real_coding_round_speedup"
VLLM_TARGET = 5.0
SIDES = ("ours", "reference", "vllm")
TIMEOUT_S = 8 * 3600
"""Each side's process may run this long (a loaded machine's reference round at the full sizes is long)."""


def plan(items: int, candidates: int, max_new_tokens: int, eval_items: int, seed: int = 0) -> Dict[str, Any]:
    """The round's sizes, checked against the split (a ``ValueError`` names the option)."""
    if not 1 <= items <= TRAIN_COUNT:
        raise ValueError(f"items: 1 to {TRAIN_COUNT} training problems (got {items})")
    if not 1 <= eval_items <= EVAL_COUNT:
        raise ValueError(f"eval_items: 1 to {EVAL_COUNT} held-out problems (got {eval_items})")
    if candidates < 2:
        raise ValueError(f"candidates: at least 2 per agent (got {candidates})")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: at least 1 (got {max_new_tokens})")
    return dict(items=items, candidates=candidates, max_new_tokens=max_new_tokens, eval_items=eval_items, seed=seed)


def ratio(reference: Optional[float], ours: Optional[float]) -> Optional[float]:
    """Reference seconds over ours (``None`` when either is missing or ours is zero)."""
    return reference / ours if reference is not None and ours else None


def phase_rows(results: Dict[str, Any], side: str = "ours") -> List[tuple]:
    """``(phase, our seconds, reference seconds, speed-up)`` per phase, then ``total`` (``side``: ours
    with Hugging Face ``generate()``, or ``vllm``)."""
    ours, theirs = results.get(side), results.get("reference")
    rows = []
    for phase in PHASES + ("total",):
        mine = None if not ours else ours["seconds"] if phase == "total" else ours["phases"][phase]
        other = None if not theirs else theirs["seconds"] if phase == "total" else theirs["phases"][phase]
        rows.append((phase, mine, other, ratio(other, mine)))
    return rows


def training_per_pair(side: Optional[Dict[str, Any]]) -> Optional[float]:
    """Training seconds per pair (``None`` without pairs): the sides sample different tokens, so their
    rounds may build different numbers of pairs."""
    return side["phases"]["training"] / side["pairs"] if side and side["pairs"] else None


def summary(results: Dict[str, Any]) -> List[tuple]:
    """``name: value`` rows: the speed-up of the whole round, of each phase, and of training per pair."""
    rows = phase_rows(results)
    lines = [(ROW, rows[-1][3])]
    lines += [(f"{ROW}_{phase}", value) for phase, _, _, value in rows[:-1] if phase in PHASES[:5]]
    per_pair = [training_per_pair(results.get(side)) for side in ("ours", "reference")]
    lines.append((f"{ROW}_training_per_pair", ratio(per_pair[1], per_pair[0])))
    if results.get("vllm"):
        vllm = phase_rows(results, "vllm")
        lines.append((f"{ROW}_vllm", vllm[-1][3]))
        lines += [(f"{ROW}_vllm_{phase}", value) for phase, _, _, value in vllm[:-1] if phase == "sampling"]
    return lines


def _seconds(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def _speedup(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(results: Dict[str, Any]) -> str:
    """The phase table (with a column for ours with vLLM when that side ran) and what each side did
    (joint answers scored, tokens sampled, pairs, updates)."""
    p, vllm = results["plan"], bool(results.get("vllm"))
    lines = [
        "### One round of the coding task: SmolLM2-135M-Instruct",
        "",
        f"One iterative MADPO round, 2 full copies on both sides: {p['items']} HumanEval training problems, "
        f"K = {p['candidates']} per agent against the current policy, {p['max_new_tokens']} new tokens forced, "
        f"{p['eval_items']} held-out problems evaluated before and after, seed {p['seed']}. Wall seconds "
        f"(load average {results.get('load_average', ['?'])[0]})"
        + (
            f"; {' and '.join(results['kept'])} kept from an earlier run at these sizes."
            if results.get("kept")
            else "."
        ),
        "",
        "| phase | ours (s) | reference (comlrl 1.4.3) (s) | speed-up |" + (" ours with vLLM (s) | speed-up |" * vllm),
        "|---|---|---|---|" + "---|---|" * vllm,
    ]
    for (phase, mine, other, speedup), engine in zip(phase_rows(results), phase_rows(results, "vllm")):
        line = f"| {phase} | {_seconds(mine)} | {_seconds(other)} | {_speedup(speedup)} |"
        lines.append(line + (f" {_seconds(engine[1])} | {_speedup(engine[3])} |" if vllm else ""))
    lines += [
        "",
        "| side | tokens sampled (collection / evaluation) | joint answers scored (collection / evaluation) "
        "| pairs (round file) | updates | training s per pair | held-out reward before / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for side in ("ours", "reference", "vllm"):
        r = results.get(side)
        if r:
            tokens = f"{r['tokens']['collection']} / {r['tokens']['evaluation']}"
            scored = f"{r['scored']['collection']} / {r['scored']['evaluation']}"
            rewards = " / ".join("-" if v is None else f"{v:.3f}" for v in r["eval_reward"])
            lines.append(
                f"| {side} | {tokens} | {scored} | {r['pairs']} ({r['round_file_pairs']}) | {r['updates']} | {_seconds(training_per_pair(r))} | {rewards} |"
            )
    differing = results.get("checks")
    if differing is not None:
        lines += ["", "Both sides did the same work." if not differing else "Differs: " + "; ".join(differing) + "."]
    return "\n".join(lines) + "\n"


def checks(results: Dict[str, Any]) -> List[str]:
    """What differs between the work of the reference and each of our sides (empty: the same prompts,
    as many tokens sampled and joint answers scored in collection and evaluation)."""
    theirs = results.get("reference")
    if not theirs:
        return []
    names = {"ours": "ours", "vllm": "ours with vLLM", "reference": "the reference"}
    problems = [
        f"every joint answer of {names[key]}'s collection is empty"
        for key, side in results.items()
        if key in names and side
        if side["scored"]["collection"] and side.get("empty", {}).get("collection") == side["scored"]["collection"]
    ]
    for key in [key for key in ("ours", "vllm") if results.get(key)]:
        for field in ("tokens", "scored", "prompt_digest"):
            for context in ("collection", "evaluation"):
                mine, other = results[key][field].get(context), theirs[field].get(context)
                if mine != other:
                    problems.append(f"{field} ({context}): {names[key]} {mine}, reference {other}")
    return problems


def measure(
    run: Callable[[str, Dict[str, Any]], Dict[str, Any]],
    sizes: Dict[str, Any],
    model: str,
    humaneval: str,
    sides=("ours", "reference"),
    save: Optional[Callable[[Dict[str, Any]], None]] = None,
    earlier: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Each side's round through ``run(side, job)`` (``save`` after each); every side ``earlier``
    results of the same plan hold is kept, not run again."""
    job = dict(script="coding_round.py", job="coding_round", model=model, humaneval=humaneval, timeout_s=TIMEOUT_S)
    job.update(sizes)
    results: Dict[str, Any] = {"plan": sizes, "load_average": [round(os.getloadavg()[0], 1)]}
    if earlier and earlier.get("plan") == sizes:
        results.update({side: earlier[side] for side in SIDES if earlier.get(side)})
        results["kept"] = [side for side in SIDES if side in results]  # with the load average they ran at
        results["load_average"] = earlier.get("load_average", []) + results["load_average"]
    for side in [side for side in sides if side not in results]:
        results[side] = run(side, dict(job, side=side, **({"generator": "vllm"} if side == "vllm" else {})))
        results["load_average"].append(round(os.getloadavg()[0], 1))
        if save:
            save(results)
    results["checks"] = checks(results)
    return results


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes: " + str(QUICK))
    for name in FULL:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=f"default {FULL[name]}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["ours", "reference"],
        choices=list(SIDES),
        help="vllm: ours with VLLMGenerator in the vLLM venv ($COMLRL_BENCH_VLLM_VENV)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for both sides")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--reference-venv", type=Path, default=None)
    parser.add_argument(
        "--keep", action="store_true", help="keep the sides that --out's coding_round.json already holds at these sizes"
    )
    args = parser.parse_args(argv)
    chosen = dict(QUICK if args.quick else FULL)
    chosen.update({k: getattr(args, k) for k in FULL if getattr(args, k) is not None})
    sizes = plan(seed=args.seed, **chosen)
    return run_round(sizes, args.out, args.sides, args.reference_venv, args.device, args.keep)


def run_round(
    sizes: Dict[str, Any], out: Path, sides=("ours", "reference"), venv=None, device="cpu", keep: bool = False
) -> Dict[str, Any]:
    """Both sides at ``sizes``: ``coding_round.json`` after each side, ``CODING_ROUND.md`` at the end
    (``keep``: a side the existing ``coding_round.json`` holds at the same sizes is not run again)."""
    import real_rows
    import refenv
    from job_runner import Runner

    from comlrl_lightning.tasks.coding.humaneval import humaneval_file

    pythons = {"reference": refenv.ensure(venv or refenv.DEFAULT_DIR)} if "reference" in sides else {}
    if "vllm" in sides:
        import vllm_rows

        pythons["vllm"], source = vllm_rows.vllm_python()
        if pythons["vllm"] is None:
            raise SystemExit(f"--sides vllm: {source}")
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "coding_round.json"
    earlier = json.loads(saved.read_text(encoding="utf-8")) if keep and saved.exists() else None

    def save(results: Dict[str, Any]) -> None:
        saved.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")

    print(f"one coding round ({sizes}):", flush=True)
    sized = dict(sizes, device=device)
    model, problems = real_rows.model_folder(), str(humaneval_file())
    results = measure(Runner(False, pythons), sized, model, problems, sides, save, earlier)
    save(results)
    body = markdown(results)
    (out / "CODING_ROUND.md").write_text(body, encoding="utf-8")
    print("\n" + body)
    for problem in results["checks"]:
        print(f"differs: {problem}")
    for name, value in summary(results):
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")
    return results


if __name__ == "__main__":
    main()
