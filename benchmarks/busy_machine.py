"""The README's default run on an idle machine and beside a CPU-bound process, with torch's thread
default (one thread per core) and this package's (one thread for a small model).

    python benchmarks/busy_machine.py                         # the four rows (idle/busy x old/new)
    python benchmarks/busy_machine.py --rows busy-new,idle-new --timeout-s 900
    python benchmarks/busy_machine.py --sizes                 # one training step per model size, 1 and 2 threads

Each row runs ``comlrl-lightning fit --config configs/madpo.yaml`` in its own process (its log under a
temporary folder); "busy" starts a pure-Python busy loop (one process, pinned nowhere) beside it for
the run's whole length. The old default is torch's own count, given as ``COMLRL_LIGHTNING_THREADS``
(one per usable core); the new one sets nothing. A row records wall and CPU seconds (the run's
process only), the evaluation reward it ended at, and the load average before and after (other
work on the machine shows there). Writes ``benchmarks/BUSY_MACHINE.md`` and prints ``name: value``
lines last. ``--sizes`` times a forward and backward pass of a GPT-2 team member at several sizes
with 1 and 2 threads (the evidence for ``TINY_MODEL_PARAMETERS`` in ``runtime/threads.py``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROWS = ("idle-old", "idle-new", "busy-old", "busy-new")
"""Every row: the machine (idle, or busy with one CPU-bound process beside the run) and the thread default."""
FINAL_REWARD = re.compile(r"evaluation \(after training, \d+ updates\): eval/turn_1/reward_mean = (-?\d+\.\d+)")
THREADS_LINE = re.compile(r"^threads: .*$", re.MULTILINE)
BUSY_LOOP = "while True: pass"


def final_reward(output: str) -> Optional[float]:
    """The evaluation reward a run's output ends at (its last "after training" line), or ``None``."""
    found = FINAL_REWARD.findall(output)
    return float(found[-1]) if found else None


def row_environment(row: str, cores: int, environ: Dict[str, str]) -> Dict[str, str]:
    """The environment of ``row``'s run: the old default pins torch's count (``cores``) through
    ``COMLRL_LIGHTNING_THREADS``; the new one leaves every thread variable unset."""
    env = {
        k: v for k, v in environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "COMLRL_LIGHTNING_THREADS")
    }
    if row.endswith("-old"):
        env["COMLRL_LIGHTNING_THREADS"] = str(cores)
    return env


