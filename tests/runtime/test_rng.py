"""Random streams a component owns: independent of the global generators and of each other, derived
from ``(seed, keys)``, and checkpointed so that a resumed run draws what an uninterrupted one would."""

from __future__ import annotations

import json
import random

import torch

from comlrl_lightning.runtime.rng import RandomStream, derived_seed, epoch_order_seed


def _draw(stream: RandomStream) -> tuple:
    with stream.active("cpu"):
        tensor = torch.rand(3).tolist()
    return tensor, stream.python.random()


def test_a_stream_continues_where_its_last_block_left_and_leaves_the_global_generator_as_it_was():
    stream = RandomStream(7)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first, second = _draw(stream), _draw(stream)
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is untouched
    assert first != second  # the second block goes on from the first's state, it does not start over
    fresh = RandomStream(7)
    assert (_draw(fresh), _draw(fresh)) == (first, second)
    with RandomStream(7).active():  # the first block starts from the seed, as torch.manual_seed(7) does
        from_stream = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(from_stream, torch.rand(3))


def test_two_streams_never_consume_each_others_randomness():
    alone = RandomStream(1)
    expected = [_draw(alone) for _ in range(3)]
    mixed, other = RandomStream(1), RandomStream(1)
    drawn = []
    for _ in range(3):
        drawn.append(_draw(mixed))
        _draw(other)  # in between: the same seed, its own state
    assert drawn == expected


def test_a_restored_state_draws_what_the_uninterrupted_stream_draws_also_through_json():
    stream, twin = RandomStream(3), RandomStream(3)
    _draw(stream), _draw(twin)
    stream.state_dict()["torch"]["cpu"].zero_()  # what is handed out is a copy: changing it changes nothing
    state = stream.state_dict()
    expected = [_draw(twin) for _ in range(2)]
    assert [_draw(stream) for _ in range(2)] == expected
    restored = RandomStream(99)
    restored.load_state_dict(state)
    assert restored.seed == 3 and [_draw(restored) for _ in range(2)] == expected
    # a checkpoint may store random.getstate()'s nested tuples as lists
    again = RandomStream(0)
    again.load_state_dict(dict(state, python=json.loads(json.dumps(state["python"]))))
    assert [_draw(again) for _ in range(2)] == expected


def test_reseeding_starts_over_from_the_new_seed():
    stream = RandomStream(5)
    _draw(stream)
    stream.reseed(11)
    assert stream.seed == 11 and _draw(stream) == _draw(RandomStream(11))


def test_derived_seeds_depend_on_every_key_and_its_order_and_fit_63_bits():
    seeds = {
        derived_seed(0, "collect", 1, 0),
        derived_seed(0, "collect", 0, 1),
        derived_seed(1, "collect", 1, 0),
        derived_seed(0, "replay", 1, 0),
        derived_seed(0, "collect", 1),
    }
    assert len(seeds) == 5 and all(0 <= seed < 2**63 for seed in seeds)
    assert derived_seed(0, "collect", 1, 0) == derived_seed(0, "collect", 1, 0)
    assert RandomStream.derive(4, "x", 2).seed == derived_seed(4, "x", 2)
    # recorded runs depend on the exact hash: sha256 of repr((seed, *keys)), first 8 bytes, little endian, >> 1
    assert derived_seed(0, "collect", 0, 0) == 5644540146465977444


def test_the_epoch_order_seed_is_linear_in_the_epoch_as_recorded_runs_need():
    assert [epoch_order_seed(2, epoch) for epoch in range(3)] == [2_000_006, 2_000_007, 2_000_008]
    assert random.Random(epoch_order_seed(0, 1)).random() == random.Random(1).random()
