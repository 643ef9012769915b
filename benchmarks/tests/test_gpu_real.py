"""benchmarks/gpu_real.py: the GPU script's plan and summary."""

from __future__ import annotations

import importlib


def test_the_gpu_script_plans_both_sides_and_divides_only_measured_rows(bench):
    gpu_real = importlib.import_module("gpu_real")
    names = [name for name, _, _ in gpu_real.rows(gpu_real.TINY, {"model": "m"}, ["ours"])]
    assert names and all(name.startswith("ours_") for name in names)
    both = {name: job for name, _, job in gpu_real.rows(gpu_real.GPU, {"model": "m"}, ["ours", "reference"])}
    assert both["reference_step_full"]["pairs"] == both["ours_step_full"]["pairs"] == gpu_real.GPU["step"]["pairs"]
    assert both["reference_collection_full"]["max_new_tokens"] == both["ours_collection_full"]["max_new_tokens"]
    lines = dict(
        gpu_real.summary({"ours_step_full": {"pairs_per_s": 6.0}, "reference_step_full": {"pairs_per_s": 2.0}})
    )
    assert lines["gpu_real_madpo_step_speedup"] == 3.0 and lines["gpu_real_collection_speedup"] is None
