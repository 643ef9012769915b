"""Round records made trainable again: a stored record's texts re-tokenized with each agent's tokenizer.

A round file keeps texts only (:meth:`~comlrl_lightning.rounds.pairs.PreferencePair.to_record`); a
replay draw that takes records of earlier rounds turns each back into a pair training can score.
"""

from __future__ import annotations

from typing import Any, Dict

from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.trajectory_pairs import TrajectoryPair, is_trajectory_record
from comlrl_lightning.team.loading import encode_prompt
from comlrl_lightning.team.team import Team


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


__all__ = ["pair_from_record", "trajectory_pair_from_record"]
