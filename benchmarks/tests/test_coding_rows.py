"""benchmarks/coding_rows.py: one round of the coding task, ours against the reference: plan, rows, checks."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


def test_the_coding_round_plan_refuses_sizes_outside_the_split(bench):
    rows = importlib.import_module("coding_rows")
    assert rows.plan(8, 4, 128, 8) == dict(items=8, candidates=4, max_new_tokens=128, eval_items=8, seed=0)
    for sizes, option in (
        ((0, 4, 128, 8), "items"),
        ((131, 4, 128, 8), "items"),
        ((8, 1, 128, 8), "candidates"),
        ((8, 4, 0, 8), "max_new_tokens"),
        ((8, 4, 128, 33), "eval_items"),
    ):
        with pytest.raises(ValueError, match=option):
            rows.plan(*sizes)
    assert rows.main.__module__ == "coding_rows" and rows.QUICK["items"] <= rows.FULL["items"]


def _side(seconds: float, sampling: float, **work) -> dict:
    phases = dict(sampling=sampling, scoring=1.0, pairs=0.5, training=2.0, evaluation=1.5, load=1.0)
    phases["other"] = seconds - sum(phases.values())
    side = dict(seconds=seconds, phases=phases, pairs=3, round_file_pairs=3, updates=1, eval_reward=[-3.5, -3.0])
    side.update(tokens={"collection": 64, "evaluation": 16}, scored={"collection": 8, "evaluation": 4})
    side.update(prompt_digest={"collection": "a", "evaluation": "b"})
    side.update(work)
    return side


def test_the_coding_round_row_is_the_reference_over_ours_per_phase_and_names_differing_work(bench):
    rows = importlib.import_module("coding_rows")
    results = {"plan": rows.plan(2, 2, 16, 2), "ours": _side(10.0, 4.0), "reference": _side(35.0, 20.0)}
    lines = dict(rows.summary(results))
    assert lines["real_coding_round_speedup"] == pytest.approx(3.5)
    assert lines["real_coding_round_speedup_sampling"] == pytest.approx(5.0)
    assert lines["real_coding_round_speedup_scoring"] == pytest.approx(1.0)
    assert lines["real_coding_round_speedup_training_per_pair"] == pytest.approx(1.0)  # 2 s for 3 pairs on both
    assert len(lines) == 7 and all(name.startswith("real_coding_round_speedup") for name in lines)
    table = rows.markdown(dict(results, checks=rows.checks(results)))
    assert "| sampling | 4.0 | 20.0 | 5.00x |" in table and "| total | 10.0 | 35.0 | 3.50x |" in table
    assert "| ours | 64 / 16 | 8 / 4 | 3 (3) | 1 | 0.7 | -3.500 / -3.000 |" in table
    assert "Both sides did the same work." in table
    assert "vLLM" not in table  # no vLLM side: no vLLM column
    results["reference"] = _side(35.0, 20.0, tokens={"collection": 60, "evaluation": 16}, eval_reward=[None, -3.0])
    assert rows.checks(results) == ["tokens (collection): ours 64, reference 60"]
    # a side that scored only empty answers (the reference cut its chat prompts at their first pad) is named
    results["reference"]["empty"] = {"collection": 8, "evaluation": 0}
    assert rows.checks(results)[0] == "every joint answer of the reference's collection is empty"
    results["reference"]["empty"] = {"collection": 7, "evaluation": 4}
    assert rows.checks(results) == ["tokens (collection): ours 64, reference 60"]
    results["reference"].update(pairs=0, updates=0)
    assert "| reference | 60 / 16 | 8 / 4 | 0 (3) | 0 | - | - / -3.000 |" in rows.markdown(results)
    assert dict(rows.summary(results))["real_coding_round_speedup_training_per_pair"] is None
    del results["reference"]  # one side only: no speed-up, no checks
    assert dict(rows.summary(results))["real_coding_round_speedup"] is None and rows.checks(results) == []
    assert "| total | 10.0 | - | - |\n" in rows.markdown(results)


def test_the_coding_round_with_vllm_is_its_own_column_and_row_against_the_same_reference(bench):
    rows = importlib.import_module("coding_rows")
    results = {"plan": rows.plan(2, 2, 16, 2), "ours": _side(10.0, 4.0), "reference": _side(35.0, 20.0)}
    results["vllm"] = _side(7.0, 2.0, tokens={"collection": 64, "evaluation": 12})
    lines = dict(rows.summary(results))
    assert lines["real_coding_round_speedup"] == pytest.approx(3.5)  # ours with Hugging Face, unchanged
    assert lines["real_coding_round_speedup_vllm"] == pytest.approx(5.0)
    assert lines["real_coding_round_speedup_vllm_sampling"] == pytest.approx(10.0)
    table = rows.markdown(results)
    assert (
        "| sampling | 4.0 | 20.0 | 5.00x | 2.0 | 10.00x |" in table
        and "| total | 10.0 | 35.0 | 3.50x | 7.0 | 5.00x |" in table
    )
    assert "| vllm | 64 / 12 |" in table
    assert rows.checks(results) == ["tokens (evaluation): ours with vLLM 12, reference 16"]
    seen = []  # the vLLM side's job is ours with the vLLM generator; an earlier run's sides are all kept
    earlier = {"plan": results["plan"], "ours": results["ours"], "reference": results["reference"]}
    kept = rows.measure(
        lambda side, job: seen.append(job) or _side(7.0, 2.0), results["plan"], "/m", "/he", ["vllm"], earlier=earlier
    )
    assert [(job["side"], job["generator"]) for job in seen] == [("vllm", "vllm")]
    assert kept["kept"] == ["ours", "reference"] and set(kept) >= {"ours", "reference", "vllm"}


def test_both_coding_round_jobs_differ_only_in_their_side_and_our_config_is_full_copies(bench, tmp_path):
    rows, coding_round = importlib.import_module("coding_rows"), importlib.import_module("coding_round")
    seen = []
    sizes = rows.plan(3, 2, 16, 2, seed=5)
    results = rows.measure(lambda side, job: seen.append(job) or _side(1.0, 0.5), sizes, "/model", "/he.jsonl.gz")
    assert [job.pop("side") for job in seen] == ["ours", "reference"] and seen[0] == seen[1]
    assert seen[0]["items"] == 3 and seen[0]["humaneval"] == "/he.jsonl.gz" and results["checks"] == []
    config = coding_round.our_config(seen[0], str(tmp_path))
    model, data = config["model"]["init_args"], config["data"]["init_args"]
    assert model["team"] == {"agent_model": "smollm2-135m-instruct", "num_agents": 2}  # no LoRA: as the reference
    assert model["sampling"]["extra"] == {"min_new_tokens": 16} and model["sampling"]["max_new_tokens"] == 16
    assert data["task"]["train_dataset"]["init_args"] == {"split": "train", "limit": 3}
    assert data["task"]["eval_dataset"]["init_args"] == {"split": "eval", "limit": 2}
    assert data["num_iterations"] == 1 and data["preference_num_candidates"] == 2 and data["eval_num_samples"] == 2
    assert config["seed_everything"] == 5 and config["trainer"]["callbacks"] == []
    assert model["generator"]["class_path"] == "comlrl_lightning.generation.HFGenerator"  # the config's
    engine = coding_round.our_config(dict(seen[0], generator="vllm"), str(tmp_path))["model"]["init_args"]
    assert engine["generator"]["class_path"] == "comlrl_lightning.generation.VLLMGenerator"
    # a side an earlier run measured at the same sizes is kept (--keep); at other sizes it runs again
    seen.clear()
    earlier = dict(results, load_average=[1.5, 2.0])
    kept = rows.measure(lambda side, job: seen.append(job) or _side(2.0, 0.5), sizes, "/m", "/he", earlier=earlier)
    assert seen == [] and kept["kept"] == ["ours", "reference"] and kept["ours"] == results["ours"]
    assert kept["load_average"][:2] == [1.5, 2.0] and "kept from an earlier run" in rows.markdown(kept)
    rows.measure(
        lambda side, job: seen.append(job) or _side(2.0, 0.5), rows.plan(4, 2, 16, 2), "/m", "/he", earlier=earlier
    )
    assert [job["side"] for job in seen] == ["ours", "reference"]


def test_the_coding_round_command_writes_the_table_and_the_results_of_both_sides(bench, tmp_path, monkeypatch, capsys):
    import comlrl_lightning.tasks.coding.humaneval as humaneval

    class FakeRunner:
        def __init__(self, in_process, pythons):
            assert not in_process and set(pythons) == {"reference"}

        def __call__(self, side, job):
            assert job["script"] == "coding_round.py" and job["max_new_tokens"] == 16
            return _side(10.0 if side == "ours" else 30.0, 1.0)

    monkeypatch.setattr(importlib.import_module("job_runner"), "Runner", FakeRunner)
    monkeypatch.setattr(importlib.import_module("refenv"), "ensure", lambda venv: Path("python"))
    monkeypatch.setattr(importlib.import_module("real_rows"), "model_folder", lambda: "/model")
    monkeypatch.setattr(humaneval, "humaneval_file", lambda: Path("/he.jsonl.gz"))
    results = bench.main(["--only-coding-round", "--quick", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "coding_round.json").read_text())["reference"]["seconds"] == 30.0
    assert "| total | 10.0 | 30.0 | 3.00x |" in (tmp_path / "CODING_ROUND.md").read_text()
    assert "real_coding_round_speedup: 3.0" in capsys.readouterr().out and results["checks"] == []
