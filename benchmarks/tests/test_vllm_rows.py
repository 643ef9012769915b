"""benchmarks/vllm_rows.py: the table and summary lines of the vLLM collection rows."""

from __future__ import annotations

import importlib


def test_the_vllm_table_renders_every_row_and_its_summary_lines(bench):
    vllm_rows = importlib.import_module("vllm_rows")
    parameters = {"tiny": {"parameters": 106816}, "small": {"parameters": 3188992}, "medium": {"parameters": 12.6e6}}
    collection = lambda rate: {"per_s": rate, "warmup_s": 9.0, "peak_rss_mb": 900.0}  # noqa: E731
    vllm = {
        "plan": vllm_rows.FULL,
        "versions": {"torch": "2.13.0+cpu", "transformers": "5.19.0"},
        "collection": {m: {"hf": collection(100.0), "vllm": collection(250.0)} for m in ("small", "medium")},
    }
    assert "| medium | 12.60M | 100.0 | 250.0 | 2.50x | 9.0 | 900 / 900 |" in vllm_rows.markdown(vllm, parameters)
    assert vllm_rows.summary(vllm)[0] == ("vllm_collection_speedup", 2.5)  # the largest model
    skipped = {"skipped": "vLLM is not importable here"}
    assert "Not measured in this run: vLLM is not importable here." in vllm_rows.markdown(skipped, parameters)
    assert vllm_rows.summary(skipped) == [("vllm_collection_speedup", None)]
