"""The toy model's learning rate and pure low-precision weights are caught before they wreck a real model."""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning import MADPOModule
from comlrl_lightning.defaults import embedded_model_path
from comlrl_lightning.modules.real_model_safety import (
    EMBEDDED_LEARNING_RATE,
    REAL_MODEL_LEARNING_RATES,
    is_embedded_source,
    low_precision_weights_warning,
    real_model_learning_rates,
)
from tests.conftest import tiny_team


def test_the_embedded_default_is_recognised_by_id_and_by_its_folder(tmp_path):
    assert is_embedded_source("embedded") and is_embedded_source(str(embedded_model_path()))
    assert is_embedded_source(embedded_model_path())
    assert not is_embedded_source("smollm2-135m-instruct") and not is_embedded_source(str(tmp_path))
    assert not is_embedded_source(torch.nn.Linear(1, 1))


@pytest.mark.parametrize("lora, expected", [(False, REAL_MODEL_LEARNING_RATES["full"]), (True, 5e-5)])
def test_the_toy_rate_on_a_real_model_becomes_the_real_model_default_with_a_warning(lora, expected):
    with pytest.warns(UserWarning, match="destroys a pretrained model \\(smollm2-135m-instruct\\)"):
        rates = real_model_learning_rates([EMBEDDED_LEARNING_RATE, 1e-4], ["smollm2-135m-instruct"] * 2, lora)
    assert rates == [expected, 1e-4]


@pytest.mark.parametrize(
    "rates, sources",
    [
        ([EMBEDDED_LEARNING_RATE], ["embedded"]),  # the toy model: its own rate
        ([1e-5], ["org/model"]),  # a chosen rate is used as given
        ([EMBEDDED_LEARNING_RATE], [torch.nn.Linear(1, 1)]),  # a model object: its user chose the rate
        ([EMBEDDED_LEARNING_RATE] * 2, ["embedded", "org/model"]),  # a team with the toy model keeps it
    ],
)
def test_other_rates_and_teams_are_left_as_given(rates, sources, recwarn):
    assert real_model_learning_rates(rates, sources, lora=False) == rates
    assert not [w for w in recwarn if "destroys" in str(w.message)]


def test_the_module_trains_a_real_model_at_the_real_model_default():
    with pytest.warns(UserWarning, match="agent_learning_rate 0.003"):
        module = MADPOModule(team=tiny_team(agent_model="org/model"), agent_learning_rate=EMBEDDED_LEARNING_RATE)
    assert module.learning_rates == [REAL_MODEL_LEARNING_RATES["full"]] * 2
    assert MADPOModule(team=tiny_team(), agent_learning_rate=EMBEDDED_LEARNING_RATE).learning_rates == [0.003] * 2


def test_low_precision_trainable_weights_are_warned_about():
    assert low_precision_weights_warning({torch.float32}) is None and low_precision_weights_warning(set()) is None
    message = low_precision_weights_warning({torch.bfloat16, torch.float32})
    assert "bfloat16" in message and "--trainer.precision bf16-mixed" in message and "\n" not in message
