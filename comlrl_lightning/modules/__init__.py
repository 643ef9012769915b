"""LightningModules that train a team of agents."""

from .base import TeamModule
from .madpo import MADPOModule

__all__ = ["TeamModule", "MADPOModule"]
