"""The process-group helpers of comlrl_lightning.runtime.distributed that need no second process."""

from __future__ import annotations

import torch.distributed as dist

from comlrl_lightning.runtime.distributed import close_process_group


def test_closing_the_process_group_destroys_it_and_is_a_no_op_without_one(tmp_path):
    close_process_group()  # nothing to close
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    dist.new_group([0])  # a subgroup, as a device mesh makes: destroyed with the default group
    assert dist.is_initialized()
    close_process_group()
    assert not dist.is_initialized()
