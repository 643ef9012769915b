"""The typed contract between data modules and team modules: what each may ask of the other."""

from __future__ import annotations

from typing import Protocol

import pytest
from lightning.pytorch import Callback, LightningDataModule, LightningModule

from comlrl_lightning import (
    IterativePreferenceDataModule,
    MADPOModule,
    MAGRPOModule,
    PreferenceDataModule,
    RewardCurvePlot,
    RewardDistributions,
    TaskDataModule,
    TaskOptions,
    TeamOptions,
)
from comlrl_lightning.contracts import (
    ContractError,
    DataModuleCheck,
    DataSide,
    EvaluatedModule,
    RoundSource,
    data_module_checks,
    data_side,
    evaluated_module,
    optional_data_side,
    round_source,
    team_side,
)
from comlrl_lightning.defaults import vowel_length_reward


class FakeTrainer:
    def __init__(self, module=None, datamodule=None):
        self.lightning_module, self.datamodule = module, datamodule


@pytest.mark.parametrize("module", [MADPOModule, MAGRPOModule])
def test_our_modules_keep_the_team_side_without_loading_a_model(module):
    instance = module(team=TeamOptions(agent_model="/nonexistent/model/path"))
    assert team_side(FakeTrainer(instance)) is instance
    assert instance._team is None  # checking the contract must not build the team (isinstance on 3.11 would)


@pytest.mark.parametrize("datamodule", [TaskDataModule, PreferenceDataModule, IterativePreferenceDataModule])
def test_our_data_modules_keep_the_data_side(datamodule):
    instance = datamodule()
    assert data_side(FakeTrainer(datamodule=instance)) is instance and isinstance(instance, DataSide)
    assert instance.round_pairs() == (None, None)


def test_a_module_that_breaks_the_contract_is_named_with_what_it_lacks():
    class Plain(LightningModule):
        num_agents = 2

    with pytest.raises(ContractError) as error:
        team_side(FakeTrainer(Plain()))
    message = str(error.value)
    assert message.startswith("Plain does not keep the TeamSide contract of comlrl_lightning.contracts (missing: ")
    assert "team" in message and "generator" in message and "num_agents" not in message
    with pytest.raises(ContractError, match="No LightningModule is attached to the trainer."):
        team_side(FakeTrainer())


def test_a_plain_data_module_means_no_evaluation_but_half_a_contract_is_an_error():
    class Batches(LightningDataModule):
        pass

    class Half(LightningDataModule):
        task = None

        def evaluation_items(self):
            return []

    assert optional_data_side(FakeTrainer(datamodule=Batches())) is None
    with pytest.raises(
        ContractError, match=r"Half does not keep the DataSide contract .*missing: eval_batch_size, round_pairs"
    ):
        optional_data_side(FakeTrainer(datamodule=Half()))
    with pytest.raises(ContractError, match="Batches does not keep the DataSide contract"):
        data_side(FakeTrainer(datamodule=Batches()))


def test_a_preference_data_module_refuses_a_module_without_the_contract(tmp_path):
    from lightning.pytorch import Trainer

    class Plain(LightningModule):
        def training_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            return None

    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with pytest.raises(ContractError, match="Plain does not keep the TeamSide contract"):
        trainer.fit(
            Plain(),
            PreferenceDataModule(task=TaskOptions(train_dataset=[{"prompt": "a"}], reward_func=lambda a, b: 0.0)),
        )


# ----------------------------------------------------------------------------------------------
# What observers may read: the round source, the data-module check, the evaluated module


class UserRounds:
    """A user's own round source: keeps RoundSource without deriving from any class of ours."""

    reward_func = staticmethod(vowel_length_reward)

    def round_pairs(self):
        return 0, []

    def round_collection(self):
        return 0, None


def test_the_iterative_data_module_and_a_users_own_class_keep_the_round_source():
    iterative = IterativePreferenceDataModule()
    assert round_source(iterative, "Observer") is iterative and isinstance(iterative, RoundSource)
    assert iterative.round_collection() == (None, None)
    mine = UserRounds()
    assert round_source(mine, "Observer") is mine
    callback = RewardDistributions()
    callback.check_data_module(mine)  # the callback takes any round source with a declared reward range
    assert callback.reward_range == (-1.0, 1.0)


def test_a_data_module_without_rounds_is_named_with_what_it_lacks_and_who_reads_it():
    class NoCollection:
        reward_func = staticmethod(vowel_length_reward)

        def round_pairs(self):
            return None, None

    with pytest.raises(
        ContractError,
        match=r"^PreferenceDataModule does not keep the RoundSource contract of comlrl_lightning.contracts "
        r"\(missing: round_collection\); Observer reads the rounds it builds\.$",
    ):
        round_source(PreferenceDataModule(), "Observer")
    with pytest.raises(ContractError, match=r"NoCollection .*\(missing: round_collection\); RewardDistributions"):
        RewardDistributions().check_data_module(NoCollection())
    with pytest.raises(ContractError, match=r"missing: reward_func, round_pairs, round_collection\)"):
        round_source(object(), "Observer")


