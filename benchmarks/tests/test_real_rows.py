"""benchmarks/real_rows.py: the real-model rows (SmolLM2-135M): what runs, the lines and table they print."""

from __future__ import annotations

import importlib
import json

import pytest


def test_real_rows_can_be_measured_again_alone_side_by_side(bench):
    real_rows, jobs = importlib.import_module("real_rows"), []
    run = lambda side, job: jobs.append((side, job["job"], job.get("hold_agent_graphs", False))) or {}  # noqa: E731
    real_rows.measure(run, True, "/models/smol", rows=["step/ours", "step/ours_hold_agent_graphs"])
    assert jobs == [("ours", "real_step", False), ("ours", "real_step", True)]
    jobs.clear()
    results = real_rows.measure(run, True, "/models/smol", rows=["collection"])
    assert jobs == [("ours", "real_collection", False), ("reference", "real_collection", False)]
    assert results["step"] == {} and set(results["collection"]) == {"ours", "reference"}
    jobs.clear()  # with a vLLM venv: the same collection with each generator in it, side "vllm"
    run = lambda side, job: jobs.append((side, job["job"], job.get("generator"))) or {}  # noqa: E731
    results = real_rows.measure(run, True, "/models/smol", rows=["collection/ours", "vllm"], vllm=True)
    assert jobs == [
        ("ours", "real_collection", None),
        ("vllm", "real_collection", "vllm"),
        ("vllm", "real_collection", "hf"),
    ]
    assert set(results["vllm"]) == {"vllm", "hf"}


def test_the_real_vllm_row_is_over_our_hugging_face_path_here_with_its_bound_and_the_same_venv_beside(bench):
    real_rows = importlib.import_module("real_rows")
    results = {
        "plan": real_rows.QUICK,
        "load_average": [1.0],
        "step": {},
        "collection": {"ours": dict(_row(2.0, share=0.8, key="per_s"), warmup_s=3.0)},
        "lora_team": {},
        "memory": {},
    }
    assert "real_vllm_collection_speedup" not in dict(real_rows.summary(results))  # no vLLM venv: no row
    engine = dict(_row(2.5, key="per_s"), warmup_s=40.0, versions={"transformers": "5.19.0"})
    older = dict(_row(1.25, key="per_s"), warmup_s=4.0, versions={"transformers": "5.19.0"})
    results["vllm"] = {"vllm": engine, "hf": older}
    lines = dict(real_rows.summary(results))
    assert lines["real_vllm_collection_speedup"] == pytest.approx(1.25)  # 2.5 over 2.0: our HF path here
    assert lines["real_vllm_collection_speedup_bound"] == pytest.approx(1 / 0.8)  # under 3x: the bound beside it
    assert lines["real_vllm_collection_speedup_same_venv"] == pytest.approx(2.0)
    table = real_rows.markdown(results)
    assert "| Hugging Face generate() | main (5) | 2.000 | 1.25x | 3.0 | 1000 |" in table
    assert "| Hugging Face generate() | vLLM venv (5.19.0) | 1.250 | 2.00x | 4.0 | 1000 |" in table
    assert "| VLLMGenerator | vLLM venv (5.19.0) | 2.500 | - | 40.0 | 1000 |" in table
    assert "| MADPO step" not in table and "| LoRA team" not in table  # rows this run did not measure are left out
    results["vllm"]["vllm"] = dict(engine, per_s=7.0)  # at the target: no bound
    assert "real_vllm_collection_speedup_bound" not in dict(real_rows.summary(results))


def _row(rate: float, share: float = 0.5, rss: float = 1000.0, key: str = "pairs_per_s") -> dict:
    return {key: rate, "matmul_share": share, "peak_rss_mb": rss, "side": "ours", "versions": {"transformers": "5"}}


def test_real_rows_print_the_bound_only_under_the_target_and_tolerate_missing_rows(bench, tmp_path):
    real_rows = importlib.import_module("real_rows")
    results = {
        "plan": real_rows.QUICK,
        "load_average": [1.0, 3.0],
        "step": {"ours": _row(0.3, 0.6, 5000), "reference": _row(0.2, 0.5, 7000)},
        "collection": {"ours": _row(3.0, key="per_s"), "reference": _row(1.0, key="per_s")},
        "lora_team": {2: {"step": {"one_pass": _row(0.8), "per_agent": _row(0.4)}}},
        "memory": {"real_step_peak_rss_ratio": 0.89},
    }
    lines = dict(real_rows.summary(results))
    assert lines["real_madpo_step_speedup"] == pytest.approx(1.5)
    assert lines["real_madpo_step_speedup_bound"] == pytest.approx(1.5 / 0.6)  # below 2x: why, beside it
    assert lines["real_madpo_step_speedup_matmul_share_reference"] == 0.5
    assert lines["real_collection_speedup"] == pytest.approx(3.0) and "real_collection_speedup_bound" not in lines
    assert lines["real_madpo_step_speedup_lora"] == pytest.approx(4.0)
    assert lines["real_madpo_step_speedup_hold_agent_graphs"] is None  # not measured: n/a, not an error
    assert lines["real_lora_team_step_speedup_2"] == pytest.approx(2.0)
    assert lines["real_lora_team_collection_speedup_2"] is None
    assert (
        lines["real_step_peak_rss_ratio_this_run"] == pytest.approx(5 / 7) and lines["real_step_peak_rss_ratio"] == 0.89
    )
    table = real_rows.markdown(results)
    assert "| MADPO step, 2 full copies (pairs/s) | 0.300 | 0.200 | 1.50x | 0.60 / 0.50 | 5000 / 7000 |" in table
    assert "| collection (joint candidates/s) | 2 | - | - | - |" in table
    saved = tmp_path / "real_speed.json"
    saved.write_text(json.dumps(results))
    assert real_rows.load(saved)["lora_team"][2] == results["lora_team"][2]  # JSON's "2" back to 2


def test_real_memory_ratios_divide_ours_by_the_reference_per_row(bench, tmp_path):
    real_rows = importlib.import_module("real_rows")
    rows = [
        {"side": "ours", "row": "step", "hold_agent_graphs": False, "peak_rss_gib": 4.0},
        {"side": "ours", "row": "step", "hold_agent_graphs": True, "peak_rss_gib": 9.0},
        {"side": "reference", "row": "step", "hold_agent_graphs": False, "peak_rss_gib": 5.0},
        {"side": "ours", "row": "default", "hold_agent_graphs": False, "peak_rss_gib": 3.0},
        {"side": "ours", "row": "lora", "hold_agent_graphs": False, "peak_rss_gib": 1.5},
    ]
    path = tmp_path / "real_memory.json"
    path.write_text(json.dumps(rows))
    assert real_rows.memory_ratios(path) == {"real_step_peak_rss_ratio": 0.8, "real_lora_over_full_peak_rss_ratio": 0.5}
    rows.append({"side": "ours", "row": "step", "materialised_logits": True, "peak_rss_gib": 10.0})
    path.write_text(json.dumps(rows))
    assert real_rows.memory_ratios(path)["real_step_peak_rss_ratio"] == 0.8  # the variant is not the step row
    assert real_rows.memory_ratios(path)["real_fused_head_peak_rss_ratio"] == 0.4
