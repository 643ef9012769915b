"""How a team's rows are laid out (batch_layout.py): prompts left-padded before their completions with a
mask of the scored tokens, agents' batches stacked and taken apart again, and completions grouped by length."""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning.team import batch_layout, packed_scoring
from comlrl_lightning.team.team import pack_sequences, stack_batches, unstack_rows
from tests.team.test_lora_routing import _batches, _team


def test_pack_sequences_layout():
    packed = pack_sequences([[1, 2, 3], [4]], [[5], [6, 7, 8]], [1, 2], pad_id=0)
    assert packed["input_ids"].tolist() == [[1, 2, 3, 5, 0, 0], [0, 0, 4, 6, 7, 8]]
    assert packed["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert packed["score_mask"].tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    with pytest.raises(ValueError, match="non-empty tokenized prompt"):
        pack_sequences([[1], []], [[5], [6]], [1, 1], pad_id=0)


def test_stacked_batches_keep_every_row_and_come_back_apart():
    team = _team()
    batches = _batches(team)
    stacked, groups = stack_batches(batches, 0)
    assert groups.tolist() == [a for a, b in enumerate(batches) for _ in range(b["input_ids"].shape[0])]
    for batch, back in zip(batches, unstack_rows(stacked["score_mask"], batches)):
        assert torch.equal(back, batch["score_mask"])
    ids = stacked["input_ids"][stacked["attention_mask"].bool()]
    assert torch.equal(ids, torch.cat([b["input_ids"][b["attention_mask"].bool()] for b in batches]))


def test_completion_groups_cover_each_fed_row_once_by_length():
    spans = [3, 30, 4, 31, 5, 29, 3, 30, 0]
    groups = packed_scoring.completion_groups(spans)
    assert sorted(r for group in groups for r in group) == [0, 1, 2, 3, 4, 5, 6, 7]  # row 8 feeds nothing
    assert len(groups) <= batch_layout.COMPLETION_GROUPS
    lengths = [[spans[r] for r in group] for group in groups]
    assert all(max(a) < min(b) for a, b in zip(lengths, lengths[1:]))  # consecutive length ranges
    assert packed_scoring.completion_groups(spans, groups=2) == [[0, 6, 2, 4], [5, 1, 7, 3]]  # short ones, long ones
    assert packed_scoring.completion_groups([5] * 4) == [[0, 1, 2, 3]] and packed_scoring.completion_groups([0]) == []
