"""LightningDataModules: they own the rounds (collect, store, replay) and feed the team modules.

:class:`TaskDataModule` serves task items (rollout modules sample their own);
:class:`PreferenceDataModule` collects preference pairs once with the team being trained;
:class:`IterativePreferenceDataModule` runs rounds of collect → round file → replay → train
against a comparator; :class:`RoundFilesDataModule` reads stored round files to fit a reward model.
A task with ``num_turns > 1`` is collected as joint trajectories (:mod:`.multi_turn`).

Imports: :mod:`comlrl_lightning.comparators`, :mod:`comlrl_lightning.rounds` and every layer below;
never :mod:`comlrl_lightning.modules` (the team module is reached through
:mod:`comlrl_lightning.contracts`).
"""

from comlrl_lightning.datamodules.iterative import IterativePreferenceDataModule
from comlrl_lightning.datamodules.preference import PreferenceDataModule
from comlrl_lightning.datamodules.round_files import RoundFilesDataModule
from comlrl_lightning.datamodules.task_data import TaskDataModule

__all__ = ["IterativePreferenceDataModule", "PreferenceDataModule", "RoundFilesDataModule", "TaskDataModule"]
