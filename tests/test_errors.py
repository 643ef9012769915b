"""One error family: every error the library raises for a user is a ComlrlError and keeps its builtin base."""

from __future__ import annotations

import pytest

from comlrl_lightning.comparators.api_client import ComparatorApiError
from comlrl_lightning.comparators.api_formats import ApiResponseError
from comlrl_lightning.contracts import ContractError
from comlrl_lightning.errors import (
    ComlrlError,
    ConfigurationError,
    ConfigurationTypeError,
    DataError,
    MissingPathError,
    MissingRunFileError,
    RunStateError,
)
from comlrl_lightning.rounds.replay import ReplayIndexError
from comlrl_lightning.runtime.folder_lock import FolderInUseError
from comlrl_lightning.tasks.centralized_task import AdapterError, CentralizedComparatorParseError
from comlrl_lightning.tasks.chat import ChatTemplateError
from comlrl_lightning.tasks.oracle import RewardFunctionError
from comlrl_lightning.validation import OptionError


@pytest.mark.parametrize(
    "error, branch, builtin",
    [
        (OptionError, ConfigurationError, ValueError),
        (ConfigurationTypeError, ConfigurationError, TypeError),
        (MissingPathError, ConfigurationError, FileNotFoundError),
        (AdapterError, ConfigurationError, TypeError),
        (ContractError, ConfigurationError, TypeError),
        (ChatTemplateError, ConfigurationError, ValueError),
        (CentralizedComparatorParseError, DataError, ValueError),
        (ApiResponseError, DataError, ValueError),
        (RewardFunctionError, DataError, RuntimeError),
        (FolderInUseError, RunStateError, RuntimeError),
        (ReplayIndexError, RunStateError, RuntimeError),
        (MissingRunFileError, RunStateError, FileNotFoundError),
        (ComparatorApiError, ComlrlError, RuntimeError),
    ],
)
def test_every_error_is_in_the_family_and_keeps_its_builtin_base(error, branch, builtin):
    assert issubclass(error, branch) and issubclass(error, ComlrlError) and issubclass(error, builtin)


def test_the_errors_a_user_meets_are_in_the_family(tmp_path):
    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from comlrl_lightning.tasks.task import load_items
    from comlrl_lightning.team.loading import resolve_source

    for make in (
        lambda: MADPOModule(dpo_beta=-1),
        lambda: PreferenceDataModule(pair_selection="best"),
        lambda: load_items(str(tmp_path / "absent.jsonl")),
        lambda: resolve_source("/nonexistent/model"),
        lambda: resolve_source("not a hub id!"),
    ):
        with pytest.raises(ComlrlError):
            make()
