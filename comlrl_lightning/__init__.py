"""comlrl-lightning: train teams of cooperating LLM agents from preferences, with PyTorch Lightning."""

from .collaboration import Centralized, Decentralized
from .comparators import (
    ApiComparator,
    CentralizedComparator,
    Comparator,
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    ModelComparator,
)
from .critics import IndividualCritics, SharedCritic
from .data import PreferenceDataModule, TaskDataModule
from .generation import Generator, HFGenerator, VLLMGenerator
from .item_sources import HFDataset
from .iterative import IterativePreferenceDataModule
from .losses import bradley_terry_loss, madpo_loss
from .modules import MADPOModule, MAGRPOModule, MARLHFModule, RewardModelModule, RoundFilesDataModule, TeamModule
from .options import OptionError
from .pairs import PreferencePair
from .quiet import install_noise_filters
from .replay import AllHistoryReplay, CurrentReplay, LambdaDecayReplay, NearestKReplay, ReplayRule
from .reward_distribution import RewardDistributions
from .task import Task
from .team import GenerationSettings, Team

__version__ = "0.1.0"

install_noise_filters()  # two exact, harmless Lightning messages (see comlrl_lightning.quiet)

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
    "Generator",
    "HFDataset",
    "HFGenerator",
    "HistoryComparator",
    "IndividualCritics",
    "LambdaDecayReplay",
    "ModelComparator",
    "NearestKReplay",
    "ReplayRule",
    "RewardDistributions",
    "SharedCritic",
    "GenerationSettings",
    "IterativePreferenceDataModule",
    "MADPOModule",
    "MAGRPOModule",
    "MARLHFModule",
    "RewardModelModule",
    "RoundFilesDataModule",
    "OptionError",
    "PreferenceDataModule",
    "PreferencePair",
    "Task",
    "Team",
    "TaskDataModule",
    "TeamModule",
    "VLLMGenerator",
    "bradley_terry_loss",
    "madpo_loss",
]
