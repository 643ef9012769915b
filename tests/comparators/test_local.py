"""The local comparators (local.py): a model comparator loads the models it names, a copy of the current
team is made only where a device differs, and the history comparator names the snapshot each round needs."""

from __future__ import annotations

import torch

from comlrl_lightning import CurrentComparator, CurrentCopyComparator, HistoryComparator, ModelComparator
from tests.comparators.test_comparators import context


def test_model_comparator_loads_the_models_it_names_on_the_agents_devices(team):
    comparator = ModelComparator(agents=["embedded", "embedded"])
    comparator.bind(context(team))
    source = comparator.source()
    assert source.num_agents == 2 and source.agents[0] is not team.agents[0]
    assert not any(p.requires_grad for p in source.parameters())
    assert comparator.source() is source  # loaded once


def test_current_copy_copies_only_when_a_device_differs(team):
    same = CurrentCopyComparator()
    same.bind(context(team))
    same.start_round(0)
    assert same.source() is team
    moved = CurrentCopyComparator(devices="cpu:0")  # another name of the CPU: a real, frozen copy
    moved.bind(context(team))
    moved.start_round(0)
    copy = moved.source()
    assert copy is not team and torch.equal(copy.agents[0].lm_head.weight, team.agents[0].lm_head.weight)
    moved.end_round()
    assert moved.source() is team


def test_history_comparator_names_the_snapshot_each_round_needs():
    assert [HistoryComparator(k=2).snapshot_round(r) for r in range(4)] == [0, 0, 0, 1]
    assert CurrentComparator().snapshot_round(3) is None
