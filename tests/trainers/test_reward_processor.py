"""RewardProcessors (reward_processor.py): the reference's scale and shift, as picklable callables."""

from __future__ import annotations

import pickle

from comlrl_lightning.trainers.reward_processor import RewardProcessors


def test_scale_and_shift_compute_the_reference_values():
    assert RewardProcessors.scale(2.5)(0.4) == 0.4 * 2.5
    assert RewardProcessors.shift(-1.0)(0.25) == -0.75
    assert RewardProcessors.scale()(3.0) == 3.0 and RewardProcessors.shift()(3.0) == 3.0


def test_processors_pickle_and_print_as_written():
    processor = pickle.loads(pickle.dumps(RewardProcessors.scale(3.0)))
    assert processor(2.0) == 6.0 and repr(processor) == "RewardProcessors.scale(3.0)"
