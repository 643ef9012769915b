"""Collection: sample candidates for every item, score joint responses, and build pairs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from comlrl_lightning.data.oracle import Scorer, score_requests
from comlrl_lightning.data.pairs import PairSelection, PreferencePair, select_pairs
from comlrl_lightning.data.task import Task
from comlrl_lightning.data.trajectory_pairs import TrajectoryPair, is_trajectory_record
from comlrl_lightning.generation.base import (
    Completion,
    GenerationSettings,
    Generator,
    sample_team,
)
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.runtime.distributed import unshard
from comlrl_lightning.runtime.progress import Progress
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.loading import encode_prompt
from comlrl_lightning.team.team import Team


@dataclass
class Candidates:
    """``K`` candidates per agent for a list of items: ``completions[agent][item][j]``."""

    prompts: List[List[str]]  # [item][agent]
    prompt_ids: List[List[List[int]]]  # [item][agent]
    completions: List[List[List[Completion]]]  # [agent][item][j]

    def texts(self, item_index: int) -> List[List[str]]:
        """``texts[agent][j]`` for one item."""
        return [[c.text for c in per_agent[item_index]] for per_agent in self.completions]


def sample_candidates(
    team: Team,
    task: Task,
    items: Sequence[Dict[str, Any]],
    num_candidates: int,
    settings: GenerationSettings,
    stream: Optional[RandomStream] = None,
    progress: Optional[Progress] = None,
    generator: Optional[Generator] = None,
) -> Candidates:
    """Every agent samples ``num_candidates`` completions of its own prompt for every item.

    Items share batched calls of ``generator`` (default :class:`HFGenerator`); ``progress``
    advances by one per (agent, item) prompt sampled, batch by batch where the backend reports.
    """
    generator = generator if generator is not None else HFGenerator()
    prompts = [task.prompts(item) for item in items]
    with progress.part(len(items) * team.num_agents) if progress is not None else contextlib.nullcontext():
        completions = sample_team(generator, team, prompts, num_candidates, settings, stream)
    prompt_ids = [
        [team.encode_prompts(agent, [prompts[k][agent]])[0] for agent in range(team.num_agents)]
        for k in range(len(items))
    ]
    return Candidates(prompts=prompts, prompt_ids=prompt_ids, completions=completions)


def mean_like_numpy(values: Sequence[float]) -> float:
    """``mean(values)``, ``0.0`` when empty, computed as the reference's ``float(numpy.mean(values))``.

    NumPy sums pairwise (eight running sums for eight or more values), so the last bit can differ
    from ``sum(values) / len(values)``; records must match the reference's byte for byte.
    """
    return float(np.mean(values)) if len(values) else 0.0


@dataclass
class CollectionResult:
    """The pairs of one collection, per item, and what it saw (processed candidate scores per item).

    An iterative collection also keeps every candidate's raw reward (before the reward processor)
    per item and side: the current team's (``target_raw_rewards``) and the comparator's.
    """

    item_pairs: List[List[PreferencePair]] = field(default_factory=list)
    scores: List[List[float]] = field(default_factory=list)
    target_raw_rewards: List[List[float]] = field(default_factory=list)
    comparator_raw_rewards: List[List[float]] = field(default_factory=list)
    unparsed: int = 0
    """Joint completions of a centralized team that did not split into roles (scored as empty roles)."""

    @property
    def pairs(self) -> List[PreferencePair]:
        return [pair for pairs in self.item_pairs for pair in pairs]

    @property
    def reward_mean(self) -> float:
        """Mean of every processed score of the collection (:func:`mean_like_numpy`)."""
        return mean_like_numpy([v for per_item in self.scores for v in per_item])


def build_pairs_within(
    candidates: Candidates,
    oracle: Scorer,
    items: Sequence[Dict[str, Any]],
    pair_selection: PairSelection,
    pairs_per_sample: Optional[int],
    stream: RandomStream,
) -> CollectionResult:
    """Base trainers: pairs between the candidates of one item, ties dropped (every item scored in one
    :meth:`~comlrl_lightning.data.Oracle.score_many`)."""
    result = CollectionResult()
    scored = score_requests(
        oracle, [(candidates.texts(k), candidates.prompts[k], item) for k, item in enumerate(items)]
    )
    for k, (_, scores) in enumerate(scored):
        result.scores.append(scores)
        mean = mean_like_numpy(scores)
        result.item_pairs.append([])
        for winner, loser in select_pairs(scores, pair_selection, pairs_per_sample, stream.python):
            per_agent = [c[k] for c in candidates.completions]
            result.item_pairs[-1].append(
                PreferencePair(
                    prompts=list(candidates.prompts[k]),
                    winner_completions=[c[winner].text for c in per_agent],
                    loser_completions=[c[loser].text for c in per_agent],
                    winner_reward=scores[winner],
                    loser_reward=scores[loser],
                    candidate_reward_mean=mean,
                    prompt_ids=[list(ids) for ids in candidates.prompt_ids[k]],
                    winner_ids=[list(c[winner].ids) for c in per_agent],
                    loser_ids=[list(c[loser].ids) for c in per_agent],
                )
            )
    return result


def select_against(
    scores: Dict[str, List[float]], pair_selection: str, pairs_per_sample: Optional[int], stream: RandomStream
) -> List[Tuple[int, str, str]]:
    """``(j, winner side, loser side)`` of one item's comparisons, current candidate ``j`` against
    comparator candidate ``j``, in the order ``pair_selection`` keeps them.

    Only ``j < min(K, K')`` are compared; ``gap_j = current_j - comparator_j``; the side with the
    higher score wins and ``gap_j = 0`` is dropped. ``comparator_reward`` sorts by
    ``(comparator_j, |gap_j|)`` descending, ``reward_gap`` by ``|gap_j|`` descending (stable),
    ``random`` shuffles with ``stream``, ``all`` keeps index order; all but ``all`` then keep the
    first ``pairs_per_sample`` (``None``: every one).
    """
    entries = []
    for j in range(min(len(scores["current"]), len(scores["comparator"]))):
        gap = scores["current"][j] - scores["comparator"][j]
        if gap != 0:
            winner, loser = ("current", "comparator") if gap > 0 else ("comparator", "current")
            entries.append((abs(gap), scores["comparator"][j], j, winner, loser))
    if pair_selection == "comparator_reward":
        entries.sort(key=lambda e: (e[1], e[0]), reverse=True)
    elif pair_selection == "reward_gap":
        entries.sort(key=lambda e: -e[0])
    elif pair_selection == "random":
        stream.python.shuffle(entries)
    if pair_selection != "all" and pairs_per_sample is not None:
        entries = entries[:pairs_per_sample]
    return [(j, winner, loser) for _, _, j, winner, loser in entries]


def build_pairs_against(
    current: Candidates,
    comparator: List[List[List[Completion]]],
    oracle: Scorer,
    items: Sequence[Dict[str, Any]],
    pair_selection: str,
    pairs_per_sample: Optional[int],
    stream: RandomStream,
) -> CollectionResult:
    """Iterative trainers: current candidate ``j`` against comparator candidate ``j``, selected per
    item by :func:`select_against`. ``candidate_reward_mean`` averages every processed score of both
    sides. Both sides of every item are scored in one :meth:`~comlrl_lightning.data.Oracle.score_many`."""
    result = CollectionResult()
    per_item = [
        {
            "current": [per_agent[k] for per_agent in current.completions],
            "comparator": [per_agent[k] for per_agent in comparator],
        }
        for k in range(len(items))
    ]
    requests = [
        ([[c.text for c in cs] for cs in sides[side]], current.prompts[k], items[k])
        for k, sides in enumerate(per_item)
        for side in ("current", "comparator")
    ]
    scored = score_requests(oracle, requests)
    for k, sides in enumerate(per_item):
        prompts = current.prompts[k]
        raw, scores = {}, {}
        for offset, side in enumerate(("current", "comparator")):
            raw[side], scores[side] = scored[2 * k + offset]
        all_scores = scores["current"] + scores["comparator"]
        result.scores.append(all_scores)
        result.target_raw_rewards.append(raw["current"])
        result.comparator_raw_rewards.append(raw["comparator"])
        mean = mean_like_numpy(all_scores)
        result.item_pairs.append([])
        for j, winner, loser in select_against(scores, pair_selection, pairs_per_sample, stream):
            result.item_pairs[-1].append(
                PreferencePair(
                    prompts=list(prompts),
                    winner_completions=[cs[j].text for cs in sides[winner]],
                    loser_completions=[cs[j].text for cs in sides[loser]],
                    winner_reward=scores[winner][j],
                    loser_reward=scores[loser][j],
                    candidate_reward_mean=mean,
                    raw_rewards=[raw[winner][j], raw[loser][j]],
                    target_raw_reward=raw["current"][j],
                    comparator_raw_reward=raw["comparator"][j],
                    prompt_ids=[list(ids) for ids in current.prompt_ids[k]],
                    winner_ids=[list(cs[j].ids) for cs in sides[winner]],
                    loser_ids=[list(cs[j].ids) for cs in sides[loser]],
                )
            )
    return result


def merge_results(parts: Sequence[CollectionResult], world: int) -> CollectionResult:
    """One result from the ranks' results on item shards ``items[rank::world]`` (item order restored)."""
    return CollectionResult(
        item_pairs=unshard([part.item_pairs for part in parts], world),
        scores=unshard([part.scores for part in parts], world),
        target_raw_rewards=unshard([part.target_raw_rewards for part in parts], world),
        comparator_raw_rewards=unshard([part.comparator_raw_rewards for part in parts], world),
        unparsed=sum(part.unparsed for part in parts),
    )


def pair_from_record(record: Dict[str, Any], team: Team) -> PreferencePair:
    """A stored record made trainable: texts re-tokenized with each agent's tokenizer (as the reference).

    Prompts are encoded as sampling encodes them (:func:`~comlrl_lightning.team.encode_prompt`: the
    tokenizer's special tokens, no second BOS), completions without special tokens (the EOS is not in the text).
    """
    if is_trajectory_record(record):
        return trajectory_pair_from_record(record, team)
    pair = PreferencePair.from_record(record, team.num_agents)
    for agent, tokenizer in enumerate(team.tokenizers):
        pair.prompt_ids.append(encode_prompt(tokenizer, pair.prompts[agent]))
        pair.winner_ids.append(tokenizer(pair.winner_completions[agent], add_special_tokens=False)["input_ids"])
        pair.loser_ids.append(tokenizer(pair.loser_completions[agent], add_special_tokens=False)["input_ids"])
    return pair


def trajectory_pair_from_record(record: Dict[str, Any], team: Team) -> TrajectoryPair:
    """A stored multi-turn record made trainable: every turn's prompt and completion of every agent
    re-tokenized as :func:`pair_from_record` does a single turn's."""
    pair = TrajectoryPair.from_record(record, team.num_agents)
    for side in (pair.winner_turns, pair.loser_turns):
        for agent, tokenizer in enumerate(team.tokenizers):
            side.prompt_ids.append([encode_prompt(tokenizer, prompt) for prompt in side.prompts[agent]])
            side.ids.append(
                [tokenizer(text, add_special_tokens=False)["input_ids"] for text in side.completions[agent]]
            )
    pair.prompt_ids = [ids[0] for ids in pair.winner_turns.prompt_ids]
    pair.winner_ids = [ids[0] for ids in pair.winner_turns.ids]
    pair.loser_ids = [ids[0] for ids in pair.loser_turns.ids]
    return pair
