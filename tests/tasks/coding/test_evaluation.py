"""The coding evaluation log: pass@1 and the other metrics, and the programs written beside the CSV log."""

from __future__ import annotations

import functools
import json
from typing import List, Sequence

import pytest
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger

from comlrl_lightning import GenerationSettings, MADPOModule, PreferenceDataModule, TaskOptions, TeamOptions
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.generation.base import Completion, Generator
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples, domain_metrics
from comlrl_lightning.tasks.coding import CodingEvaluationLog, CooperativeCodeReward
from tests.tasks.coding.test_reward import AUX, ITEM, MAIN_USES_AUX, FakeRunner, Report

SECOND = dict(ITEM, task_id="Test/1")


def reported(record: EvaluationSamples, reward: CooperativeCodeReward) -> EvaluationSamples:
    """``record`` with the reports ``reward`` makes of each turn's answers, as an evaluation keeps them."""
    turns = [record.turns_of(role) for role in range(2)]
    record.reports = [
        reward.reported(aux, main, batch_items=[item] * len(aux))
        for aux, main, item in zip(turns[0], turns[1], record.items)
    ]
    return record


def samples(reward: CooperativeCodeReward) -> EvaluationSamples:
    record = EvaluationSamples()
    record.items = [ITEM, SECOND, ITEM]
    record.role_prompts = [["a", "m"]] * 3
    record.completions = [[AUX, MAIN_USES_AUX], [AUX, "def total(xs):\n    return sum(xs\n"], ["", "no code"]]
    record.rewards = [0.0, -3.0, -4.0]
    return reported(record, reward)


def observed(log: CodingEvaluationLog, trainer: Trainer, record: EvaluationSamples):
    """What the team module logs of ``log``'s metrics for ``record``."""
    return domain_metrics(functools.partial(log.on_evaluation_samples, trainer, MADPOModule()), record)


def test_metrics_and_the_samples_file_beside_the_csv_log(tmp_path):
    trainer = Trainer(logger=CSVLogger(tmp_path), default_root_dir=tmp_path, accelerator="cpu", devices=1)
    log = CodingEvaluationLog(sample_size=2)
    reward = CooperativeCodeReward(run_tests_batch=FakeRunner(2))
    metrics = observed(log, trainer, samples(reward))
    assert metrics == pytest.approx(
        {
            "eval/pass_at_1": 1 / 3,
            "eval/code_reward_mean": (4.0 + 1.0 + 0.0) / 3,
            "eval/parse_rate": 2 / 3,  # the empty pair still parses: imports alone
            "eval/calls_aux_rate": 1 / 3,
        }
    )
    observed(log, trainer, samples(reward))  # a second evaluation appends
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


def test_the_log_reads_the_reports_and_runs_no_test_itself(tmp_path):
    trainer = Trainer(logger=False, default_root_dir=tmp_path, accelerator="cpu", devices=1)
    runner = FakeRunner(2)
    record = samples(CooperativeCodeReward(run_tests_batch=runner))
    ran = len(runner.calls)
    metrics = observed(CodingEvaluationLog(sample_size=0), trainer, record)
    assert len(runner.calls) == ran and metrics["eval/pass_at_1"] == pytest.approx(1 / 3)
    assert not list(tmp_path.rglob("evaluation_programs.jsonl"))


def test_without_reports_and_without_the_coding_reward_one_line_says_what_is_needed(tmp_path):
    trainer = Trainer(logger=False, default_root_dir=tmp_path, accelerator="cpu", devices=1)
    record = samples(CooperativeCodeReward(run_tests_batch=FakeRunner(2)))
    record.reports = []  # a centralized team's evaluation keeps none
    with pytest.raises(ConfigurationError, match="needs the coding task's reward_func"):
        observed(CodingEvaluationLog(sample_size=0), trainer, record)


def test_a_negative_sample_size_is_refused():
    with pytest.raises(ConfigurationError, match="sample_size must be at least 0"):
        CodingEvaluationLog(sample_size=-1)


def test_a_multi_turn_evaluation_logs_the_answers_after_each_turn_and_says_each_records_turn(tmp_path):
    trainer = Trainer(logger=CSVLogger(tmp_path), default_root_dir=tmp_path, accelerator="cpu", devices=1)
    log = CodingEvaluationLog(sample_size=2)
    record = EvaluationSamples()
    task = type("Task", (), {"centralized": False, "agent_prompts": staticmethod(lambda item: ["a", "m"])})()
    broken = "def total(xs):\n    return sum(xs\n"
    # problem 0 repaired its code in turn 2; problem 1 ended after a first turn that passed
    record.add(task, [ITEM, SECOND], [[AUX, MAIN_USES_AUX], [AUX, MAIN_USES_AUX]], [0.0, 0.0], [[[AUX, broken]], []])
    metrics = observed(log, trainer, reported(record, CooperativeCodeReward(run_tests_batch=FakeRunner(2))))
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
    record = EvaluationSamples()
    record.items, record.role_prompts, record.rewards = [item], [["a", "m"]], [0.0]
    record.completions = [completions]
    observed(CodingEvaluationLog(sample_size=1), trainer, reported(record, reward))
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


