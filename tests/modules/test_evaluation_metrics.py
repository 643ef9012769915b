"""Domain metrics of evaluations and updates: the samples recorded, the numbers checked and prefixed."""

from __future__ import annotations

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.modules.evaluation_metrics import EvaluationSamples, RolloutSamples, domain_metrics
from comlrl_lightning.tasks.task import Task

TASK = Task(["w {prompt}", "m {prompt}"], reward_func=lambda a, b: [0.0], num_agents=2)


def test_evaluation_samples_record_each_roles_prompt_completion_and_reward():
    samples = EvaluationSamples()
    samples.add(TASK, [{"prompt": "sun"}, {"prompt": "moon"}], [["a", "b"], ["c", "d"]], [0.5, 1.0])
    assert samples.role_prompts == [["w sun", "m sun"], ["w moon", "m moon"]]
    assert samples.completions == [["a", "b"], ["c", "d"]] and samples.rewards == [0.5, 1.0]
    assert samples.merged(world=1).items == samples.items


def test_evaluation_samples_keep_each_turns_reward_and_how_many_turns_the_task_has():
    from types import SimpleNamespace

    from comlrl_lightning.tasks.turns import Turns

    one = EvaluationSamples()
    one.add(TASK, [{"prompt": "sun"}], [["a", "b"]], [0.5])
    assert one.turn_rewards == [[0.5]] and one.num_turns == 1
    two_turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.reward_feedback")
    task = Task(["w {prompt}", "m {prompt}"], reward_func=lambda a, b: [0.0], num_agents=2, turns=two_turns)
    two = EvaluationSamples()  # every trajectory stopped after turn 1: still a two-turn evaluation
    two.add(task, [{"prompt": "sun"}], [["a", "b"]], [0.25], earlier_turns=[[]], turn_rewards=[[0.25]])
    assert two.num_turns == 2 and two.merged(world=1).turn_rewards == [[0.25]] and two.merged(world=1).num_turns == 2
    own = SimpleNamespace(centralized=False, agent_prompts=lambda item: ["w", "m"])  # a task that names no turns
    three = EvaluationSamples()
    three.add(own, [{"prompt": "sun"}], [["a3", "b3"]], [1.0], [[["a1", "b1"], ["a2", "b2"]]], [[0.0, 0.5, 1.0]])
    assert three.num_turns == 3 and three.turns_of(0) == [["a1", "a2", "a3"]]


def test_update_rollouts_keep_generations_per_role_and_each_roles_return():
    rollouts = RolloutSamples.of_update(
        TASK,
        [{"prompt": "sun"}],
        texts=[[["a0", "a1"]], [["b0", "b1"]]],
        rewards=[[1.0, 0.0]],
        returns=[[[0.9, -0.1]], [[0.8, -0.2]]],
    )
    assert rollouts.completions == [[["a0", "a1"], ["b0", "b1"]]]
    assert rollouts.rewards == [[1.0, 0.0]] and rollouts.returns == [[[0.9, -0.1], [0.8, -0.2]]]


def test_an_evaluation_is_one_joint_sample_per_item_as_rollouts():
    samples = EvaluationSamples([{"prompt": "x"}], [["w x", "m x"]], [["a", "b"]], [0.25])
    rollouts = RolloutSamples.of_evaluation(samples)
    assert rollouts.completions == [[["a"], ["b"]]] and rollouts.returns == [[[0.25], [0.25]]]


def test_metrics_are_prefixed_and_a_non_number_is_named():
    samples = EvaluationSamples([{"prompt": "x"}], [["w", "m"]], [["a", "b"]], [0.0])
    assert domain_metrics(lambda s: {"turn_1/n": 2}, samples) == {"eval/turn_1/n": 2.0}
    assert domain_metrics(lambda s: {"n": 2}, samples, prefix="") == {"n": 2.0}
    assert domain_metrics(lambda s: {"n": 2}, EvaluationSamples()) == {}
    with pytest.raises(DataError, match="evaluation metric 'bad' is not a number"):
        domain_metrics(lambda s: {"bad": "x"}, samples)
    with pytest.raises(DataError, match="evaluation metric 'inf' is not finite"):
        domain_metrics(lambda s: {"inf": float("inf")}, samples)


def test_metric_states_made_in_inference_mode_become_ordinary_with_their_values():
    import torch
    from torchmetrics import CatMetric, MeanMetric

    from comlrl_lightning.modules.evaluation_metrics import renew_inference_states

    holder = torch.nn.ModuleDict({"mean": MeanMetric(), "cat": CatMetric()})
    with torch.inference_mode():  # as Lightning's validate: states reset (remade) in inference mode, then updated
        for metric in holder.values():
            metric.reset()
        holder["mean"].update(torch.tensor([1.0, 3.0]))
        holder["cat"].update(torch.tensor([2.0]))
    assert holder["mean"].mean_value.is_inference()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        holder["mean"].mean_value.add_(0.0)  # what the next update would do
    renew_inference_states(holder)
    assert not holder["mean"].mean_value.is_inference() and not holder["cat"].value[0].is_inference()
    holder["mean"].update(torch.tensor([5.0]))  # outside inference mode, as fit's validation runs
    holder["cat"].update(torch.tensor([4.0]))
    assert float(holder["mean"].compute()) == 3.0 and holder["cat"].compute().tolist() == [2.0, 4.0]


def test_every_evaluation_observer_on_the_trainer_gets_the_samples_and_names_its_metrics(tmp_path):
    from lightning.pytorch import Callback, Trainer

    from comlrl_lightning import MADPOModule, PreferenceDataModule, TaskOptions, TeamOptions
    from comlrl_lightning.defaults import TOY_EVAL_SEED, toy_items
    from comlrl_lightning.modules.evaluation_metrics import EvaluationMetricsCallback, EvaluationObserver

    seen = []

    class Counting(EvaluationObserver):
        def on_evaluation_samples(self, trainer, pl_module, samples):
            seen.append((trainer, pl_module, len(samples.items)))
            return {"items": len(samples.items)}

    module = MADPOModule(team=TeamOptions(agent_model="embedded"))
    data = PreferenceDataModule(
        task=TaskOptions(train_dataset="embedded", eval_dataset=toy_items(3, TOY_EVAL_SEED)), eval_num_samples=3
    )
    callbacks = [Counting(), EvaluationMetricsCallback(lambda s: {"mean": sum(s.rewards) / len(s.rewards)}), Callback()]
    trainer = Trainer(default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False, callbacks=callbacks)
    metrics = trainer.validate(module, data, verbose=False)[0]
    assert seen == [(trainer, module, 3)] and metrics["eval/items"] == 3.0  # once, with every item
    assert metrics["eval/mean"] == pytest.approx(metrics["eval/turn_1/reward_mean"], abs=1e-6)
    assert module.evaluated_samples is not None and len(module.evaluated_samples.items) == 3