def run_row(row: str, cores: int, timeout_s: float) -> Dict[str, Any]:
    """Run the default config for ``row``; wall and CPU seconds of the run's process, its final
    reward and threads line, the 1-minute load average before and after."""
    competitor = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if row.startswith("busy") else None
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="busy_machine_") as folder:
        command = [sys.executable, "-m", "comlrl_lightning", "fit", "--config", str(ROOT / "configs" / "madpo.yaml")]
        command += [f"--trainer.default_root_dir={folder}", "--trainer.enable_progress_bar=false"]
        started, children = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=row_environment(row, cores, dict(os.environ)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            timed_out = True
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the run's process, reaped; the loop is not yet
    if competitor is not None:
        competitor.kill()
        competitor.wait()
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    threads = THREADS_LINE.search(output)
    return {
        "row": row,
        "wall_s": wall,
        "cpu_s": cpu,
        "reward": final_reward(output),
        "timed_out": timed_out,
        "threads": threads.group(0) if threads else "",
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "returncode": process.returncode,
    }


def busy_over_idle(rows: Sequence[Dict[str, Any]], default: str) -> Optional[float]:
    """Wall time of ``busy-<default>`` over ``idle-<default>``, or ``None`` if either is missing."""
    by_row = {row["row"]: row for row in rows}
    busy, idle = by_row.get(f"busy-{default}"), by_row.get(f"idle-{default}")
    return busy["wall_s"] / idle["wall_s"] if busy and idle else None


def markdown_table(rows: Sequence[Dict[str, Any]], when: str, machine: str) -> str:
    """``BUSY_MACHINE.md``: one line per row, then the busy/idle ratios."""
    lines = [
        "# The default run on a busy machine",
        "",
        f'`python benchmarks/busy_machine.py`, {when}, {machine}. "busy": one pure-Python busy loop beside the',
        'run; "old": torch\'s default threads (one per core), "new": this package\'s default (one thread for',
        "a small model). The load average (1 minute) before and after each row shows other work on the machine.",
        "",
        "| row | threads line | wall s | CPU s | final reward | load before / after |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        wall = f"> {row['wall_s']:.0f} (stopped)" if row["timed_out"] else f"{row['wall_s']:.0f}"
        reward = "n/a" if row["reward"] is None else f"{row['reward']:.4f}"
        lines.append(
            f"| {row['row']} | `{row['threads']}` | {wall} | {row['cpu_s']:.0f} | {reward} | "
            f"{row['load_before']:.1f} / {row['load_after']:.1f} |"
        )
    for default in ("old", "new"):
        ratio = busy_over_idle(rows, default)
        if ratio is not None:
            lines.append(f"\nBusy over idle, {default} default: {ratio:.2f}x wall time.")
    return "\n".join(lines) + "\n"


def summary_lines(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """``name: value`` lines, as the other benchmarks print them last."""
    lines = []
    for row in rows:
        name = row["row"].replace("-", "_")
        lines += [f"busy_machine_{name}_wall_s: {row['wall_s']:.1f}", f"busy_machine_{name}_cpu_s: {row['cpu_s']:.1f}"]
        if row["reward"] is not None:
            lines.append(f"busy_machine_{name}_reward: {row['reward']:.4f}")
    for default in ("old", "new"):
        ratio = busy_over_idle(rows, default)
        if ratio is not None:
            lines.append(f"busy_machine_busy_over_idle_{default}: {ratio:.2f}")
    return lines


def cpu_name() -> str:
    """The CPU's model name (Linux's ``/proc/cpuinfo``) and torch's kernel level (AVX2, AVX512)."""
    import torch

    try:
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else 'CPU'} ({torch.backends.cpu.get_cpu_capability()})"


def step_seconds(hidden_size: int, layers: int, threads: int, repeats: int = 5) -> Dict[str, float]:
    """Median wall and CPU seconds of one forward and backward pass (batch 16 x 48 tokens) of a GPT-2
    with ``hidden_size`` and ``layers`` on ``threads`` torch threads, and its parameter count."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = GPT2Config(
        n_embd=hidden_size, n_layer=layers, n_head=max(hidden_size // 64, 2), vocab_size=512, n_positions=64
    )
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(0, 512, (16, 48))
    walls, cpus = [], []
    for _ in range(repeats + 1):  # the first is a warm-up
        wall, cpu = time.perf_counter(), time.process_time()
        model(tokens, labels=tokens).loss.backward()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    middle = repeats // 2 + 1
    return {
        "parameters": float(sum(p.numel() for p in model.parameters())),
        "wall_s": sorted(walls[1:])[middle - 1],
        "cpu_s": sorted(cpus[1:])[middle - 1],
    }


SIZES = ((64, 2), (256, 4), (512, 8), (768, 12))
"""(hidden size, layers) of the ``--sizes`` rows: about 0.1 M, 3.3 M, 25 M and 85 M parameters."""


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="a row still running then is stopped")
    parser.add_argument("--sizes", action="store_true", help="time one training step per model size instead")
    parser.add_argument("--output", type=Path, default=HERE / "BUSY_MACHINE.md")
    options = parser.parse_args(argv)
    if options.sizes:
        for hidden, layers in SIZES:
            one, two = step_seconds(hidden, layers, 1), step_seconds(hidden, layers, 2)
            print(
                f"gpt2_{hidden}x{layers}: {one['parameters'] / 1e6:.1f} M parameters, 1 thread {one['wall_s']:.3f} s "
                f"({one['cpu_s']:.3f} CPU), 2 threads {two['wall_s']:.3f} s ({two['cpu_s']:.3f} CPU), "
                f"speed-up {one['wall_s'] / two['wall_s']:.2f}x, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    rows = []
    for row in options.rows.split(","):
        if row not in ROWS:
            parser.error(f"--rows: {row!r} is not one of {', '.join(ROWS)}")
        rows.append(run_row(row, cores, options.timeout_s))
        print(
            f"{row}: {rows[-1]['wall_s']:.0f} s wall, {rows[-1]['cpu_s']:.0f} s CPU, reward {rows[-1]['reward']}",
            flush=True,
        )
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{cores} usable cores, {cpu_name()}"
    options.output.write_text(markdown_table(rows, when, machine))
    print("\n".join(summary_lines(rows)))


if __name__ == "__main__":
    main()
