"""Multi-turn collection for the preference data modules: what runs when a task has ``num_turns > 1``.

The data modules keep their single-turn flow untouched and call :func:`collect_within` (base) or
:func:`collect_against` (iterative) instead when the task's
:class:`~comlrl_lightning.data.turns.Turns` has more than one turn; :func:`check_multi_turn`
refuses, when the run is set up, what multi-turn training does not cover.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from comlrl_lightning.comparators import CentralizedComparator, Comparator
from comlrl_lightning.data.collection import CollectionResult
from comlrl_lightning.data.contract import TeamSide
from comlrl_lightning.data.pairs import IterativePairSelection, PairSelection
from comlrl_lightning.data.task import Task
from comlrl_lightning.data.trajectories import (
    Sampler,
    pairs_against,
    pairs_within,
    sample_trajectories,
    team_context_check,
    team_sampler,
)
from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.progress import Progress
from comlrl_lightning.runtime.rng import RandomStream


def check_multi_turn(
    task: Task, module: TeamSide, comparator: Optional[Comparator] = None, sharded: bool = False
) -> None:
    """With ``num_turns > 1``: a decentralized team that trains on preference pairs (MADPO), a
    comparator that samples every role's own prompt, and agents not sharded across processes (each
    process's trajectories end at their own turns, so sharded sampling could not stay in step);
    anything else is a :class:`ConfigurationError`."""
    turns = task.turns.num_turns
    if turns == 1:
        return
    if module.trains_on != "pairs":
        raise ConfigurationError(
            f"num_turns={turns}: {type(module).__name__} trains on task items with single-turn rollouts; "
            "multi-turn preference training is MADPO's (MADPOModule). Set num_turns to 1 for MARLHF."
        )
    if task.centralized:
        raise ConfigurationError(
            f"num_turns={turns}: a centralized team (one joint completion for every role) is single-turn only; "
            "use a decentralized team or num_turns=1."
        )
    if sharded:
        raise ConfigurationError(
            f"num_turns={turns}: agents sharded across processes (ModelParallelStrategy) sample in lockstep, "
            "which trajectories ending at different turns cannot keep; use DDP or one process."
        )
    if isinstance(comparator, CentralizedComparator):
        raise ConfigurationError(
            f"num_turns={turns}: centralized comparator generation (CentralizedComparator) is single-turn only; "
            "use a comparator that samples each agent's own prompt, or num_turns=1."
        )


def module_sampler(module: TeamSide, stream: RandomStream) -> Sampler:
    """The trained team as a trajectory sampler (its generator, its sampling settings, ``stream``)."""
    return team_sampler(module.generator, module.team, module.generation_settings, stream)


def comparator_sampler(comparator: Comparator, module: TeamSide) -> Sampler:
    """A comparator as a trajectory sampler (later turns: one sample per trajectory, as an item each)."""

    def sample(items: Sequence[Dict[str, Any]], prompts: Sequence[Sequence[str]], count: int):
        return comparator.sample(items, prompts, count, module.generation_settings)

    return sample


def _encoder(module: TeamSide):
    team = module.team
    return lambda agent, prompt: list(team.encode_prompts(agent, [prompt])[0])


def collect_within(
    module: TeamSide,
    task: Task,
    items: Sequence[Dict[str, Any]],
    num_candidates: int,
    pair_selection: PairSelection,
    pairs_per_sample: Optional[int],
    stream: RandomStream,
    trainer: Any = None,
) -> CollectionResult:
    """Base collection: ``num_candidates`` trajectories per item from the team, paired within each item
    (its progress shown as ``trainer``'s run shows progress, in trajectory turns)."""
    prompts = [task.prompts(item) for item in items]
    oracle = module.collection_oracle(task)
    tokenizers = lambda: module.team.tokenizers
    total = len(items) * num_candidates * task.turns.num_turns
    with Progress.for_trainer(trainer, "collection sampling", total, "trajectory turn") as progress:
        with module.generation_context():
            sampled = sample_trajectories(
                module_sampler(module, stream),
                oracle,
                task.turns,
                items,
                prompts,
                num_candidates,
                tokenizers,
                progress,
                team_context_check(module.team, module.generation_settings),
            )
    return pairs_within(sampled, task.turns, _encoder(module), pair_selection, pairs_per_sample, stream)


def collect_against(
    module: TeamSide,
    task: Task,
    comparator: Comparator,
    items: Sequence[Dict[str, Any]],
    counts: List[int],
    pair_selection: IterativePairSelection,
    pairs_per_sample: Optional[int],
    stream: RandomStream,
    trainer: Any = None,
    label: str = "collection",
) -> CollectionResult:
    """Iterative collection: the team's ``counts[0]`` and the comparator's ``counts[1]`` trajectories per
    item, trajectory ``j`` of each side compared with trajectory ``j`` of the other (its progress shown
    as ``trainer``'s run shows progress, as ``<label> sampling`` in trajectory turns)."""
    prompts = [task.prompts(item) for item in items]
    oracle = module.collection_oracle(task)
    tokenizers = lambda: module.team.tokenizers
    total = len(items) * sum(counts) * task.turns.num_turns
    with Progress.for_trainer(trainer, f"{label} sampling", total, "trajectory turn") as progress:
        with module.generation_context():
            fits = team_context_check(module.team, module.generation_settings)  # both sides train the team
            current = sample_trajectories(
                module_sampler(module, stream),
                oracle,
                task.turns,
                items,
                prompts,
                counts[0],
                tokenizers,
                progress,
                fits,
            )
            other = sample_trajectories(
                comparator_sampler(comparator, module),
                oracle,
                task.turns,
                items,
                prompts,
                counts[1],
                tokenizers,
                progress,
                fits,
            )
    comparator.end_round()
    return pairs_against(current, other, task.turns, _encoder(module), pair_selection, pairs_per_sample, stream)


__all__ = ["check_multi_turn", "collect_against", "collect_within", "comparator_sampler", "module_sampler"]
