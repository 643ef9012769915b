"""The data module's state in a checkpoint (data_state.py): a state that lacks a field is one error naming
the checkpoint file."""

from __future__ import annotations

import pytest
import torch

from tests.trainers.test_checkpoints import madpo_iter


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_checkpoint_whose_data_state_lacks_a_field_is_one_error_naming_the_file(tmp_path):
    from comlrl_lightning.errors import DataError

    madpo_iter(tmp_path, 1).train(checkpoint_dir=str(tmp_path / "ckpt"))
    path = tmp_path / "ckpt" / "checkpoint-1" / "checkpoint.ckpt"
    state = torch.load(path, weights_only=True)
    del state["callbacks"]["comlrl_lightning.data"]["replay"]["shards"][0]["sha256"]
    torch.save(state, path)
    with pytest.raises(
        DataError, match="the data state .* is corrupt or of a newer version .*'sha256' missing"
    ) as caught:
        madpo_iter(tmp_path, 2).train(resume_from_checkpoint=str(tmp_path / "ckpt"))
    assert str(path) in str(caught.value)
