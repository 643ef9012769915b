"""Evaluation seeds and names: the same weights evaluate alike from every entry point."""

from __future__ import annotations

import json

import pytest
from lightning.pytorch import Trainer

from comlrl_lightning import GenerationSettings, MADPOModule, PreferenceDataModule, TaskOptions, TeamOptions
from comlrl_lightning.callbacks.completions_writer import CompletionsWriter
from comlrl_lightning.defaults import TOY_EVAL_SEED, toy_items
from comlrl_lightning.modules.evaluation_runs import evaluation_stream, evaluation_stream_keys, stage_metric
from comlrl_lightning.runtime.rng import RandomStream


def test_the_stream_is_keyed_by_the_weights_updates_and_the_batch_only():
    assert evaluation_stream_keys(0, 0, 3) == ("eval", 0, 0, "before training", 3)  # the first numbers stand
    assert evaluation_stream_keys(8, 1, 3) == ("eval", 8, 1, 3)
    assert evaluation_stream(5, 8, 0, 2).seed == RandomStream.derive(5, "eval", 8, 0, 2).seed
    seeds = {evaluation_stream(0, updates, 0, batch).seed for updates in (0, 1, 2) for batch in (0, 1)}
    assert len(seeds) == 6  # other weights or another batch: other draws


def test_test_logs_the_evaluation_metrics_under_test():
    assert stage_metric("eval/turn_1/reward_mean", testing=True) == "test/turn_1/reward_mean"
    assert stage_metric("eval/turn_1/reward_mean", testing=False) == "eval/turn_1/reward_mean"
    assert stage_metric("train/loss", testing=True) == "train/loss"  # not an evaluation metric
    assert stage_metric("collect/eval/x", testing=True) == "collect/eval/x"


def _module(seed: int = 0) -> MADPOModule:
    sampling = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None)
    return MADPOModule(team=TeamOptions(agent_model="embedded"), sampling=sampling, seed=seed)


def _data() -> PreferenceDataModule:
    task = TaskOptions(train_dataset="embedded", eval_dataset=toy_items(4, TOY_EVAL_SEED))
    return PreferenceDataModule(task=task, eval_num_samples=4, eval_batch_size=2)


def _trainer(root, **options) -> Trainer:
    return Trainer(default_root_dir=str(root), enable_progress_bar=False, logger=False, **options)


def test_validate_test_and_predict_of_the_same_weights_give_the_same_numbers(tmp_path):
    module = _module()
    validated = _trainer(tmp_path).validate(module, _data(), verbose=False)[0]
    tested = _trainer(tmp_path).test(module, _data(), verbose=False)[0]
    assert set(tested) == {"test/turn_1/reward_mean", "test/turn_1/expected_return"}
    assert tested["test/turn_1/reward_mean"] == validated["eval/turn_1/reward_mean"]
    path = tmp_path / "out" / "completions.jsonl"
    _trainer(tmp_path, callbacks=[CompletionsWriter(str(path))]).predict(module, _data(), return_predictions=False)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["item"] for line in lines] == toy_items(4, TOY_EVAL_SEED)
    assert sum(line["reward"] for line in lines) / 4 == pytest.approx(tested["test/turn_1/reward_mean"], abs=1e-6)
    other = _trainer(tmp_path).test(_module(seed=1), _data(), verbose=False)[0]  # a negative control: other seeds
    assert other["test/turn_1/reward_mean"] != tested["test/turn_1/reward_mean"]


def test_untrained_weights_evaluate_with_the_streams_of_fits_evaluation_before_training(tmp_path):
    """What fit's evaluation before training has always drawn (the docs quote its numbers): batch
    ``b`` from ``(seed, "eval", 0, rank, "before training", b)``, whatever runs the evaluation."""
    module, data = _module(), _data()
    validated = _trainer(tmp_path).validate(module, data, verbose=False)[0]["eval/turn_1/reward_mean"]
    items = data.evaluation_items()
    rewards = []
    for batch in range(2):  # eval_batch_size 2
        stream = RandomStream.derive(0, "eval", 0, 0, "before training", batch)
        rewards += module.evaluate_items(items[2 * batch : 2 * batch + 2], data.task, stream)
    assert validated == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)


def test_outside_a_fit_the_weights_count_the_updates_of_the_checkpoint_loaded_last(tmp_path):
    module = _module()
    assert module.weights_updates == 0
    module.on_load_checkpoint({"global_step": 12})  # no trainer: the resume rule is not applied
    assert module.weights_updates == module.trained_updates == 12


@pytest.mark.slow  # trains
def test_the_seed_apis_evaluate_after_train_gives_fits_last_evaluation(tmp_path):
    from comlrl_lightning.trainers.configs import MADPOConfig
    from comlrl_lightning.trainers.preference import MADPOTrainer

    args = MADPOConfig(
        max_new_tokens=6, top_k=None, agent_learning_rate=3e-3, preference_num_candidates=4,
        preference_pairs_per_sample=4, eval_interval=3, eval_num_samples=4, eval_batch_size=2,
        train_batch_size=8, num_train_epochs=2,
    )  # fmt: skip
    trainer = MADPOTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path)})
    before = trainer.evaluate()["eval/turn_1/reward_mean"]
    trainer.train()
    assert before == pytest.approx(trainer.module.initial_eval_reward, abs=1e-6)
    after = trainer.evaluate()["eval/turn_1/reward_mean"]
    assert after == pytest.approx(trainer.module.final_eval_reward, abs=1e-6)
    assert after != pytest.approx(before, abs=1e-6)  # the weights changed, and so did the number
