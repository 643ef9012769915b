"""benchmarks/coding_evidence.py: the bootstrap intervals against direct computations, and its tables
read from a run folder written here (an evaluation log and a round file in the formats runs write)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest


@pytest.fixture
def evidence(bench):
    """``benchmarks/coding_evidence.py`` as its command imports it (conftest's ``bench`` puts the
    benchmarks folder on ``sys.path`` and forgets the imported modules after the test)."""
    import coding_evidence

    return coding_evidence


def test_the_bootstrap_interval_of_a_share_matches_the_normal_approximation(evidence):
    values = [1.0] * 8 + [0.0] * 24  # a share of 0.25 over 32 problems
    low, high = evidence.bootstrap_interval(values)
    half_width = 1.96 * math.sqrt(0.25 * 0.75 / 32)
    assert low == pytest.approx(0.25 - half_width, abs=0.035) and high == pytest.approx(0.25 + half_width, abs=0.035)
    assert evidence.bootstrap_interval([0.5] * 10) == (0.5, 0.5)
    assert evidence.bootstrap_interval(values, seed=3) == evidence.bootstrap_interval(values, seed=3)


def test_the_paired_interval_sees_the_change_not_the_spread_between_problems(evidence):
    before = [float(j % 2) * 4 for j in range(32)]  # problems differ a lot
    assert evidence.paired_difference_interval(before, before) == (0.0, 0.0, 0.0)
    mean, low, high = evidence.paired_difference_interval(before, [b + 1 for b in before])
    assert (mean, low, high) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="differ in length"):
        evidence.paired_difference_interval([1.0], [1.0, 2.0])


def record(step, task_id, passed, total, reward, aux="", main=""):
    return {
        "step": step,
        "task_id": task_id,
        "reward": reward,
        "status": "finished",
        "passed": passed,
        "total": total,
        "detail": "",
        "program": "",
        "aux_completion": aux,
        "main_completion": main,
    }


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_tables_from_a_run_folder(evidence, tmp_path, capsys):
    log = tmp_path / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    main = "def has_close_elements(numbers, threshold):\n    return aux(numbers) < threshold\n"
    aux = "def aux(numbers):\n    return min(numbers)\n"
    rows = [record(0, "HumanEval/0", 0, 7, 1.0), record(0, "HumanEval/1", 0, 8, 0.0)]
    rows += [record(4, "HumanEval/0", 7, 7, 3.0, aux, main), record(4, "HumanEval/1", 0, 8, 1.0)]
    (log / "evaluation_programs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    replay = tmp_path / "preference_replay"
    replay.mkdir()
    pair = {"prompts": ["a", "b"], "winner_reward": -1.0, "loser_reward": -3.0}
    pair.update(target_raw_reward=1.0, comparator_raw_reward=3.0)
    (replay / "iteration_0001.json").write_text(json.dumps({"iteration": 1, "num_pairs": 1, "pairs": [pair]}))
    out = tmp_path / "evidence.md"
    evidence.main([str(tmp_path), "--markdown", str(out), "--items-per-round", "2", "--plot", str(tmp_path / "e.png")])
    text = out.read_text()
    assert "| 0 | 2 | 0.000 [0.000, 0.000] | 0.500 [0.000, 1.000] |" in text
    assert (
        "| 4 | 2 | 0.500 [0.000, 1.000] | 2.000 [1.000, 3.000] | 1.000 [1.000, 1.000] | 0.500 [0.000, 1.000] |" in text
    )
    assert "| after - before (paired) | | +0.500 [+0.000, +1.000] | +1.500 [+1.000, +2.000] |" in text
    assert "| 0 | 1 | 1 | 1 | 88% | 3.000 | 1.000 |" in text  # 1 pair of 2 items x 4 comparisons
    assert (tmp_path / "e.png").stat().st_size > 1000


def test_a_multi_turn_runs_final_answers_by_default_and_any_turns_on_request(evidence, tmp_path):
    log = tmp_path / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    rows = [dict(record(0, "HumanEval/0", 0, 7, 1.0), turn=1), dict(record(0, "HumanEval/0", 7, 7, 2.0), turn=2)]
    (log / "evaluation_programs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    final, first = evidence.evaluations(tmp_path, {}), evidence.evaluations(tmp_path, {}, turn=1)
    assert final[0]["HumanEval/0"]["pass_at_1"] == 1.0 and final[0]["HumanEval/0"]["code_reward_mean"] == 2.0
    assert first[0]["HumanEval/0"]["pass_at_1"] == 0.0 and first[0]["HumanEval/0"]["code_reward_mean"] == 1.0


def test_one_arm_against_another_is_paired_by_problem_at_the_first_and_last_evaluations(evidence):
    def outcomes(reward):
        return {"pass_at_1": float(reward == 4.0), "code_reward_mean": reward, "parse_rate": 1.0, "calls_aux_rate": 0.0}

    one = {0: {"A": outcomes(1.0), "B": outcomes(2.0)}, 6: {"A": outcomes(4.0), "B": outcomes(2.0)}}
    two = {0: {"A": outcomes(1.0), "B": outcomes(3.0), "C": outcomes(0.0)}, 6: {"A": outcomes(1.0), "B": outcomes(3.0)}}
    (first, at_first), (last, at_last) = evidence.against(one, two)
    assert (first, last) == ("first", "last")
    assert at_first["code_reward_mean"] == (-0.5, -1.0, 0.0)  # C is in one arm only: left out
    assert at_last["code_reward_mean"][0] == 1.0 and at_last["pass_at_1"][0] == 0.5


def write_log(run, rows, version="version_0"):
    log = run / "lightning_logs" / version
    log.mkdir(parents=True)
    path = log / "evaluation_programs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_newest_log_version_is_the_highest_number_not_the_last_name(evidence, tmp_path):
    for version, reward in (("version_9", 1.0), ("version_10", 3.0), ("version_2", 2.0)):
        write_log(tmp_path, [record(0, "HumanEval/0", 0, 7, reward)], version)
    assert evidence.evaluations(tmp_path, {})[0]["HumanEval/0"]["code_reward_mean"] == 3.0
    assert [evidence.version_order(Path(n))[0] for n in ("version_10", "version_x", "version_²")] == [10, -1, -1]


def test_one_evaluation_says_there_is_none_after_training_instead_of_a_change_of_zero(evidence, tmp_path):
    write_log(tmp_path, [record(0, "HumanEval/0", 7, 7, 3.0), record(0, "HumanEval/1", 0, 8, 1.0)])
    runs = [evidence.evaluations(tmp_path, {})]
    assert evidence.change(runs) is None
    text = evidence.markdown([], None, [])
    assert f"| after - before (paired) | | {evidence.NO_CHANGE} |" in text and "+0.000" not in text
    (only,) = evidence.against(runs[0], runs[0])  # an arm with one evaluation: no "last" that is its first
    assert only[0] == "first"


def test_runs_that_share_no_evaluation_step_are_named_not_an_index_error(evidence):
    outcome = {"pass_at_1": 1.0, "code_reward_mean": 4.0, "parse_rate": 1.0, "calls_aux_rate": 1.0}
    with pytest.raises(SystemExit, match=r"share no evaluation step \(steps logged: run 0: \[0\]; run 1: \[4\]\)"):
        evidence.change([{0: {"A": outcome}}, {4: {"A": outcome}}])


def test_a_linked_samples_file_or_log_folder_of_another_run_is_refused_by_name(evidence, tmp_path):
    other = write_log(tmp_path / "other", [record(0, "HumanEval/0", 7, 7, 4.0)])
    mine = tmp_path / "mine" / "lightning_logs" / "version_0"
    mine.mkdir(parents=True)
    (mine / "evaluation_programs.jsonl").symlink_to(other)
    with pytest.raises(SystemExit, match=r"mine/lightning_logs/version_0/evaluation_programs.jsonl: a symbolic link"):
        evidence.evaluations(tmp_path / "mine", {})
    (mine.parent / "version_1").symlink_to(other.parent, target_is_directory=True)  # a linked folder, not a file
    with pytest.raises(
        SystemExit, match=r"version_1/evaluation_programs.jsonl: resolves to .*, outside the run folder"
    ):
        evidence.evaluations(tmp_path / "mine", {})
    replay = tmp_path / "mine" / "preference_replay"
    replay.mkdir()
    (replay / "iteration_0001.json").symlink_to(other)
    with pytest.raises(SystemExit, match=r"iteration_0001.json: a symbolic link"):
        evidence.round_summary(tmp_path / "mine", 2, 4)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"step": 0, "task_id": "Hum', r"line 2: not a JSON record \(Unterminated string"),
        ("[" * 100_000 + "]" * 100_000, r"line 2: not a JSON record \(nested too deep\)"),
        ('{"step": ' + "9" * 5000 + "}", r"line 2: not a JSON record \(Exceeds the limit \(4300 digits\)"),
        (b"\xff\xfe", r"line 2: not a JSON record \('utf-8' codec can't decode"),
        ("[1, 2]", r"line 2: a JSON list, not a record"),
        (
            json.dumps({k: v for k, v in record(4, "A", 0, 7, 1.0).items() if k != "reward"}),
            r"line 2: no field 'reward'",
        ),
        (json.dumps(dict(record(4, "A", 0, 7, 1.0), passed="7")), r"line 2: field 'passed' is a str, not int"),
        (json.dumps(dict(record(4, "A", 0, 7, 1.0), turn=True)), r"line 2: field 'turn' is a bool, not int"),
    ],
    ids=["torn", "deep", "long-number", "not-utf8", "not-a-record", "missing", "mistyped", "bool-turn"],
)
def test_a_damaged_line_or_field_is_one_line_naming_the_file_line_and_field(evidence, tmp_path, line, message):
    path = write_log(tmp_path, [record(0, "A", 7, 7, 4.0)])
    with path.open("ab") as file:
        file.write(line if isinstance(line, bytes) else line.encode())
    with pytest.raises(SystemExit, match=f"^{path}: {message}"):
        evidence.evaluations(tmp_path, {})


def test_a_known_problems_record_needs_its_completions(evidence, tmp_path):
    path = write_log(tmp_path, [{k: v for k, v in record(0, "A", 7, 7, 4.0).items() if k != "main_completion"}])
    assert evidence.evaluations(tmp_path, {})  # an unknown problem: its parse share is read, not recomputed
    with pytest.raises(SystemExit, match=f"^{path}: line 1: no field 'main_completion'"):
        evidence.evaluations(tmp_path, {"A": {"task_id": "A"}})


def test_a_damaged_round_file_is_one_line_naming_it_and_the_pair(evidence, tmp_path):
    replay = tmp_path / "preference_replay"
    replay.mkdir()
    path = replay / "iteration_0001.json"
    path.write_text('{"iteration": 1, "pairs": [')
    with pytest.raises(SystemExit, match=rf"^{path}: not a JSON round file \(line 1: Expecting value\)"):
        evidence.round_summary(tmp_path, 2, 4)
    path.write_text(json.dumps({"iteration": 1, "pairs": [{"winner_reward": 1.0}]}))
    with pytest.raises(SystemExit, match=rf"^{path}: pair 0: no field 'loser_reward'"):
        evidence.round_summary(tmp_path, 2, 4)
    path.write_text(json.dumps({"iteration": "1", "pairs": []}))
    with pytest.raises(SystemExit, match=rf"^{path}: field 'iteration' is a str, not int"):
        evidence.round_summary(tmp_path, 2, 4)
