"""The names of :mod:`comlrl_lightning.rounds.trajectories` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.rounds.trajectories import (
    ContextCheck,
    Sampler,
    Trajectory,
    fitting_prompts,
    sample_joint,
    sample_sides,
    sample_trajectories,
    team_context_check,
    team_sampler,
)

__all__ = [
    "ContextCheck",
    "Sampler",
    "Trajectory",
    "fitting_prompts",
    "sample_joint",
    "sample_sides",
    "sample_trajectories",
    "team_context_check",
    "team_sampler",
]
