"""``comlrl-lightning env``: the installation and the machine, as a bug report needs them.

Five sections, each a Markdown list to paste into an issue: the versions of Python and of the
packages a run uses (read from the installed distributions' metadata: nothing heavy is imported
for them, and vLLM never), torch's threads (intra-op and inter-op, with the variables that set
them), the CPU (cores, the cores this process may use, torch's kernel capability and the vector
flags), the accelerators, and the isolation layers the coding task's test runner uses here (found
by running its probe program once).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

PACKAGES = (
    "comlrl-lightning",
    "torch",
    "lightning",
    "transformers",
    "tokenizers",
    "peft",
    "datasets",
    "jsonargparse",
    "torchmetrics",
    "wandb",
    "tensorboard",
    "vllm",
)
"""The distributions whose versions the report names (``not installed`` where absent)."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_NUM_THREADS")
"""Environment variables that set torch's thread counts (shown where set)."""

CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")
"""The vector-instruction flags of ``/proc/cpuinfo`` that change which kernels torch runs."""

RUNNER = "comlrl_lightning.tasks.coding.runner"
"""The coding task's test runner, imported by path as a config names it (the package never imports a task)."""

Section = Tuple[str, List[Tuple[str, str]]]


def package_versions(names: Sequence[str] = PACKAGES) -> List[Tuple[str, str]]:
    """``(name, version)`` of each installed distribution (``not installed`` for one that is not),
    from its metadata: the package itself is not imported."""
    found = []
    for name in names:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            found.append((name, "not installed"))
    return found


def cpu_flags(cpuinfo: str, wanted: Sequence[str] = CPU_FLAGS) -> List[str]:
    """The flags of ``wanted`` that the first ``flags`` (x86) or ``Features`` (Arm) line of a
    ``/proc/cpuinfo`` text lists, in ``wanted``'s order."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            present = set(value.split())
            return [flag for flag in wanted if flag in present]
    return []


def versions_section() -> Section:
    python = (f"python ({platform.python_implementation()})", platform.python_version())
    return "Versions", [python, ("system", f"{platform.system()} {platform.release()}"), *package_versions()]


def threads_section() -> Section:
    import torch

    rows = [
        ("torch.get_num_threads()", str(torch.get_num_threads())),
        ("torch.get_num_interop_threads()", str(torch.get_num_interop_threads())),
    ]
    rows += [(name, os.environ[name]) for name in THREAD_VARIABLES if name in os.environ]
    return "Threads", rows


def cpu_section(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> Section:
    import torch

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        flags = ", ".join(cpu_flags(cpuinfo_path.read_text(encoding="utf-8", errors="replace"))) or "none of them"
    except OSError:
        flags = f"unknown (no {cpuinfo_path})"
    rows = [
        ("cores", str(os.cpu_count())),
        ("cores this process may use", str(usable)),
        ("torch CPU capability", str(torch.backends.cpu.get_cpu_capability())),
        ("vector flags", flags),
        ("machine", platform.machine()),  # not processor() or platform(): they run uname in a process
    ]
    return "CPU", rows


def devices_section() -> Section:
    import torch

    if not torch.cuda.is_available():
        mps = getattr(torch.backends, "mps", None)
        apple = mps is not None and mps.is_available()
        return "Devices", [("CUDA", "not available"), ("Apple MPS", "available" if apple else "not available")]
    rows = [("CUDA", f"{torch.version.cuda} ({torch.cuda.device_count()} devices)")]
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        memory = properties.total_memory / 2**30
        rows.append(
            (f"cuda:{index}", f"{properties.name}, {memory:.1f} GiB, capability {properties.major}.{properties.minor}")
        )
    return "Devices", rows


def isolation_section(detect: Optional[Callable[[], Dict[str, bool]]] = None) -> Section:
    """The test runner's isolation layers (``detect``: the runner's ``active_isolation``); a machine
    where the probe cannot run at all says why instead of failing the report."""
    try:
        layers = (detect or importlib.import_module(RUNNER).active_isolation)()
    except Exception as error:  # the report describes the machine; it must not stop at its first gap
        return "Test runner isolation", [("detection failed", f"{type(error).__name__}: {error}")]
    return "Test runner isolation", [(name, "on" if on else "OFF") for name, on in layers.items()]


def render(sections: Sequence[Section]) -> str:
    """The sections as Markdown: a heading and a ``- name: value`` list each."""
    blocks = []
    for title, rows in sections:
        blocks.append("\n".join([f"## {title}", "", *(f"- {name}: {value}" for name, value in rows)]))
    return "\n\n".join(blocks) + "\n"


def report(isolation: bool = True) -> str:
    """The whole report (without the test runner's section when ``isolation`` is false)."""
    sections = [versions_section(), threads_section(), cpu_section(), devices_section()]
    if isolation:
        sections.append(isolation_section())
    return render(sections)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``comlrl-lightning env [--no_isolation]``: print the report; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="comlrl-lightning env",
        description="Print versions, threads, CPU features, devices and the test runner's isolation "
        "(Markdown, to paste into a bug report).",
    )
    parser.add_argument(
        "--no_isolation",
        action="store_true",
        help="leave out the test runner's isolation (its probe starts a process and takes seconds)",
    )
    options = parser.parse_args(argv)
    print(report(isolation=not options.no_isolation), end="")
    return 0


__all__ = ["PACKAGES", "cpu_flags", "main", "package_versions", "render", "report"]
