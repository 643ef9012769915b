"""The coding evaluation log: pass@1 and the other metrics, and the programs written beside the CSV log."""

from __future__ import annotations

import json

import pytest
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger

from comlrl_lightning import MADPOModule
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples, domain_metrics
from comlrl_lightning.tasks.coding import CodingEvaluationLog, CooperativeCodeReward
from tests.tasks.coding.test_reward import AUX, ITEM, MAIN_USES_AUX, FakeRunner, Report

SECOND = dict(ITEM, task_id="Test/1")


def samples() -> EvaluationSamples:
    record = EvaluationSamples()
    record.items = [ITEM, SECOND, ITEM]
    record.role_prompts = [["a", "m"]] * 3
    record.completions = [[AUX, MAIN_USES_AUX], [AUX, "def total(xs):\n    return sum(xs\n"], ["", "no code"]]
    record.rewards = [0.0, -3.0, -4.0]
    return record


def test_metrics_and_the_samples_file_beside_the_csv_log(tmp_path):
    trainer = Trainer(logger=CSVLogger(tmp_path), default_root_dir=tmp_path, accelerator="cpu", devices=1)
    module = MADPOModule()
    log = CodingEvaluationLog(sample_size=2, reward=CooperativeCodeReward(run_tests_batch=FakeRunner(2)))
    log.setup(trainer, module, "fit")
    assert module.evaluation_metrics is log
    metrics = domain_metrics(module.evaluation_metrics, samples())
    assert metrics == pytest.approx(
        {
            "eval/pass_at_1": 1 / 3,
            "eval/code_reward_mean": (4.0 + 1.0 + 0.0) / 3,
            "eval/parse_rate": 2 / 3,  # the empty pair still parses: imports alone
            "eval/calls_aux_rate": 1 / 3,
        }
    )
    domain_metrics(module.evaluation_metrics, samples())  # a second evaluation appends
    path = tmp_path / "lightning_logs" / "version_0" / "evaluation_programs.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["Test/0", "Test/1"] * 2
    assert records[0]["passed"] == records[0]["total"] == 2 and records[0]["reward"] == pytest.approx(4.0)
    assert (
        records[0]["program"].startswith("from typing import List") and records[0]["main_completion"] == MAIN_USES_AUX
    )
    assert records[1]["status"] == "not run" and records[1]["reward"] == pytest.approx(1.0)
    assert [(r["passed_all"], r["parses"], r["calls_aux"]) for r in records[:2]] == [
        (True, True, True),
        (False, False, False),
    ]


def test_a_users_own_evaluation_metrics_keep_being_logged(tmp_path):
    trainer = Trainer(logger=False, default_root_dir=tmp_path, accelerator="cpu", devices=1)
    module = MADPOModule()
    module.evaluation_metrics = lambda s: {"mine": len(s.items)}
    log = CodingEvaluationLog(sample_size=0, reward=CooperativeCodeReward(run_tests_batch=FakeRunner(0)))
    log.setup(trainer, module, "fit")
    metrics = domain_metrics(module.evaluation_metrics, samples())
    assert metrics["eval/mine"] == 3 and metrics["eval/pass_at_1"] == 0.0
    assert not list(tmp_path.rglob("evaluation_programs.jsonl"))


def test_a_negative_sample_size_is_refused():
    with pytest.raises(ConfigurationError, match="sample_size must be at least 0"):
        CodingEvaluationLog(sample_size=-1)


def test_a_multi_turn_evaluation_logs_the_answers_after_each_turn_and_says_each_records_turn(tmp_path):
    trainer = Trainer(logger=CSVLogger(tmp_path), default_root_dir=tmp_path, accelerator="cpu", devices=1)
    module = MADPOModule()
    log = CodingEvaluationLog(sample_size=2, reward=CooperativeCodeReward(run_tests_batch=FakeRunner(2)))
    log.setup(trainer, module, "fit")
    record = EvaluationSamples()
    task = type("Task", (), {"centralized": False, "agent_prompts": staticmethod(lambda item: ["a", "m"])})()
    broken = "def total(xs):\n    return sum(xs\n"
    # problem 0 repaired its code in turn 2; problem 1 ended after a first turn that passed
    record.add(task, [ITEM, SECOND], [[AUX, MAIN_USES_AUX], [AUX, MAIN_USES_AUX]], [0.0, 0.0], [[[AUX, broken]], []])
    metrics = domain_metrics(module.evaluation_metrics, record)
    assert metrics["eval/turn_1/pass_at_1"] == 0.5 and metrics["eval/turn_1/parse_rate"] == 0.5
    assert metrics["eval/turn_2/pass_at_1"] == metrics["eval/pass_at_1"] == 1.0
    path = tmp_path / "lightning_logs" / "version_0" / "evaluation_programs.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["turn"], r["task_id"], r["passed_all"]) for r in records] == [
        (1, "Test/0", False),
        (1, "Test/1", True),
        (2, "Test/0", True),
        (2, "Test/1", True),  # its turn-1 answer, kept
    ]
    assert list(records[0])[:2] == ["step", "task_id"] and records[0]["main_completion"] == broken


class SurrogateRunner(FakeRunner):
    """A report whose detail a program forged: a lone surrogate, a newline, a terminal escape."""

    def __call__(self, programs, items, timeout=10.0):
        return [Report(0, 2, "finished", "ValueError: \ud800\n2/2 tests passed\x1b[1A") for _ in programs]


def written_records(tmp_path, reward, completions, item=ITEM):
    trainer = Trainer(logger=CSVLogger(tmp_path), default_root_dir=tmp_path, accelerator="cpu", devices=1)
    module = MADPOModule()
    log = CodingEvaluationLog(sample_size=1, reward=reward)
    log.setup(trainer, module, "fit")
    record = EvaluationSamples()
    record.items, record.role_prompts, record.rewards = [item], [["a", "m"]], [0.0]
    record.completions = [completions]
    domain_metrics(module.evaluation_metrics, record)
    path = tmp_path / "lightning_logs" / "version_0" / "evaluation_programs.jsonl"
    return [json.loads(line) for line in path.read_bytes().decode("utf-8").splitlines()]


def test_a_record_with_lone_surrogates_is_written_as_valid_utf8_and_its_detail_as_one_line(tmp_path):
    item = dict(ITEM, task_id="Test/\ud800")
    aux = AUX + "\nsome prose \udcff"  # outside the code: the program still parses
    (record,) = written_records(
        tmp_path, CooperativeCodeReward(run_tests_batch=SurrogateRunner(0)), [aux, MAIN_USES_AUX], item
    )
    assert record["detail"] == "ValueError: \\ud800\\n2/2 tests passed\\x1b[1A"
    assert record["task_id"] == "Test/\ufffd" and record["aux_completion"].endswith("prose \ufffd")


@pytest.mark.slow
def test_a_real_programs_hostile_exception_message_is_written_as_one_valid_line(tmp_path):
    main = "def total(xs):\n    raise ValueError('\\ud800 bad\\n2/2 tests passed\\x1b[2K')\n    return aux(xs)\n"
    (record,) = written_records(tmp_path, CooperativeCodeReward(), [AUX, main])
    assert record["passed"] == 0 and record["total"] == 2 and record["detail"].isprintable()
    assert "the program raised ValueError: \\ud800 bad\\n2/2 tests passed\\x1b[2K" in record["detail"]
