"""The weights a vLLM engine is sent (vllm_weights.py): a LoRA agent's adapter merged into its base, and the
LoRA options the merged weights cannot carry refused by name. Nothing here needs vLLM."""

from __future__ import annotations

import pytest
from peft import LoraConfig

from comlrl_lightning import OptionError


@pytest.mark.parametrize(
    "field, value", [("use_dora", True), ("modules_to_save", ["ln_f"])], ids=["dora", "modules_to_save"]
)
def test_lora_options_the_merged_weights_cannot_carry_are_refused_by_name(field, value):
    from comlrl_lightning.generation.vllm_weights import merged_lora_weights
    from comlrl_lightning.team.lora import build_lora_agents

    agent = build_lora_agents("embedded", 1, LoraConfig(r=4, **{field: value}))[0]
    with pytest.raises(OptionError, match=f"lora.{field}: the vLLM generator sends plain LoRA adapters"):
        next(merged_lora_weights(agent))
    assert dict(merged_lora_weights(build_lora_agents("embedded", 1, LoraConfig(r=4))[0]))  # plain LoRA merges
