"""The resume rule: which options a resume refuses, which it lists, and learning rates on a restored optimizer."""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning.checkpoints.resume_rule import (
    NOT_GIVEN,
    TEAM_KEY,
    apply_resume_rule,
    changes_text,
    flat_options,
    is_fixed,
    option_changes,
    resume_changes,
    saved_options,
    set_learning_rates,
    use_learning_rates,
)
from comlrl_lightning.datamodules.iterative import IterativePreferenceDataModule
from comlrl_lightning.datamodules.preference import PreferenceDataModule
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.modules import MADPOModule, MARLHFModule
from comlrl_lightning.tasks.task import TaskOptions
from comlrl_lightning.team.options import TeamOptions


def saved_by(module, datamodule) -> dict:
    """What a checkpoint of ``module`` and ``datamodule`` records about their options."""
    checkpoint = {
        "hyper_parameters": dict(module.hparams),
        "datamodule_hyper_parameters": dict(datamodule.hparams),
        "callbacks": {"comlrl_lightning.data": datamodule.data_state_dict()},
    }
    module.on_save_checkpoint(checkpoint)
    return checkpoint


def test_options_compare_by_name_with_both_values_and_a_side_that_lacks_one():
    saved = flat_options({"a": {"b": 1, "c": [1, 2]}, "extra": None, "gone": 3})
    given = flat_options({"a": {"b": 1.0, "c": (1, 2)}, "extra": {"min_p": 0.1}, "new": "x"})
    assert saved == {"a.b": 1, "a.c": [1, 2], "extra": None, "gone": 3}
    changes = option_changes(saved, given)
    # 1 and 1.0, a list and a tuple of the same items are the same; a null that became a mapping is its entries
    assert changes == [("extra.min_p", NOT_GIVEN, 0.1), ("gone", 3, NOT_GIVEN), ("new", NOT_GIVEN, "x")]
    assert changes_text(changes) == "extra.min_p: (not given) -> 0.1, gone: 3 -> (not given), new: (not given) -> 'x'"
    assert option_changes({"flag": True}, {"flag": 1}) == [("flag", True, 1)]  # true is not the number 1


def test_what_a_resume_cannot_change_is_fixed_and_everything_else_is_not():
    for name in ("model.class", "model.team.agent_model", "model.team.num_agents", "model.team.lora.r", "data.kind"):
        assert is_fixed(name)
    for name in ("model.agent_learning_rate", "model.sampling.temperature", "data.train_batch_size", "model.seed"):
        assert not is_fixed(name)
    assert is_fixed("data.num_train_epochs", "iterative") and not is_fixed("data.num_train_epochs", "preference")


def test_a_resume_lists_every_changed_option_of_the_module_and_the_data_module():
    checkpoint = saved_by(MADPOModule(), IterativePreferenceDataModule(num_iterations=2))
    module = MADPOModule(agent_learning_rate=[1e-5, 2e-5], sampling=GenerationSettings(temperature=0.9))
    changes = resume_changes(checkpoint, module, IterativePreferenceDataModule(num_iterations=3), "x.ckpt")
    assert changes == [
        ("model.agent_learning_rate", 5e-6, [1e-5, 2e-5]),
        ("model.sampling.temperature", 0.6, 0.9),
        ("data.num_iterations", 2, 3),
    ]
    assert resume_changes(checkpoint, MADPOModule(), IterativePreferenceDataModule(num_iterations=2), "x") == []


@pytest.mark.parametrize(
    "module, datamodule, named",
    [
        (lambda: MADPOModule(team=TeamOptions(num_agents=3)), PreferenceDataModule, "model.team.num_agents (None -> 3"),
        (
            lambda: MADPOModule(team=TeamOptions(agent_model="org/other")),
            PreferenceDataModule,
            "'embedded' -> 'org/other'",
        ),
        (MARLHFModule, PreferenceDataModule, "model.class: 'MADPOModule' -> 'MARLHFModule'"),
        (MADPOModule, IterativePreferenceDataModule, "data.kind: 'preference' -> 'iterative'"),
    ],
)
def test_a_resume_that_changes_what_the_state_means_is_refused_naming_the_option_and_both_values(
    module, datamodule, named
):
    checkpoint = saved_by(MADPOModule(), PreferenceDataModule())
    with pytest.raises(ConfigurationError, match="cannot resume x.ckpt with other") as caught:
        resume_changes(checkpoint, module(), datamodule(), "x.ckpt")
    message = str(caught.value)
    assert named.split(" (")[0] in message and (named.split(" (")[-1] in message) and "\n" not in message


