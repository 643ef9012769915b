"""A team's options (options.py): a bad dtype or attention implementation refused when the options are made,
before any model loads; every good one passes."""

from __future__ import annotations

import re

import pytest

from comlrl_lightning.team.options import TeamOptions
from comlrl_lightning.trainers.mapping import model_loading


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(dtype="float33"), "dtype must name a floating torch dtype"),
        (dict(dtype="torch.float16"), "not 'torch.float16'"),
        (dict(attn_implementation="sdpa2"), "attn_implementation 'sdpa2' is not an attention implementation"),
        (dict(attn_implementation="paged|bogus"), "'paged|bogus' is not an attention"),
    ],
)
def test_team_options_refuse_a_bad_dtype_or_attention_when_made(options, message):
    from comlrl_lightning.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=re.escape(message)):
        TeamOptions(**options)


def test_good_dtypes_and_attentions_pass_and_auto_is_as_saved():
    for dtype in (None, "float32", "bfloat16", "float16"):
        TeamOptions(dtype=dtype)
    for attention in (
        None,
        "eager",
        "sdpa",
        "flash_attention_2",
        "flex_attention",
        "paged|sdpa",
        "kernels-community/x",
    ):
        TeamOptions(attn_implementation=attention)
    assert model_loading({"torch_dtype": "auto"})["dtype"] is None
