"""The data modules' loaders (loaders.py): a shuffle fixed by seed and epoch, and loaders asked for at
every pass that hand on a restored mid-epoch state."""

from __future__ import annotations

import pytest

from comlrl_lightning.datamodules.loaders import EpochShuffleSampler


def test_epoch_shuffle_depends_only_on_seed_and_epoch():
    a, b = EpochShuffleSampler(10, seed=3), EpochShuffleSampler(10, seed=3)
    a.set_epoch(2), b.set_epoch(2)
    assert list(a) == list(b) and sorted(a) == list(range(10))
    b.set_epoch(3)
    assert list(a) != list(b)


def test_epoch_loaders_ask_for_the_loader_at_every_pass_set_its_epoch_and_hand_on_a_restored_state():
    from comlrl_lightning.datamodules.loaders import EpochLoaders, ResumablePairLoader

    epoch, made = [0], []

    def current(asked):
        assert asked == epoch[0]  # the epoch about to draw, as epoch() names it
        size = 4 + asked  # a round's size changes from epoch to epoch
        made.append(ResumablePairLoader(list(range(size)), 2, EpochShuffleSampler(size, seed=1), list, lambda: 1))
        return made[-1]

    loaders = EpochLoaders(current, epoch=lambda: epoch[0])
    with pytest.raises(TypeError):
        len(loaders)  # Lightning ends each epoch when the batches run out
    first = [item for batch in loaders for item in batch]
    epoch[0] = 1
    second = [item for batch in loaders for item in batch]
    assert sorted(first) == list(range(4)) and sorted(second) == list(range(5))
    assert len(made) == 2 and made[1].sampler.epoch == 1
    reference = EpochShuffleSampler(5, seed=1)
    reference.set_epoch(1)
    assert second == list(reference)
    assert loaders.state_dict() == {"epoch": 1, "batches_done": 1}
    loaders.load_state_dict({"epoch": 1, "batches_done": 1})  # a mid-epoch resume: one batch done
    resumed = [item for batch in loaders for item in batch]
    assert resumed == second[2:]