def test_with_held_out_items_the_options_that_choose_them_are_fixed_and_otherwise_listed():
    def data(**task):
        return PreferenceDataModule(task=TaskOptions(train_dataset="embedded", **task))

    held_out = saved_by(MADPOModule(), data(eval_dataset="held_out", held_out_size=2))
    for given, named in [
        (data(eval_dataset="held_out", held_out_size=3), "data.task.held_out_size: 2 -> 3"),
        (data(eval_dataset="held_out", held_out_size=2, held_out_seed=1), "data.task.held_out_seed: 0 -> 1"),
        (data(eval_dataset=None, held_out_size=2), "data.task.eval_dataset: 'held_out' -> None"),
        (data(eval_dataset="held_out", held_out_size=2, dataset_split="test"), "data.task.dataset_split"),
    ]:
        with pytest.raises(ConfigurationError, match="cannot resume x with other") as caught:
            resume_changes(held_out, MADPOModule(), given, "x")
        assert named in str(caught.value)
    # from a run that held nothing out to one that does: the training items change too
    with pytest.raises(ConfigurationError, match="data.task.eval_dataset: None -> 'held_out'"):
        resume_changes(
            saved_by(MADPOModule(), data(eval_dataset=None)), MADPOModule(), data(eval_dataset="held_out"), "x"
        )
    # no held-out items on either side: the evaluation set and the unused draw options may change
    plain = saved_by(MADPOModule(), data(eval_dataset="embedded"))
    assert resume_changes(plain, MADPOModule(), data(eval_dataset=None, held_out_size=3), "x") == [
        ("data.task.eval_dataset", "embedded", None),
        ("data.task.held_out_size", 0.1, 3),
    ]
    assert is_fixed("data.task.held_out_seed", held_out=True) and not is_fixed("data.task.held_out_seed")


def test_a_checkpoint_without_recorded_options_is_compared_on_what_it_records():
    checkpoint = saved_by(MADPOModule(), PreferenceDataModule())
    del checkpoint["datamodule_hyper_parameters"], checkpoint[TEAM_KEY]
    assert resume_changes(checkpoint, MADPOModule(), PreferenceDataModule(train_batch_size=7), "x") == []


def test_a_restored_optimizer_gets_the_new_rates_and_a_schedule_continues_from_its_point_with_the_new_base():
    weights = [torch.nn.Parameter(torch.zeros(1)) for _ in range(3)]
    groups = [{"params": [w], "lr": 1.0, "name": f"agent_{i}"} for i, w in enumerate(weights[:2])]
    plain = torch.optim.SGD(groups + [{"params": [weights[2]], "lr": 1.0}])
    changed = set_learning_rates([plain], [], {"agent_0": 0.5, "agent_1": 1.0})
    assert changed == [("agent_0", 1.0, 0.5)] and [g["lr"] for g in plain.param_groups] == [0.5, 1.0, 1.0]

    scheduled = torch.optim.SGD([{"params": [weights[0]], "lr": 0.2, "name": "agent_0"}])
    scheduler = torch.optim.lr_scheduler.LinearLR(scheduled, start_factor=1.0, end_factor=0.5, total_iters=4)
    scheduled.step()
    scheduler.step()  # a quarter of the way: 0.2 * 0.875
    set_learning_rates([scheduled], [scheduler], {"agent_0": 0.4})
    assert scheduled.param_groups[0]["lr"] == pytest.approx(0.4 * 0.875)
    assert scheduler.base_lrs == [0.4] and scheduled.param_groups[0]["initial_lr"] == 0.4
    scheduled.step()
    scheduler.step()
    assert scheduled.param_groups[0]["lr"] == pytest.approx(0.4 * 0.75)  # the schedule goes on with the new base


def test_a_null_option_that_is_gone_a_longer_list_and_a_long_value_are_each_shown():
    assert option_changes({"x": None}, {}) == [("x", None, NOT_GIVEN)]  # no entries below it: listed itself
    assert option_changes({"a": [1, 2]}, {"a": [1, 2, 3]}) == [("a", [1, 2], [1, 2, 3])]
    fits, too_long = "x" * 78, "x" * 79  # their reprs are 80 and 81 characters
    assert changes_text([("a", fits, too_long)]) == f"a: {fits!r} -> {repr(too_long)[:77]}..."


def test_a_checkpoint_that_records_only_its_data_kind_is_refused_another_kind_and_compared_without_a_datamodule():
    checkpoint = saved_by(MADPOModule(), PreferenceDataModule())
    del checkpoint["datamodule_hyper_parameters"]
    with pytest.raises(ConfigurationError, match="data.kind: 'preference' -> 'iterative'"):
        resume_changes(checkpoint, MADPOModule(), IterativePreferenceDataModule(), "x")
    assert resume_changes(checkpoint, MADPOModule(), None, "x") == []  # no data module: its side is not compared
    assert saved_options({}) == ({}, {})


def test_apply_resume_rule_returns_the_changes_and_marks_the_module_checked():
    checkpoint = saved_by(MADPOModule(), PreferenceDataModule())
    module = MADPOModule(sampling=GenerationSettings(temperature=0.9))
    assert module.resume_checked is False
    assert apply_resume_rule(checkpoint, module, PreferenceDataModule(), "x") == [
        ("model.sampling.temperature", 0.6, 0.9)
    ]
    assert module.resume_checked is True


