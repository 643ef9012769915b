"""The seed's example at its own size: the iterative MADPO config of the seed's documentation, as
written but for the import, trained on the embedded team with every other field at its default
(6 rounds of 128 updates, 256 new tokens per completion).

    python benchmarks/seed_example.py             # writes benchmarks/SEED_EXAMPLE.md
    python benchmarks/seed_example.py --out /tmp  # elsewhere

The suite runs the same text at small sizes (``tests/trainers/test_preference.py``,
``test_the_seeds_example_runs_unchanged_but_for_the_import``); this run is the full size, about 10
CPU minutes, too long for every change. It runs in a temporary working folder (the reference's
layout writes ``preference_replay/`` there) and records the wall and CPU seconds, the updates and
rounds trained, the round files written, the evaluation reward after training and the load average
before and after. Prints ``name: value`` lines last.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
ROUNDS = 6
"""The iterative defaults' ``num_iterations``: the rounds the example trains."""
SAMPLE_SIZE = 256
"""The example's ``preference_replay_sample_size``: pairs drawn per round, two per update."""


def run_example() -> Dict[str, Any]:
    """The seed's example, as written but for the import, in the current working folder."""
    from comlrl_lightning.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    args = MADPOIterConfig(
        num_agents=2,
        preference_replay_mode="lambda_decay",
        preference_replay_lambda=0.8,
        preference_replay_sample_size=256,
    )
    trainer = MADPOIterTrainer(agent_model="embedded", args=args)
    trainer.train()
    metrics = trainer.evaluate()
    return dict(
        updates=trainer.trainer.global_step,
        rounds=trainer.trainer.current_epoch,
        round_files=sorted(path.name for path in Path("preference_replay").glob("iteration_*.json")),
        reward=metrics.get("eval/turn_1/reward_mean"),
    )


def measure() -> Dict[str, Any]:
    """:func:`run_example` in a temporary working folder, with its wall and CPU seconds (this
    process's) and the 1-minute load average before and after."""
    load_before, started = os.getloadavg()[0], time.monotonic()
    cpu_started = resource.getrusage(resource.RUSAGE_SELF)
    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="seed_example_") as folder:
        os.chdir(folder)
        try:
            result = run_example()
        finally:
            os.chdir(previous)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu.ru_utime + cpu.ru_stime) - (cpu_started.ru_utime + cpu_started.ru_stime)
    return dict(
        result,
        wall_s=time.monotonic() - started,
        cpu_s=cpu_s,
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )


def problems(result: Dict[str, Any]) -> List[str]:
    """What differs from the example's sizes: every round written, ``SAMPLE_SIZE // 2`` updates each."""
    found = []
    expected = [f"iteration_{r:04d}.json" for r in range(1, ROUNDS + 1)]
    if result["round_files"] != expected:
        found.append(f"round files {result['round_files']}, expected {expected}")
    if result["updates"] != ROUNDS * SAMPLE_SIZE // 2:
        found.append(f"{result['updates']} updates, expected {ROUNDS * SAMPLE_SIZE // 2}")
    if result["rounds"] != ROUNDS:
        found.append(f"{result['rounds']} rounds, expected {ROUNDS}")
    return found


def markdown(result: Dict[str, Any], when: str, machine: str) -> str:
    """The page ``SEED_EXAMPLE.md``: one row, the run's checks below it."""
    reward = "n/a" if result["reward"] is None else f"{result['reward']:.4f}"
    lines = [
        "# The seed's example at its own size",
        "",
        f"`python benchmarks/seed_example.py`, {when}, {machine}. The iterative MADPO config of the seed's",
        "documentation, as written but for the import, on the embedded team (every other field at its",
        "default). The suite runs it at small sizes (`tests/trainers/test_preference.py`).",
        "",
        "| rounds | updates | wall s | CPU s | reward after training | load average (before / after) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {result['rounds']} | {result['updates']} | {result['wall_s']:.0f} | {result['cpu_s']:.0f} | {reward} "
        f"| {result['load_before']:.1f} / {result['load_after']:.1f} |",
        "",
    ]
    found = problems(result)
    lines.append("Differs from the example's sizes: " + "; ".join(found) + "." if found else "Every round trained.")
    return "\n".join(lines) + "\n"


def summary_lines(result: Dict[str, Any]) -> List[str]:
    """``name: value`` lines, the run's numbers."""
    reward = "n/a" if result["reward"] is None else f"{result['reward']:.4f}"
    return [
        f"seed_example_wall_s: {result['wall_s']:.1f}",
        f"seed_example_cpu_s: {result['cpu_s']:.1f}",
        f"seed_example_updates: {result['updates']}",
        f"seed_example_reward: {reward}",
        f"seed_example_problems: {len(problems(result))}",
    ]


def main(argv=None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for SEED_EXAMPLE.md")
    options = parser.parse_args(argv)
    import common  # the benchmarks' one torch thread per process
    from busy_machine import cpu_name

    common.limit_threads()
    result = measure()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{len(os.sched_getaffinity(0))} usable cores, {cpu_name()}"
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "SEED_EXAMPLE.md").write_text(markdown(result, when, machine), encoding="utf-8")
    print("\n".join(summary_lines(result)))
    return result


if __name__ == "__main__":
    main()
