"""LightningModules that train a team of agents (and its reward model).

:class:`TeamModule` is what every team module shares (the team, its optimizer groups, sampling
and evaluation); :class:`MADPOModule`, :class:`MAGRPOModule` (MAGRPO-family and actor-critic
backends), :class:`MARLHFModule` (a reward model fitted per round, then policy gradient on it) and
:class:`RewardModelModule` build on it. How the team covers the task's roles is a
:class:`Collaboration` (:class:`Decentralized` or :class:`Centralized`). Each evaluation's
samples (:class:`EvaluationSamples`) are handed to the Trainer's :class:`EvaluationObserver`
callbacks (:class:`EvaluationMetricsCallback` for a plain function), which name their own metrics.

Imports: :mod:`comlrl_lightning.rounds`, the task definition (:mod:`comlrl_lightning.tasks`),
:mod:`comlrl_lightning.checkpoints`, :mod:`comlrl_lightning.critics`, :mod:`comlrl_lightning.joint_reward`,
:mod:`comlrl_lightning.generation`, :mod:`comlrl_lightning.team` and the layers below; never
:mod:`comlrl_lightning.datamodules` (the data module is reached through
:mod:`comlrl_lightning.contracts`).
"""

from comlrl_lightning.modules.base import TeamModule
from comlrl_lightning.modules.collaboration import (
    Centralized,
    Collaboration,
    Decentralized,
)
from comlrl_lightning.modules.evaluation_metrics import EvaluationMetricsCallback, EvaluationObserver, EvaluationSamples
from comlrl_lightning.modules.madpo import MADPOModule
from comlrl_lightning.modules.magrpo import MAGRPOModule, ReferenceKL
from comlrl_lightning.modules.marlhf import MARLHFModule
from comlrl_lightning.modules.reward_model import RewardModelModule

__all__ = [
    "Centralized",
    "Collaboration",
    "Decentralized",
    "EvaluationMetricsCallback",
    "EvaluationObserver",
    "EvaluationSamples",
    "MADPOModule",
    "MAGRPOModule",
    "MARLHFModule",
    "ReferenceKL",
    "RewardModelModule",
    "TeamModule",
]