def test_callbacks_that_offer_a_data_module_check_are_asked_and_a_broken_one_is_named():
    class Checks(Callback):
        def check_data_module(self, datamodule):
            pass

    class NotAMethod(Callback):
        check_data_module = None

    class TakesNothing(Callback):
        def check_data_module(self):
            pass

    checking, plain = Checks(), Callback()
    assert data_module_checks([plain, checking, RewardDistributions()])[:1] == [checking]
    assert isinstance(checking, DataModuleCheck) and not isinstance(plain, DataModuleCheck)
    assert data_module_checks([plain]) == []
    for broken in (NotAMethod(), TakesNothing()):
        with pytest.raises(
            ContractError, match=rf"^{type(broken).__name__}.check_data_module must be a method taking the data module"
        ):
            data_module_checks([checking, broken])


def test_the_iterative_data_module_asks_a_users_check_before_the_team_is_loaded(tmp_path):
    from tests.helpers.iterative_run import ITER_MODEL, make_trainer

    class Refuses(Callback):
        def __init__(self):
            self.seen = []

        def check_data_module(self, datamodule):
            self.seen.append(datamodule)
            raise RuntimeError("this run is not for me")

    callback, module, datamodule = Refuses(), MADPOModule(**ITER_MODEL), IterativePreferenceDataModule()
    with pytest.raises(RuntimeError, match="this run is not for me"):
        make_trainer(tmp_path, callbacks=[callback]).fit(module, datamodule)
    assert callback.seen == [datamodule]
    assert module._team is None  # no model was loaded


def test_team_modules_and_a_users_own_module_keep_the_evaluated_module():
    class Mine(LightningModule):
        initial_eval_reward = None
        final_eval_reward = 0.5

    ours = MADPOModule(team=TeamOptions(agent_model="/nonexistent/model/path"))
    assert evaluated_module(ours, "Observer") is ours and ours._team is None
    assert evaluated_module(Mine(), "Observer").final_eval_reward == 0.5
    assert isinstance(Mine(), EvaluatedModule)


def test_a_module_that_does_not_evaluate_is_named_before_a_reward_curve_is_drawn(tmp_path):
    class Plain(LightningModule):
        initial_eval_reward = None

    with pytest.raises(
        ContractError,
        match=r"^Plain does not keep the EvaluatedModule contract of comlrl_lightning.contracts "
        r"\(missing: final_eval_reward\); RewardCurvePlot reads its evaluations\.$",
    ):
        RewardCurvePlot().setup(None, Plain(), "fit")
    RewardCurvePlot().setup(None, Plain(), "validate")  # only a fit draws the curve


# ----------------------------------------------------------------------------------------------
# What a part reads only when another offers it, and the members checked


def test_the_members_checked_are_the_protocols_own_in_order():
    from comlrl_lightning.contracts import TeamSide, members

    assert members(DataSide) == ("eval_batch_size", "task", "evaluation_items", "round_pairs")
    assert members(RoundSource) == ("reward_func", "round_pairs", "round_collection")
    assert members(TeamSide)[:5] == ("trains_on", "generator", "generation_settings", "num_roles", "hparams")
    assert members(TeamSide)[-1] == "log_metrics_now"

    class Extended(DataSide, Protocol):
        seed: int

        def extra(self) -> None: ...

    assert members(Extended) == members(DataSide) + ("seed", "extra")  # the base's first, then its own
    with pytest.raises(ContractError, match=r"missing: eval_batch_size, task, evaluation_items, round_pairs"):
        data_side(FakeTrainer(datamodule=object()))


def test_what_our_parts_offer_to_the_parts_that_read_them_when_offered(tmp_path):
    from comlrl_lightning.callbacks import ResumableCSVLogger
    from comlrl_lightning.contracts import (
        CollectedOnce,
        ConfiguredTeam,
        ContinuableLog,
        DataState,
        RoundSchedule,
        offers,
    )

    iterative, preference = IterativePreferenceDataModule(), PreferenceDataModule()
    assert offers(iterative, RoundSchedule) and not offers(preference, RoundSchedule)
    assert offers(preference, CollectedOnce) and offers(TaskDataModule(), DataState)
    module = MADPOModule(team=TeamOptions(agent_model="/nonexistent/model/path"))
    assert offers(module, ConfiguredTeam) and module._team is None  # statically: the team is not loaded
    assert offers(ResumableCSVLogger(str(tmp_path)), ContinuableLog)
    assert not offers(None, RoundSchedule) and not offers(object(), ContinuableLog)

    class HalfLog:  # drops rows but cannot name its run: not a log a resumed run continues
        save_dir, name, version, rows_logged = str(tmp_path), "x", 0, 0

        def save(self) -> None: ...

        def keep_rows_before(self, rows: int, step: int) -> None: ...

    assert not offers(HalfLog(), ContinuableLog)


def test_the_resume_line_names_the_round_of_a_data_module_that_offers_a_schedule():
    from types import SimpleNamespace

    from comlrl_lightning.callbacks.checkpoints import resume_line
    from comlrl_lightning.checkpoints.metadata import CheckpointProgress

    progress = CheckpointProgress(epochs=5, step=40, batches=0)
    rounds = IterativePreferenceDataModule(num_iterations=3, num_train_epochs=2)
    line = resume_line(SimpleNamespace(datamodule=rounds, ckpt_path="c.ckpt"), progress)
    assert line == "resuming at round 3/3 (epoch 6, step 40) from c.ckpt"
    line = resume_line(SimpleNamespace(datamodule=PreferenceDataModule(), ckpt_path="c.ckpt"), progress)
    assert line == "resuming at epoch 6, step 40 from c.ckpt"
