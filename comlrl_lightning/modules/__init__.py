"""LightningModules that train a team of agents (and its reward model)."""

from .base import TeamModule
from .madpo import MADPOModule
from .magrpo import MAGRPOModule
from .marlhf import MARLHFModule
from .reward_model import RewardModelModule, RoundFilesDataModule

__all__ = ["TeamModule", "MADPOModule", "MAGRPOModule", "MARLHFModule", "RewardModelModule", "RoundFilesDataModule"]
