"""benchmarks/real_memory.py: the real-model memory rows, their plan and their table."""

from __future__ import annotations

import importlib
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent


def test_real_memory_rows_put_the_config_first_and_divide_by_the_reference(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    real_memory = importlib.import_module("real_memory")
    command = real_memory.ours_command("iterative", "/models/smol", tmp_path, tmp_path / "items.json", hold=True)
    assert command[3:6] == ["fit", "--config", str(BENCHMARKS.parent / "configs" / "madpo_iter.yaml")]
    assert command[-2:] == ["--model.init_args.team.memory.hold_agent_graphs", "true"]
    assert "lora" not in " ".join(real_memory.ours_command("default", "/m", tmp_path, tmp_path / "i.json"))
    rows = [
        {"side": "ours", "row": "step", "hold_agent_graphs": False, "peak_rss_gib": 4.5, "seconds": 10.0},
        {"side": "ours", "row": "lora", "hold_agent_graphs": False, "peak_rss_gib": 2.0, "seconds": 5.0},
        {"side": "reference", "row": "step", "hold_agent_graphs": False, "peak_rss_gib": 5.0, "seconds": 20.0},
    ]
    table = real_memory.markdown(rows, "/models/smol")
    assert "| ours | 4.50 | 0.90 | 10 |" in table and "| ours | 2.00 | - | 5 |" in table
    assert "| reference | 5.00 | 1.00 | 20 |" in table


def test_real_memory_plans_the_variants_asked_for_and_a_merge_replaces_only_what_ran_again(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    real_memory = importlib.import_module("real_memory")
    options = real_memory.argparse.Namespace(
        rows=["step", "default"], hold_agent_graphs=False, materialised_logits=True, reference_python=None
    )
    assert real_memory.plan(options) == [
        ("ours", "step", None),
        ("ours", "default", None),
        ("ours", "step", "materialised_logits"),
    ]
    run = lambda side, row, peak, **variant: {"side": side, "row": row, "peak_rss_gib": peak, "seconds": 1, **variant}  # noqa: E731
    saved = [run("ours", "step", 7.0, hold_agent_graphs=False), run("ours", "step", 8.6, hold_agent_graphs=True)]
    saved.append(run("reference", "step", 7.9, hold_agent_graphs=False))
    new = [run("ours", "step", 6.9, materialised_logits=False), run("ours", "step", 9.5, materialised_logits=True)]
    merged = real_memory.merged(saved, new)
    assert [r["peak_rss_gib"] for r in merged] == [6.9, 8.6, 7.9, 9.5]
    table = real_memory.markdown(merged, "/models/smol")
    assert "| ours (materialised logits) | 9.50 | 1.20 |" in table
    assert "| ours (hold_agent_graphs) | 8.60 | 1.09 |" in table