def test_a_scheduler_of_another_optimizer_keeps_its_base_rate():
    weights = [torch.nn.Parameter(torch.zeros(1)) for _ in range(2)]
    first = torch.optim.SGD([{"params": [weights[0]], "lr": 0.2, "name": "agent_0"}])
    second = torch.optim.SGD([{"params": [weights[1]], "lr": 0.3, "name": "agent_1"}])
    schedulers = [torch.optim.lr_scheduler.LinearLR(o, start_factor=1.0, total_iters=4) for o in (first, second)]
    assert set_learning_rates([first, second], schedulers, {"agent_0": 0.4}) == [("agent_0", 0.2, 0.4)]
    assert schedulers[0].base_lrs == [0.4] and schedulers[1].base_lrs == [0.3]


class RestoredModule:
    """What :func:`use_learning_rates` reads of a module whose optimizer a resume restored: its
    Trainer's optimizers and scheduler configs, and the module's own parameter groups."""

    resume_checked = True

    def __init__(self, optimizer, scheduler) -> None:
        from lightning.pytorch.utilities.types import LRSchedulerConfig

        self.trainer = type("Trainer", (), {})()
        self.trainer.optimizers, self.trainer.lr_scheduler_configs = [optimizer], [LRSchedulerConfig(scheduler)]

    def parameter_groups(self):
        return [{"params": [], "lr": 0.5, "name": "agent_0"}, {"params": [], "lr": 0.9}]  # the second: unnamed


def test_use_learning_rates_gives_the_restored_optimizer_and_its_schedule_the_modules_rates():
    optimizer = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 1.0, "name": "agent_0"}])
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, total_iters=4)
    module = RestoredModule(optimizer, scheduler)
    assert use_learning_rates(module) == [("agent_0", 1.0, 0.5)]
    assert optimizer.param_groups[0]["lr"] == 0.5 and scheduler.base_lrs == [0.5]
    assert module.resume_checked is False  # the next resume is checked again


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_plain_lightning_resume_follows_the_same_rule(tmp_path, caplog):
    """``Trainer.fit(ckpt_path=...)`` with neither the CLI nor the seed API: the module's own hook lists the
    changes, the new sampling and learning rate are used; another team is refused before any step."""
    from lightning.pytorch import Trainer

    task = dict(train_dataset="embedded", eval_dataset="embedded")
    sizes = dict(preference_num_candidates=3, preference_pairs_per_sample=2, train_batch_size=8, eval_num_samples=2)

    def parts(lr=3e-3, temperature=1.0, team=TeamOptions(agent_model="embedded")):
        from comlrl_lightning.tasks.task import TaskOptions

        sampling = GenerationSettings(max_new_tokens=4, temperature=temperature, top_p=1.0, top_k=None)
        module = MADPOModule(team=team, sampling=sampling, agent_learning_rate=lr)
        return module, PreferenceDataModule(task=TaskOptions(**task), num_train_epochs=2, **sizes)

    def trainer(epochs):
        return Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), enable_progress_bar=False, logger=False)

    first = trainer(1)
    first.fit(*parts())
    first.save_checkpoint(tmp_path / "one.ckpt")
    state = torch.load(tmp_path / "one.ckpt", weights_only=True)
    state["generation_settings"]["newer_field"] = 1  # a field a newer version saved: never read back
    torch.save(state, tmp_path / "one.ckpt")
    caplog.clear()
    module, data = parts(lr=1e-4, temperature=0.5)
    resumed = trainer(2)
    resumed.fit(module, data, ckpt_path=str(tmp_path / "one.ckpt"))
    assert [m for m in caplog.messages if m.startswith("resumed with changed options")] == [
        "resumed with changed options: model.agent_learning_rate: 0.003 -> 0.0001, model.sampling.temperature: 1.0 -> 0.5"
    ]
    assert [g["lr"] for g in resumed.optimizers[0].param_groups] == [1e-4, 1e-4]
    assert module.generation_settings.temperature == 0.5 and resumed.global_step > first.global_step
    from comlrl_lightning.defaults import embedded_model_path

    other, data = parts(team=TeamOptions(agent_model=str(embedded_model_path())))
    with pytest.raises(ConfigurationError, match="model.team.agent_model: 'embedded' -> '/"):
        trainer(2).fit(other, data, ckpt_path=str(tmp_path / "one.ckpt"))


def test_an_option_left_out_as_an_object_is_listed_but_not_refused_and_a_null_parent_is_known():
    callable_reward = PreferenceDataModule(task=TaskOptions(reward_func=lambda *a: [0.0]))
    checkpoint = saved_by(MADPOModule(), callable_reward)
    assert resume_changes(checkpoint, MADPOModule(), PreferenceDataModule(), "x") == [
        ("data.task.reward_func", NOT_GIVEN, None)
    ]
    from peft import LoraConfig

    lora = MADPOModule(team=TeamOptions(lora=LoraConfig(r=2, target_modules=["q_proj"])))
    with pytest.raises(ConfigurationError, match="model.team.lora.r: \\(not given\\) -> 2"):
        resume_changes(saved_by(MADPOModule(), PreferenceDataModule()), lora, PreferenceDataModule(), "x")
