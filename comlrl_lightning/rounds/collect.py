"""The collector: one round's items, sampled by one or two sides, scored turn by turn, and paired.

:func:`collect` is the whole of a round's collection, for every data module and every task:

1. this process's shard of the items (``items[rank::world]``) and its stream, derived from
   ``(seed, "collect", round, rank)``;
2. every side samples its joint trajectories (the team's, and the comparator's when there is one;
   a one-turn task's are its joint answers), the sides in step, each turn scored by the oracle in
   one call (:func:`~comlrl_lightning.rounds.trajectories.sample_sides`), with one progress line;
3. the pairing rule turns them into pairs (:mod:`comlrl_lightning.rounds.pairing`: within the team's
   trajectories, or the team's against the comparator's), counting the joint completions that did
   not parse (a centralized team's);
4. the ranks' results are gathered and merged in item order, so every rank holds every pair.

A data module decides when a round is due, builds its :class:`Side` objects and :class:`RoundSetup`
(:func:`trained_side`, :func:`comparator_side`, :func:`module_setup`) and calls :func:`collect`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Protocol, Sequence

from comlrl_lightning.contracts import TeamSide
from comlrl_lightning.generation.base import Completion, GenerationSettings
from comlrl_lightning.rounds.pairing import Encoder, PairingRule
from comlrl_lightning.rounds.result import CollectionResult, merge_results
from comlrl_lightning.rounds.trajectories import (
    ContextCheck,
    Sampler,
    sample_sides,
    team_context_check,
    team_sampler,
)
from comlrl_lightning.runtime.distributed import gather_results, rank_and_world, shard
from comlrl_lightning.runtime.progress import Progress
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.tasks.turns import Turns


@dataclass(frozen=True)
class Side:
    """One side of a round: ``sampler(stream)`` gives its sampler for this process's round stream (a side
    with a stream of its own, a comparator, ignores it), and ``count`` joint candidates per item."""

    sampler: Callable[[RandomStream], Sampler]
    count: int


@dataclass(frozen=True)
class RoundSetup:
    """What a round needs besides its items, sides and turns.

    Attributes:
        task: gives each item's prompts and counts the joint completions that did not parse.
        oracle: scores joint answers (``rewards`` / ``rewards_many``, :class:`~comlrl_lightning.tasks.oracle.Oracle`).
        encode: a prompt's token ids as each agent sampled after it (kept in every pair).
        tokenizers: each agent's tokenizer (a later turn's chat-template prompt needs it).
        pairing: the pairing rule; its ``num_sides`` must be the number of sides given.
        seed: the run's seed; with ``round_index`` and the rank it derives the round's stream.
        round_index: the round (0-based).
        label: the progress line's name (``"<label> sampling"``).
        context_check: ends a trajectory whose next prompt does not fit the team's context.
        sampling_context: entered around every sampling call (the module's eval mode, no grad, autocast).
        trainer: the running Trainer (rank, world, how progress shows), or ``None`` (one process).
    """

    task: Task
    oracle: Any
    encode: Encoder
    tokenizers: Callable[[], Sequence[Any]]
    pairing: PairingRule
    seed: int
    round_index: int = 0
    label: str = "collection"
    context_check: Optional[ContextCheck] = None
    sampling_context: Callable[[], ContextManager[Any]] = contextlib.nullcontext
    trainer: Any = None


def collect(
    items: Sequence[Dict[str, Any]], side: Side, comparator: Optional[Side], turns: Turns, setup: RoundSetup
) -> CollectionResult:
    """The round's pairs of every item, ``side`` paired within itself or against ``comparator`` (see the
    module's docstring); every rank gets the whole result."""
    sides = [side] if comparator is None else [side, comparator]
    if setup.pairing.num_sides != len(sides):
        raise ValueError(f"{type(setup.pairing).__name__} pairs {setup.pairing.num_sides} sides, not {len(sides)}")
    rank, world = rank_and_world(setup.trainer)
    mine = shard(items, rank, world)
    stream = RandomStream.derive(setup.seed, "collect", setup.round_index, rank)
    return merge_results(gather_results(lambda: collect_shard(mine, sides, turns, setup, stream), world), world)


def collect_shard(
    items: Sequence[Dict[str, Any]], sides: Sequence[Side], turns: Turns, setup: RoundSetup, stream: RandomStream
) -> CollectionResult:
    """One process's part of :func:`collect`: its items' trajectories of every side, paired."""
    unparsed_before = setup.task.unparsed_completions
    prompts = [setup.task.prompts(item) for item in items]
    total = len(items) * sum(s.count for s in sides) * turns.num_turns
    unit = "trajectory turn" if turns.num_turns > 1 else "joint answer"
    with Progress.for_trainer(setup.trainer, f"{setup.label} sampling", total, unit) as progress:
        sampled = sample_sides(
            [in_context(s.sampler(stream), setup.sampling_context) for s in sides],
            [s.count for s in sides],
            setup.oracle,
            turns,
            items,
            prompts,
            setup.tokenizers,
            progress,
            setup.context_check,
        )
    result = setup.pairing.pair(sampled, turns, setup.encode, stream)
    result.unparsed = setup.task.unparsed_completions - unparsed_before
    return result


def in_context(sample: Sampler, context: Callable[[], ContextManager[Any]]) -> Sampler:
    """``sample`` run inside ``context()`` at every call (sampling only: scoring stays outside it)."""

    def sample_in_context(
        items: Sequence[Dict[str, Any]], prompts: Sequence[Sequence[str]], count: int
    ) -> List[List[List[Completion]]]:
        with context():
            return sample(items, prompts, count)

    return sample_in_context


class CandidateSource(Protocol):
    """Anything that samples a side on its own, as a comparator does (with its own stream)."""

    def sample(
        self,
        items: Sequence[Dict[str, Any]],
        prompts: Sequence[Sequence[str]],
        num_candidates: int,
        settings: GenerationSettings,
    ) -> List[List[List[Completion]]]: ...


def trained_side(module: TeamSide, count: int) -> Side:
    """The trained team as a side: its generator and sampling settings, the round's stream."""
    return Side(lambda stream: team_sampler(module.generator, module.team, module.generation_settings, stream), count)


def comparator_side(source: CandidateSource, settings: GenerationSettings, count: int) -> Side:
    """A comparator (or any :class:`CandidateSource`) as a side, sampling with ``settings``."""

    def sampler(stream: RandomStream) -> Sampler:
        return lambda items, prompts, num: source.sample(items, prompts, num, settings)

    return Side(sampler, count)


def module_setup(
    module: TeamSide, task: Task, pairing: PairingRule, seed: int, round_index: int, label: str, trainer: Any
) -> RoundSetup:
    """The setup of a round of ``module``'s team on ``task``: the module's collection oracle, the team's
    tokenizers and context, sampling in the module's generation context."""
    return RoundSetup(
        task=task,
        oracle=module.collection_oracle(task),
        encode=lambda agent, prompt: list(module.team.encode_prompts(agent, [prompt])[0]),
        tokenizers=lambda: module.team.tokenizers,
        pairing=pairing,
        seed=seed,
        round_index=round_index,
        label=label,
        # both sides' trajectories train the team: both are checked against its context
        context_check=team_context_check(module.team, module.generation_settings),
        sampling_context=module.generation_context,
        trainer=trainer,
    )


__all__ = [
    "CandidateSource",
    "RoundSetup",
    "Side",
    "collect",
    "collect_shard",
    "module_setup",
    "comparator_side",
    "trained_side",
]
