"""Smoke test of benchmarks/run.py: the --quick logic on tiny sizes, our side only, in this process.

The full side-by-side comparison with the reference (its own venv) is not part of the suite.
"""

from __future__ import annotations

import argparse
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
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\nintro\n")
    results = bench.main(["--quick", "--in-process", "--out", str(tmp_path), "--docs-page", str(page)])
    out = capsys.readouterr().out
    for model in results["plan"]["models"]:
        for batch in results["plan"]["batch_sizes"]:
            assert results["madpo_step"][model][batch]["ours"]["pairs_per_s"] > 0
        assert results["collection"][model]["ours"]["per_s"] > 0
        assert all(results["madpo_checkpointing"][model][every]["pairs_per_s"] > 0 for every in (1, 2))
        assert results["madpo_attention_free"][model]["pairs_per_s"] > 0
    assert results["iterative"]["ours"]["updates"] > 0 and results["peak"]["flops_per_s"] > 0
    table = (tmp_path / "RESULTS.md").read_text()
    assert (
        "| MADPO training |" in table
        and "`checkpoint_every_n_layers: 2`" in table
        and "bound: no attention" in table
        and "| Collection |" in table
        and "| Iterative MADPO" in table
    )
    last = out.strip().split("\n\n")[-1].splitlines()  # the summary block ends stdout
    names = [line.split(":")[0] for line in last]
    assert names[:3] == ["madpo_step_speedup_tiny", "collection_speedup", "iterative_speedup"]
    assert all(": " in line for line in last)
    assert page.read_text() == "# Performance\n\nintro\n"  # quick / ours-only runs leave the docs page alone


def test_docs_page_results_are_inserted_then_replaced(bench, tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\nintro\n")
    start, end = bench.report.START, bench.report.END
    bench.report.update_page(page, "first\n")
    assert page.read_text() == f"# Performance\n\nintro\n\n{start}\n\nfirst\n\n{end}\n"
    page.write_text(page.read_text() + "\n## Later\n\nkept\n")
    bench.report.update_page(page, "second\n\n### Table\n")
    assert (
        page.read_text() == f"# Performance\n\nintro\n\n{start}\n\nsecond\n\n### Table\n\n{end}\n\n## Later\n\nkept\n"
    )


def test_the_docs_performance_page_has_one_generated_block(bench, tmp_path):
    """``docs/performance.md`` holds the generated results once, between the markers, and writing
    them again leaves the page byte for byte as it was."""
    text = (BENCHMARKS.parent / "docs" / "performance.md").read_text(encoding="utf-8")
    start, end = bench.report.START, bench.report.END
    assert text.count(start) == 1 and text.count(end) == 1 and text.index(start) < text.index(end)
    body = text[text.index(start) + len(start) : text.index(end)].strip("\n")
    assert "| MADPO training |" in body
    copy = tmp_path / "performance.md"
    copy.write_text(text, encoding="utf-8")
    bench.report.update_page(copy, body + "\n")
    assert copy.read_text(encoding="utf-8") == text


def test_old_flag_names_still_work(bench, monkeypatch):
    """``--readme`` / ``--no-readme`` (from when the results went into the README) are aliases."""
    parsed = {}
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parsed.update(vars(parse_args(self, args, namespace)))
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    with pytest.raises(SystemExit):
        bench.main(["--no-readme", "--readme", "x.md"])
    assert parsed["no_docs"] is True and parsed["docs_page"] == Path("x.md")
