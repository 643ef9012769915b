"""The reference's eval_logger + eval_aggregator and metrics_callback: their arguments, routing, and logs."""

from __future__ import annotations

import csv

import pytest

from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples, RolloutSamples
from comlrl_lightning.trainers.configs import MADPOConfig
from comlrl_lightning.trainers.eval_callbacks import EvalLoggerMetrics, ReferenceCallbacks, RolloutMetrics
from comlrl_lightning.trainers.preference import MADPOTrainer
from comlrl_lightning.validation import OptionError

SAMPLES = EvaluationSamples(
    items=[{"prompt": "sun"}, {"prompt": "moon"}],
    role_prompts=[["w sun", "m sun"], ["w moon", "m moon"]],
    completions=[["a", "bb"], ["ccc", "d"]],
    rewards=[0.5, 1.0],
)


def test_eval_logger_gets_completions_per_agent_per_item_per_turn():
    seen = {}

    def eval_logger(agent_completions_turns, batch_items, prompts):
        seen.update(turns=agent_completions_turns, items=batch_items, prompts=prompts)
        return [{"n": 1.0}, {"n": 3.0}]

    metrics = EvalLoggerMetrics(eval_logger, lambda m, num_turns: {"mean": sum(x["n"] for x in m) / len(m)})(SAMPLES)
    assert seen["turns"] == [[["a"], ["ccc"]], [["bb"], ["d"]]] and seen["prompts"] == ["sun", "moon"]
    assert metrics == {"mean": 2.0}


def test_eval_logger_gets_every_turn_of_a_multi_turn_evaluation_and_the_number_of_turns():
    seen = {}

    def eval_logger(agent_completions_turns, batch_items, prompts):
        seen.update(turns=agent_completions_turns)
        return [{"n": 1.0}]

    samples = EvaluationSamples()
    task = type("Task", (), {"centralized": False, "agent_prompts": staticmethod(lambda item: ["w", "m"])})()
    # item 0 had two turns, item 1 stopped after its first
    samples.add(
        task, [{"prompt": "sun"}, {"prompt": "moon"}], [["a2", "b2"], ["c", "d"]], [0.5, 1.0], [[["a", "b"]], []]
    )
    aggregated = {}
    EvalLoggerMetrics(eval_logger, lambda m, num_turns: aggregated.update(num_turns=num_turns) or {})(samples)
    assert seen["turns"] == [[["a", "a2"], ["c"]], [["b", "b2"], ["d"]]] and aggregated == {"num_turns": 2}
    assert samples.merged(1).earlier_turns == [[["a", "b"]], []]


def test_metrics_callback_is_averaged_over_items_and_skips_non_numbers():
    calls = []

    def callback(rollouts):
        calls.append([(r.agent_idx, r.completion, float(r.reward)) for r in rollouts])
        return {"chars": sum(len(r.completion) for r in rollouts), "note": "text"}

    assert RolloutMetrics(callback)(SAMPLES) == {"chars": 3.5}
    assert calls == [[(0, "a", 0.5), (1, "bb", 0.5)], [(0, "ccc", 1.0), (1, "d", 1.0)]]
    update = RolloutSamples(
        [{"prompt": "x"}], [["w", "m"]], [[["a", "b"], ["c", "d"]]], [[1.0, 0.0]], [[[1, 0], [1, 0]]]
    )
    calls.clear()
    RolloutMetrics(callback)(update)
    assert [(agent, text) for agent, text, _ in calls[0]] == [(0, "a"), (0, "b"), (1, "c"), (1, "d")]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(eval_logger=lambda **k: []), "eval_logger needs eval_aggregator too"),
        (dict(eval_aggregator=lambda m, num_turns: {}), "eval_aggregator needs eval_logger too"),
        (dict(metrics_callback="nope"), "metrics_callback must be a callable."),
    ],
)
def test_incomplete_or_wrong_callbacks_are_refused(arguments, message):
    with pytest.raises(OptionError, match=message):
        ReferenceCallbacks(**arguments)


def test_training_evaluations_log_the_aggregated_metrics_under_eval(tmp_path):
    def eval_logger(agent_completions_turns, batch_items, prompts):
        return [{"length": float(len(agent_completions_turns[0][k][0]))} for k in range(len(prompts))]

    trainer = MADPOTrainer(
        agent_model="embedded",
        eval_logger=eval_logger,
        eval_aggregator=lambda metrics, num_turns: {"turn_1/length": sum(m["length"] for m in metrics)},
        wandb_config={"output_dir": str(tmp_path)},
        args=MADPOConfig(
            num_train_epochs=1,
            max_new_tokens=4,
            preference_num_candidates=2,
            preference_pairs_per_sample=1,
            train_batch_size=8,
            eval_interval=1,
            eval_num_samples=2,
            eval_batch_size=2,
        ),
    )
    trainer.train()
    rows = list(csv.DictReader((tmp_path / "lightning_logs" / "version_0" / "metrics.csv").open()))
    logged = [row["eval/turn_1/length"] for row in rows if row.get("eval/turn_1/length")]
    assert logged and all(float(value) >= 0 for value in logged)
    metrics = trainer.evaluate()  # logged to the run's log too, and returned as logged
    rows = list(csv.DictReader((tmp_path / "lightning_logs" / "version_0" / "metrics.csv").open()))
    last = [row for row in rows if row.get("eval/turn_1/length")][-1]
    assert float(last["eval/turn_1/length"]) == pytest.approx(metrics["eval/turn_1/length"])
    assert float(last["eval/turn_1/reward_mean"]) == pytest.approx(metrics["eval/turn_1/reward_mean"])


def test_evaluating_a_number_of_items_is_an_argument_the_data_module_is_never_changed():
    from comlrl_lightning import PreferenceDataModule
    from comlrl_lightning.trainers.eval_callbacks import evaluation_data

    data = PreferenceDataModule(eval_num_samples=4)
    counted = evaluation_data(data, 2)
    assert counted is not data and counted.eval_num_samples == 2 and data.eval_num_samples == 4
    assert evaluation_data(data, None) is data
    with pytest.raises(OptionError, match="num_eval_samples"):
        evaluation_data(data, -1)
