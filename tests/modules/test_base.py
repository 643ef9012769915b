"""TeamModule under a plain ``Trainer()``: Lightning's defaults, no settings the modules rely on or change."""

from __future__ import annotations

import pytest
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import Logger

from comlrl_lightning import (
    GenerationSettings,
    IterativePreferenceDataModule,
    MADPOModule,
    PreferenceDataModule,
    TaskOptions,
    TeamOptions,
)


class WhatACallbackSees(Callback):
    """Records every sanity check and every evaluation a user's callback is shown."""

    def __init__(self) -> None:
        self.sanity_checks, self.evaluations, self.collected_before = 0, [], []

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self.sanity_checks += 1

    def on_validation_start(self, trainer, pl_module) -> None:
        # whether any pair was collected before this evaluation (a sanity check evaluates nothing)
        if not trainer.sanity_checking:
            self.collected_before.append(getattr(trainer.datamodule, "pairs", None) is not None)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        metric = trainer.callback_metrics.get("eval/turn_1/reward_mean")
        self.evaluations.append(
            (trainer.sanity_checking, trainer.global_step, None if metric is None else float(metric))
        )


def _module():
    sampling = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None)
    return MADPOModule(team=TeamOptions(agent_model="embedded"), sampling=sampling, agent_learning_rate=3e-3)


def _plain_trainer(root, callback, epochs):
    # Lightning's defaults but for the run's length, its folder and a quiet console
    return Trainer(max_epochs=epochs, default_root_dir=str(root), callbacks=[callback], enable_progress_bar=False)


TASK = TaskOptions(train_dataset="embedded", eval_dataset="embedded")
SIZES = dict(preference_num_candidates=4, preference_pairs_per_sample=4, train_batch_size=8, eval_num_samples=4)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_plain_trainer_shows_callbacks_one_evaluation_per_epoch_and_none_before_collection(tmp_path):
    seen = WhatACallbackSees()
    module, data = _module(), PreferenceDataModule(task=TASK, num_train_epochs=2, **SIZES, eval_batch_size=4)
    trainer = _plain_trainer(tmp_path, seen, epochs=2)
    trainer.fit(module, data)
    steps_per_epoch = trainer.global_step // 2
    # Lightning's default sanity check runs (the Trainer is the user's, unchanged) and evaluates nothing
    assert seen.sanity_checks == 1 and trainer.num_sanity_val_steps == 2
    assert seen.evaluations == [(True, 0, None)] + [(False, step, value) for _, step, value in seen.evaluations[1:]]
    assert [step for _, step, _ in seen.evaluations[1:]] == [steps_per_epoch, 2 * steps_per_epoch]
    assert all(value is not None for _, _, value in seen.evaluations[1:]) and all(seen.collected_before)
    assert len(seen.collected_before) == 2
    assert module.initial_eval_reward is not None  # the module's own evaluation before the first update


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_plain_trainer_runs_every_round_of_an_iterative_data_module(tmp_path):
    seen = WhatACallbackSees()
    data = IterativePreferenceDataModule(task=TASK, num_iterations=2, num_train_epochs=1, **SIZES, eval_batch_size=4)
    trainer = _plain_trainer(tmp_path, seen, epochs=data.total_epochs)
    trainer.fit(_module(), data)
    files = sorted(p.name for p in (tmp_path / "preference_replay").glob("iteration_*.json"))
    assert files == ["iteration_0001.json", "iteration_0002.json"]  # a round per epoch, without reload settings
    assert trainer.reload_dataloaders_every_n_epochs == 0  # the user's Trainer, unchanged
    assert seen.sanity_checks == 1 and [(sanity, value is None) for sanity, _, value in seen.evaluations] == [
        (True, True),  # Lightning's sanity check evaluates nothing
        (False, False),
        (False, False),
    ]


def test_validate_alone_evaluates_with_the_plain_defaults_too(tmp_path):
    data = PreferenceDataModule(task=TASK, **SIZES, eval_batch_size=4)
    results = Trainer(default_root_dir=str(tmp_path), enable_progress_bar=False, logger=False).validate(
        _module(), data, verbose=False
    )
    assert set(results[0]) >= {"eval/turn_1/reward_mean", "eval/turn_1/expected_return"}


class EvalRows(Logger):
    """Every row the loggers get, in order: ``(step, metrics)``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append((step, dict(metrics)))


class CountsValidations(WhatACallbackSees):
    """Also counts the validation runs, and notes the rows logged before the first update."""

    def __init__(self, logged: EvalRows) -> None:
        super().__init__()
        self.logged, self.validation_ends, self.rows_before_training = logged, 0, None

    def on_validation_end(self, trainer, pl_module) -> None:
        self.validation_ends += 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.rows_before_training is None:
            self.rows_before_training = list(self.logged.rows)


@pytest.mark.parametrize("iterative", [False, True], ids=["single-shot", "iterative"])
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_readme_snippet_under_a_plain_trainer_evaluates_once_before_training_and_never_in_a_sanity_check(
    iterative, tmp_path
):
    # README's "Your own task": Trainer(max_epochs=data.total_epochs), all else Lightning's defaults
    if iterative:
        data = IterativePreferenceDataModule(
            task=TASK, num_iterations=2, num_train_epochs=1, **SIZES, eval_batch_size=4
        )
    else:
        data = PreferenceDataModule(task=TASK, num_train_epochs=2, **SIZES, eval_batch_size=4)
    rows, module = EvalRows(), _module()
    seen = CountsValidations(rows)
    trainer = Trainer(
        max_epochs=data.total_epochs,
        default_root_dir=str(tmp_path),  # the snippet's only other setting here: round files stay in the test's folder
        logger=rows,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[seen],
    )
    trainer.fit(module, data)
    # one evaluation per epoch; Lightning's sanity check before them evaluates nothing
    assert seen.sanity_checks == 1 and seen.validation_ends == data.total_epochs + 1
    assert [value for sanity, _, value in seen.evaluations if sanity] == [None]
    assert all(seen.collected_before)  # no evaluation before the first collection
    evaluations = [(step, m["eval/turn_1/reward_mean"]) for step, m in rows.rows if "eval/turn_1/reward_mean" in m]
    before = [
        (step, m["eval/turn_1/reward_mean"]) for step, m in seen.rows_before_training if "eval/turn_1/reward_mean" in m
    ]
    assert before == [(0, module.initial_eval_reward)]  # the module's own, once, before the first update
    assert evaluations[-1] == (trainer.global_step - 1, module.final_eval_reward)
    # the evaluation after training is the validation that saw the final weights: one row at the last step
    assert [step for step, _ in evaluations].count(trainer.global_step - 1) == 1
