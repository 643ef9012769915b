"""The typed contract between data modules and team modules: what each may ask of the other."""

from __future__ import annotations

import pytest
from lightning.pytorch import LightningDataModule, LightningModule

from comlrl_lightning import (
    IterativePreferenceDataModule,
    MADPOModule,
    MAGRPOModule,
    PreferenceDataModule,
    TaskDataModule,
)
from comlrl_lightning.data.contract import (
    ContractError,
    DataSide,
    data_side,
    optional_data_side,
    team_side,
)


class FakeTrainer:
    def __init__(self, module=None, datamodule=None):
        self.lightning_module, self.datamodule = module, datamodule


@pytest.mark.parametrize("module", [MADPOModule, MAGRPOModule])
def test_our_modules_keep_the_team_side_without_loading_a_model(module):
    instance = module(agent_model="/nonexistent/model/path")
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
    assert message.startswith("Plain does not keep the TeamSide contract of comlrl_lightning.data.contract (missing: ")
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
        trainer.fit(Plain(), PreferenceDataModule(train_dataset=[{"prompt": "a"}], reward_func=lambda a, b: 0.0))
