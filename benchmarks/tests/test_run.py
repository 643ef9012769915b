"""benchmarks/run.py: the --quick logic on tiny sizes, our side only, in this process; its flags; the coding round's command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest


@pytest.mark.slow  # the benchmark script end to end (it also runs uname)
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
    team = results["lora_team"]
    for model in results["plan"]["models"]:
        for sides in team["step"][model].values():
            assert sides["one_pass"]["pairs_per_s"] > 0 and sides["per_agent"]["pairs_per_s"] > 0
        for key in ("collection", "sampling"):  # one pass samples what the agents sample one by one
            sides = team[key][model]
            assert sides["one_pass"]["digest"] == sides["per_agent"]["digest"]
    table = (tmp_path / "RESULTS.md").read_text()
    assert (
        "| MADPO training |" in table
        and "`checkpoint_every_n_layers: 2`" in table
        and "bound: no attention" in table
        and "| Collection |" in table
        and "| Iterative MADPO" in table
        and "| MADPO step (pairs/s) | tiny |" in table
        and "| collection (sequences/s) | tiny |" in table
        and "| sampling, 1 per item (sequences/s) | tiny |" in table
    )
    last = out.strip().split("\n\n")[-1].splitlines()  # the summary block ends stdout
    names = [line.split(":")[0] for line in last]
    assert names[:3] == ["madpo_step_speedup_tiny", "collection_speedup", "iterative_speedup"]
    assert all(": " in line for line in last)
    assert {"lora_team_step_speedup_tiny", "lora_team_collection_speedup_tiny"} <= set(names)
    assert page.read_text() == "# Performance\n\nintro\n"  # quick / ours-only runs leave the docs page alone


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
