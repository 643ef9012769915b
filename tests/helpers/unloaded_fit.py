"""A fit whose team names a model path that does not exist: the task's items are checked before any load."""

from __future__ import annotations

from typing import Any

from comlrl_lightning import MADPOModule, PreferenceDataModule, TaskOptions
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_team, tiny_trainer


def fit_without_a_model(tmp_path, **task: Any) -> None:
    """``fit`` the tiny run on ``TaskOptions(**task)``; reaching the model load fails on its missing path."""
    module = MADPOModule(**{**TINY_MODEL, "team": tiny_team(agent_model="/nonexistent/never/loaded")})
    tiny_trainer(tmp_path).fit(module, PreferenceDataModule(**{**TINY_DATA, "task": TaskOptions(**task)}))
