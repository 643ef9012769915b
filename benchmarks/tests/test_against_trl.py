"""benchmarks/against_trl.py: the tables and summary lines of the rows against Hugging Face TRL."""

from __future__ import annotations

import importlib

import pytest


def test_the_trl_tables_render_every_row_and_their_summary_lines(bench):
    against_trl = importlib.import_module("against_trl")
    parameters = {"tiny": {"parameters": 106816}, "small": {"parameters": 3188992}, "medium": {"parameters": 12.6e6}}
    side = lambda rate, share=None: {
        "pairs_per_s": rate,
        "steps_per_s": rate,
        "sampling_share": share,
        "peak_rss_mb": 500.0,
    }  # noqa: E731
    trl = {
        "plan": bench.common.TRL_FULL,
        "versions": {"trl": "1.16.0", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
        "check": {m: {"ours": {"positions": 960}, "trl": {"positions": 1672}} for m in ("tiny", "small")},
        **{
            row: {m: {"ours": side(4.0, 0.5), "trl": side(2.0, 0.75)} for m in ("tiny", "small")}
            for row in ("dpo_step", "dpo_fit", "grpo_step")
        },
    }
    table = against_trl.markdown(trl, parameters)
    assert "| DPO step, small | 3.19M | 2.00 pairs/s | 4.00 pairs/s | 2.00x | 500 / 500 |" in table
    assert "| GRPO step, tiny | 0.11M | 2.00 steps/s | 4.00 steps/s | 2.00x |" in table
    assert "small: TRL 1,672, ours 960" in table and "tiny: TRL 75%, ours 50%" in table
    assert dict(against_trl.summary(trl))["trl_grpo_step_speedup_small"] == 2.0
    name = bench.common.TRL_REAL["models"][0]
    real = dict(trl, plan=bench.common.TRL_REAL, check={name: trl["check"]["tiny"]})
    real.update(
        {row: {name: {"ours": side(0.3, 0.5), "trl": side(0.1, 0.9)}} for row in ("dpo_step", "dpo_fit", "grpo_step")}
    )
    assert (
        "| DPO step, smollm2-135m-instruct | 134.52M | 0.10 pairs/s | 0.30 pairs/s | 3.00x |"
        in against_trl.markdown(real, {name: {"parameters": 134515008}})
    )
    assert dict(against_trl.real_summary(real)) == pytest.approx(
        {"real_trl_dpo_step_speedup": 3.0, "real_trl_dpo_fit_speedup": 3.0, "real_trl_grpo_step_speedup": 3.0}
    )
