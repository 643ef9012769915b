"""comlrl-lightning: train teams of cooperating LLM agents from preferences, with PyTorch Lightning.

The package is layered; each layer imports only the ones below it:

* foundation modules: :mod:`.options` (validation), :mod:`.losses` (the math), :mod:`.defaults`
  (the embedded tiny model and toy task);
* :mod:`.runtime`: processes, sharding, devices, random streams, files, locks, progress, quiet;
* :mod:`.team`: the agents, their tokenizers and scoring (LoRA, packed scoring, fused head);
* :mod:`.generation` (sampling backends) and :mod:`.models` (reward model, critics);
* :mod:`.data`: the round pipeline (task, oracle, collection, pairs, replay, round files, snapshots);
* :mod:`.comparators`: the other side of every iterative comparison;
* :mod:`.modules` (LightningModules) and :mod:`.datamodules` (LightningDataModules);
* :mod:`.callbacks`: observers (reward curves, reward distributions, plots);
* :mod:`.trainers` (the seed's Python API) and :mod:`.cli` (the ``comlrl-lightning`` command).

The names below are the ones a config or a script usually needs. Importing the package changes
nothing global (no warning filter, logger, handler or environment variable): the ``comlrl-lightning``
command and the seed API's trainers install their noise filters when they start
(:func:`comlrl_lightning.runtime.quiet.install_noise_filters`).
"""

from comlrl_lightning.callbacks import (
    ParameterSummary,
    RewardCurvePlot,
    RewardDistributions,
)
from comlrl_lightning.comparators import (
    ApiComparator,
    CentralizedComparator,
    Comparator,
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    ModelComparator,
)
from comlrl_lightning.critics import IndividualCritics, SharedCritic
from comlrl_lightning.datamodules import (
    IterativePreferenceDataModule,
    PreferenceDataModule,
    RoundFilesDataModule,
    TaskDataModule,
)
from comlrl_lightning.generation import (
    GenerationSettings,
    Generator,
    HFGenerator,
    VLLMGenerator,
)
from comlrl_lightning.joint_reward import RewardModelFit, RewardModelOptions
from comlrl_lightning.losses import bradley_terry_loss, madpo_loss
from comlrl_lightning.modules import (
    Centralized,
    Decentralized,
    MADPOModule,
    MAGRPOModule,
    MARLHFModule,
    ReferenceKL,
    RewardModelModule,
    TeamModule,
)
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayRule,
)
from comlrl_lightning.tasks.item_sources import HFDataset
from comlrl_lightning.tasks.task import Task, TaskOptions
from comlrl_lightning.team import MemoryOptions, Team, TeamOptions
from comlrl_lightning.validation import OptionError

__version__ = "0.1.0"

__all__ = [
    "AllHistoryReplay",
    "ApiComparator",
    "Centralized",
    "CentralizedComparator",
    "Comparator",
    "CurrentComparator",
    "CurrentCopyComparator",
    "CurrentReplay",
    "Decentralized",
    "GenerationSettings",
    "Generator",
    "HFDataset",
    "HFGenerator",
    "HistoryComparator",
    "IndividualCritics",
    "IterativePreferenceDataModule",
    "LambdaDecayReplay",
    "MADPOModule",
    "MAGRPOModule",
    "MARLHFModule",
    "MemoryOptions",
    "ModelComparator",
    "NearestKReplay",
    "OptionError",
    "ParameterSummary",
    "PreferenceDataModule",
    "PreferencePair",
    "ReferenceKL",
    "ReplayRule",
    "RewardCurvePlot",
    "RewardDistributions",
    "RewardModelFit",
    "RewardModelModule",
    "RewardModelOptions",
    "RoundFilesDataModule",
    "SharedCritic",
    "Task",
    "TaskOptions",
    "TaskDataModule",
    "Team",
    "TeamModule",
    "TeamOptions",
    "VLLMGenerator",
    "bradley_terry_loss",
    "madpo_loss",
]