class Scripted(Generator):
    """Agent 0 writes ``AUX``, agent 1 ``MAIN_USES_AUX``, whatever the prompt (a program that reaches the tests)."""

    def generate(self, team, agent_index, prompts, num_samples, settings, stream=None) -> List[List[Completion]]:
        text = [AUX, MAIN_USES_AUX][agent_index]
        return [[Completion(ids=[1], text=text) for _ in range(num_samples)] for _ in prompts]


class CountingRunner(FakeRunner):
    """Records every program it tests and the timeout it was given."""

    def __call__(self, programs: Sequence[str], items, timeout: float = 10.0) -> List:
        return super().__call__(programs, items, timeout)


def validated_with_coding_log(module, data, root) -> dict:
    """The metrics of one validation of ``module`` on ``data`` with the coding evaluation's log observing."""
    trainer = Trainer(
        logger=False, default_root_dir=root, callbacks=[CodingEvaluationLog(sample_size=0)], enable_progress_bar=False
    )
    return trainer.validate(module, data, verbose=False)[0]


def test_an_evaluation_tests_each_program_once_under_the_configured_timeout(tmp_path):
    runner = CountingRunner(1)
    reward = CooperativeCodeReward(timeout=3.5, run_tests_batch=runner)
    held_out = [dict(ITEM, task_id=f"Test/{k}") for k in range(3)]
    task = TaskOptions(
        train_dataset=[ITEM], eval_dataset=held_out, formatters=["{prompt}", "{prompt}"], reward_func=reward
    )
    data = PreferenceDataModule(task=task, eval_num_samples=3, eval_batch_size=2)
    module = MADPOModule(
        team=TeamOptions(agent_model="embedded"), generator=Scripted(), sampling=GenerationSettings(max_new_tokens=4)
    )
    metrics = validated_with_coding_log(module, data, tmp_path)
    tested = [item["task_id"] for _, items, _ in runner.calls for item in items]
    assert sorted(tested) == ["Test/0", "Test/1", "Test/2"]  # each held-out program once, not again by the log
    assert {timeout for _, _, timeout in runner.calls} == {3.5}
    assert metrics["eval/pass_at_1"] == 0.0 and metrics["eval/code_reward_mean"] == pytest.approx(3.5)


class Repairing(Scripted):
    """Agent 1 first writes a thin wrapper around ``aux``, then, told its score, ``MAIN_USES_AUX``."""

    def generate(self, team, agent_index, prompts, num_samples, settings, stream=None) -> List[List[Completion]]:
        wrapper = "```python\ndef total(xs):\n    return aux(xs)\n```"
        texts = [[AUX, MAIN_USES_AUX if "scored" in prompt else wrapper][agent_index] for prompt in prompts]
        return [[Completion(ids=[1], text=text) for _ in range(num_samples)] for text in texts]


def test_a_two_turn_evaluation_tests_each_turns_program_once_and_logs_each_turns_metrics(tmp_path):
    from comlrl_lightning.tasks.turns import Turns

    runner = CountingRunner(1)
    turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.reward_feedback")
    held_out = [dict(ITEM, task_id=f"Test/{k}") for k in range(3)]
    reward = CooperativeCodeReward(timeout=2.5, run_tests_batch=runner)
    task = TaskOptions(
        train_dataset=[ITEM],
        eval_dataset=held_out,
        formatters=["{prompt}", "{prompt}"],
        reward_func=reward,
        turns=turns,
    )
    data = PreferenceDataModule(task=task, eval_num_samples=3, eval_batch_size=3)
    module = MADPOModule(
        team=TeamOptions(agent_model="embedded"), generator=Repairing(), sampling=GenerationSettings(max_new_tokens=4)
    )
    metrics = validated_with_coding_log(module, data, tmp_path)
    tested = sorted(item["task_id"] for _, items, _ in runner.calls for item in items)
    assert tested == sorted(["Test/0", "Test/1", "Test/2"] * 2)  # each turn's program once
    assert {timeout for _, _, timeout in runner.calls} == {2.5}
    assert metrics["eval/turn_1/code_reward_mean"] == pytest.approx(2.5)  # the thin wrapper: no +1.0
    assert metrics["eval/turn_2/code_reward_mean"] == metrics["eval/code_reward_mean"] == pytest.approx(3.5)
