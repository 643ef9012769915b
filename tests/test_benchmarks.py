"""Smoke test of benchmarks/run.py: the --quick logic on tiny sizes, our side only, in this process.

The full side-by-side comparison with the reference (its own venv) is not part of the suite.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
MODULES = ("run", "common", "report", "models", "ours", "refenv")


@pytest.fixture
def bench():
    saved_path = list(sys.path)
    saved = {name: sys.modules.pop(name) for name in MODULES if name in sys.modules}
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("run")
    finally:
        sys.path[:] = saved_path
        for name in MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_quick_ours_only(bench, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Development\n\ndev\n")
    results = bench.main(["--quick", "--in-process", "--out", str(tmp_path), "--readme", str(readme)])
    out = capsys.readouterr().out
    for model in results["plan"]["models"]:
        for batch in results["plan"]["batch_sizes"]:
            assert results["madpo_step"][model][batch]["ours"]["pairs_per_s"] > 0
        assert results["collection"][model]["ours"]["per_s"] > 0
        assert all(results["madpo_checkpointing"][model][every]["pairs_per_s"] > 0 for every in (1, 2))
        assert results["madpo_attention_free"][model]["pairs_per_s"] > 0
    assert results["iterative"]["ours"]["updates"] > 0 and results["peak"]["flops_per_s"] > 0
    table = (tmp_path / "RESULTS.md").read_text()
    assert "| MADPO training |" in table and "`checkpoint_every_n_layers: 2`" in table and "bound: no attention" in table and "| Collection |" in table and "| Iterative MADPO" in table
    last = out.strip().split("\n\n")[-1].splitlines()  # the summary block ends stdout
    names = [line.split(":")[0] for line in last]
    assert names[:3] == ["madpo_step_speedup_tiny", "collection_speedup", "iterative_speedup"]
    assert all(": " in line for line in last)
    assert readme.read_text() == "# x\n\n## Development\n\ndev\n"  # quick / ours-only runs leave the README alone


def test_readme_section_is_inserted_then_replaced(bench, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Usage\n\nu\n\n## Development\n\ndev\n")
    bench.report.update_readme(readme, "first\n")
    assert readme.read_text() == "# x\n\n## Usage\n\nu\n\n## Performance\n\nfirst\n\n## Development\n\ndev\n"
    bench.report.update_readme(readme, "second\n")
    assert readme.read_text() == "# x\n\n## Usage\n\nu\n\n## Performance\n\nsecond\n\n## Development\n\ndev\n"
