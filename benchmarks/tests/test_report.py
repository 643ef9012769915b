"""benchmarks/report.py: the results block of the docs performance page, inserted once and replaced in place."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent


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
