"""A coding config over several seeds: one run per seed, then one table and one plot of what changed.

    python benchmarks/coding_study.py --config configs/coding_madpo_iter.yaml --out runs/study
        [--config more.yaml] [--seeds 3] [--first-seed 0] [--threads 1] [--parallel 2] [-- fit options]

Each seed ``s`` is one ``comlrl-lightning fit`` of the given configs with ``--seed_everything s``
in ``<out>/seed_<s>`` (the options after ``--`` are passed on), as its own process with its own thread
budget (``COMLRL_LIGHTNING_THREADS`` and ``OMP_NUM_THREADS`` set to ``--threads``), ``--parallel`` of
them at a time. A finished seed writes ``<out>/seed_<s>/study_run.json`` (its command, CPU time,
wall time and peak memory, measured by the kernel for that process and everything it waited for);
a later study with the same command reads it instead of running the seed again, and a seed that
was stopped is resumed from its newest checkpoint (``--ckpt_path``; the library's resume is exact),
its CPU time summed over its attempts (each attempt's is kept in ``study_attempts.jsonl``). A seed
folder of another command is refused by name: a study never mixes two configs.

The table (printed, and ``<out>/study.md``): a row per seed and a pooled row, for held-out pass@1,
mean reward, parse share and calls-``aux`` share, before (the first evaluation) and after (the last),
and the change. Within a seed the intervals are percentile bootstraps over problems (the change's
paired by problem); the pooled change's interval is a two-level bootstrap (seeds drawn with
replacement, then problems within each drawn seed), so it holds the spread between seeds as well as
between problems. Each run's CPU time and peak memory are listed beside. The plot
(``<out>/study.png``): one panel per metric, its value at each evaluation, every seed a line.
The outcomes are read with ``coding_evidence.py`` from each run's ``evaluation_programs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import coding_evidence
from coding_evidence import METRICS, RESAMPLES, bootstrap_interval, paired_difference_interval

from comlrl_lightning.runtime.files import write_atomically

Outcomes = Dict[int, Dict[str, Dict[str, float]]]
"""One run's evaluations: ``{step: {task_id: {metric: value}}}`` (``coding_evidence.evaluations``)."""
RUN_RECORD = "study_run.json"
ATTEMPTS = "study_attempts.jsonl"
THREAD_VARIABLES = ("COMLRL_LIGHTNING_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class SeedRun:
    """What one seed's run cost: the kernel's accounting of its process (and the processes it waited for)."""

    seed: int
    command: List[str]
    cpu_s: float
    wall_s: float
    peak_rss_mb: float
    attempts: int


def fit_command(configs: Sequence[str], seed: int, folder: Path, extra: Sequence[str]) -> List[str]:
    """The ``comlrl-lightning fit`` options of one seed's run (without the interpreter, so a record
    compares across virtual environments): the configs in order, the seed, the run folder, no
    progress bar (the study's log is a file), then the user's own options."""
    command = ["fit"]
    for config in configs:
        command += ["--config", str(config)]
    command += [
        "--seed_everything",
        str(seed),
        "--trainer.default_root_dir",
        str(folder),
        "--trainer.enable_progress_bar",
        "false",
    ]
    return command + list(extra)


def newest_checkpoint(folder: Path) -> Optional[Path]:
    """The last checkpoint a stopped run of ``folder`` left (``last.ckpt`` of its newest log version)."""
    found = sorted(
        folder.glob("lightning_logs/version_*/checkpoints/last.ckpt"),
        key=lambda path: coding_evidence.version_order(path.parent.parent),
    )
    return found[-1] if found else None


def earlier_attempts(folder: Path, command: Sequence[str]) -> List[Dict]:
    """The attempts recorded for this seed; one of another command is refused by name."""
    path = folder / ATTEMPTS
    if not path.exists():
        return []
    attempts = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for attempt in attempts:
        if attempt["command"] != list(command):
            raise SystemExit(
                f"{folder}: holds a run of another command ({' '.join(attempt['command'])}); "
                "give the study its own --out folder."
            )
    return attempts


def run_seed(configs: Sequence[str], seed: int, out: Path, threads: int, extra: Sequence[str]) -> SeedRun:
    """One seed's run: read when finished before, else run (or resume) it in its own process."""
    folder = out / f"seed_{seed}"
    command = fit_command(configs, seed, folder, extra)
    record = folder / RUN_RECORD
    if record.exists():
        done = json.loads(record.read_text(encoding="utf-8"))
        if done["command"] != command:
            raise SystemExit(f"{record}: a run of another command; give the study its own --out folder.")
        return SeedRun(**done)
    folder.mkdir(parents=True, exist_ok=True)
    attempts = earlier_attempts(folder, command)
    checkpoint = newest_checkpoint(folder)
    resume = ["--ckpt_path", str(checkpoint)] if checkpoint is not None else []
    env = dict(os.environ, **{name: str(threads) for name in THREAD_VARIABLES})
    start = time.monotonic()
    with open(folder / "study.log", "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "comlrl_lightning", *command, *resume], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4 (for its rusage), not by Popen
    attempt = {
        "command": command,
        "resumed_from": str(checkpoint) if checkpoint else None,
        "returncode": child.returncode,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": time.monotonic() - start,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # kilobytes on Linux
    }
    with open(folder / ATTEMPTS, "a", encoding="utf-8") as attempts_file:
        attempts_file.write(json.dumps(attempt) + "\n")
    if child.returncode != 0:
        raise SystemExit(f"seed {seed}: the run failed (exit {child.returncode}); its output: {folder / 'study.log'}")
    attempts.append(attempt)
    finished = SeedRun(
        seed=seed,
        command=command,
        cpu_s=sum(a["cpu_s"] for a in attempts),
        wall_s=sum(a["wall_s"] for a in attempts),
        peak_rss_mb=max(a["peak_rss_mb"] for a in attempts),
        attempts=len(attempts),
    )
    write_atomically(record, (json.dumps(asdict(finished), indent=2) + "\n").encode())
    return finished


def hierarchical_difference_interval(
    pairs_per_seed: Sequence[Sequence[Tuple[float, float]]],
    resamples: int = RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> Tuple[float, float, float]:
    """Mean of ``after - before`` over every seed's problems, with a two-level bootstrap interval.

    Each resample draws the seeds with replacement, then within each drawn seed its problems with
    replacement, and takes the mean difference of all drawn problems; the interval is the
    ``(1 -+ level) / 2`` quantiles (nearest rank). With one seed it is the paired bootstrap over problems.
    """
    differences = [[after - before for before, after in seed_pairs] for seed_pairs in pairs_per_seed]
    if not differences or not all(differences):
        raise ValueError("every seed needs at least one problem evaluated before and after")
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        drawn: List[float] = []
        for _ in differences:
            chosen = differences[rng.randrange(len(differences))]
            drawn += [chosen[rng.randrange(len(chosen))] for _ in chosen]
        stats.append(sum(drawn) / len(drawn))
    stats.sort()
    pooled = [d for seed_differences in differences for d in seed_differences]
    low = stats[int((1 - level) / 2 * (resamples - 1))]
    high = stats[int(round((1 + level) / 2 * (resamples - 1)))]
    return sum(pooled) / len(pooled), low, high


def paired_outcomes(run: Outcomes, metric: str) -> List[Tuple[float, float]]:
    """``(before, after)`` of ``metric`` per problem evaluated at both the first and the last evaluation."""
    first, last = min(run), max(run)
    if first == last:
        raise SystemExit(f"one evaluation only (step {first}): no change to compare; evaluate after training too.")
    return [(run[first][task][metric], run[last][task][metric]) for task in sorted(set(run[first]) & set(run[last]))]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def seed_row(run: Outcomes, metric: str) -> Dict[str, Tuple[float, ...]]:
    """One seed's ``before``, ``after`` (each with its interval over problems) and ``change`` (paired)."""
    pairs = paired_outcomes(run, metric)
    before, after = [b for b, _ in pairs], [a for _, a in pairs]
    return {
        "before": (_mean(before), *bootstrap_interval(before)),
        "after": (_mean(after), *bootstrap_interval(after)),
        "change": paired_difference_interval(before, after),
    }


def pooled_row(runs: Sequence[Outcomes], metric: str) -> Dict[str, Tuple[float, ...]]:
    """Every seed's problems together: before and after (intervals over all problems), and the change
    with the two-level interval of :func:`hierarchical_difference_interval`."""
    per_seed = [paired_outcomes(run, metric) for run in runs]
    before = [b for pairs in per_seed for b, _ in pairs]
    after = [a for pairs in per_seed for _, a in pairs]
    return {
        "before": (_mean(before), *bootstrap_interval(before)),
        "after": (_mean(after), *bootstrap_interval(after)),
        "change": hierarchical_difference_interval(per_seed),
    }


def _cell(value: Tuple[float, ...], signed: bool = False) -> str:
    mean, low, high = value
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]" if signed else f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def table(seeds: Sequence[SeedRun], runs: Sequence[Outcomes]) -> str:
    """The study's table: per metric, a row per seed and the pooled row; then each run's cost."""
    lines = []
    for metric in METRICS:
        lines += [f"**{metric}**", "", "| seed | before | after | change (after - before) |", "|---|---|---|---|"]
        for seed_run, run in zip(seeds, runs):
            row = seed_row(run, metric)
            lines.append(
                f"| {seed_run.seed} | {_cell(row['before'])} | {_cell(row['after'])} | {_cell(row['change'], True)} |"
            )
        row = pooled_row(runs, metric)
        lines += [
            f"| pooled ({len(runs)} seeds) | {_cell(row['before'])} | {_cell(row['after'])} "
            f"| {_cell(row['change'], True)} |",
            "",
        ]
    lines += ["| seed | CPU time (s) | wall time (s) | peak memory (MB) | attempts |", "|---|---|---|---|---|"]
    for seed_run in seeds:
        lines.append(
            f"| {seed_run.seed} | {seed_run.cpu_s:.0f} | {seed_run.wall_s:.0f} | {seed_run.peak_rss_mb:.0f} "
            f"| {seed_run.attempts} |"
        )
    return "\n".join(lines) + "\n"


def plot(seeds: Sequence[SeedRun], runs: Sequence[Outcomes], path: Path) -> None:
    """One panel per metric: its value (mean over problems) at each evaluation step, every seed a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(METRICS), figsize=(13, 3.2))
    for axis, metric in zip(axes, METRICS):
        for seed_run, run in zip(seeds, runs):
            steps = sorted(run)
            axis.plot(
                steps,
                [_mean([o[metric] for o in run[s].values()]) for s in steps],
                marker="o",
                label=f"seed {seed_run.seed}",
            )
        axis.set_title(metric)
        axis.set_xlabel("optimizer step")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("Held-out problems at each evaluation (mean over problems), one line per seed", fontsize=10)
    figure.tight_layout()
    write_atomically(path, lambda file: figure.savefig(file, format="png", dpi=110))
    plt.close(figure)


def study_items() -> Mapping[str, Mapping]:
    """The HumanEval problems by task id (the parse and calls-``aux`` outcomes are recomputed from them)."""
    from comlrl_lightning.tasks.coding.humaneval import load_humaneval

    return {item["task_id"]: item for item in load_humaneval()}


def parse_arguments(argv: Optional[Sequence[str]]) -> Tuple[argparse.Namespace, List[str]]:
    """The study's own options, and the ``fit`` options after ``--``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", action="append", required=True, help="a config file (repeat: base, then overlays)")
    parser.add_argument("--out", type=Path, required=True, help="the study's folder: one seed_<s> folder per seed")
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds (default 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed; the others follow it")
    parser.add_argument("--threads", type=int, default=1, help="threads per run (default 1)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time (default 1)")
    args = parser.parse_args(own)
    for name in ("seeds", "threads", "parallel"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    for config in args.config:
        if not Path(config).is_file():
            parser.error(f"--config {config}: no such file")
    return args, extra


def main(argv: Optional[Sequence[str]] = None) -> None:
    args, extra = parse_arguments(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=args.parallel)
    try:
        futures = [pool.submit(run_seed, args.config, s, args.out, args.threads, extra) for s in seeds]
        finished = [future.result() for future in futures]
    finally:  # a failed seed stops the study: the seeds not started yet are not run
        pool.shutdown(cancel_futures=True)
    folders = [args.out / f"seed_{s}" for s in seeds]
    items = study_items()
    runs = [coding_evidence.evaluations(folder, items) for folder in folders]
    text = table(finished, runs)
    print(text)
    write_atomically(args.out / "study.md", text.encode())
    plot(finished, runs, args.out / "study.png")
    print(f"table: {args.out / 'study.md'}; plot: {args.out / 'study.png'}")


if __name__ == "__main__":
    main()
