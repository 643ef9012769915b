"""What rounds need of the Trainer running them (round_trainer.py), checked before any model loads: a
fraction of an epoch between validations is refused, and so is a Trainer that does not reload its loaders
every epoch where a callback reads each round."""

from __future__ import annotations

import pytest

from comlrl_lightning import RewardDistributions
from comlrl_lightning.errors import ConfigurationError
from tests.callbacks.test_reward_distributions import _data
from tests.helpers.iterative_run import make_run


def test_a_fraction_of_an_epoch_between_validations_is_refused_before_collection(tmp_path):
    module, datamodule, trainer = make_run(tmp_path, val_check_interval=0.5, check_val_every_n_epoch=1)
    with pytest.raises(ConfigurationError, match=r"trainer.val_check_interval: a fraction of an epoch \(0.5\)"):
        trainer.fit(module, datamodule)
    assert not list(tmp_path.rglob("iteration_*.json"))


def test_a_trainer_that_does_not_reload_every_epoch_is_told_what_to_set_before_the_team_loads(tmp_path):
    from comlrl_lightning import IterativePreferenceDataModule, MADPOModule
    from comlrl_lightning.errors import ConfigurationError
    from tests.helpers.iterative_run import ITER_MODEL, make_trainer

    module = MADPOModule(**ITER_MODEL)
    trainer = make_trainer(tmp_path, callbacks=[RewardDistributions()], reload_dataloaders_every_n_epochs=0)
    with pytest.raises(ConfigurationError, match=r"RewardDistributions .*reload_dataloaders_every_n_epochs=1"):
        trainer.fit(module, IterativePreferenceDataModule(**_data(num_iterations=2, num_train_epochs=1)))
    assert module._team is None and trainer.reload_dataloaders_every_n_epochs == 0
