"""Further sampling options: generate()'s names checked before sampling, vLLM's mapped or refused by name."""

from __future__ import annotations

import pytest

from comlrl_lightning.generation.base import GenerationSettings, Generator
from comlrl_lightning.generation.extra_options import hf_generate_options, vllm_sampling_options
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.validation import OptionError


def test_generate_options_pass_through_and_may_override_eos():
    extra = {"repetition_penalty": 1.3, "eos_token_id": 7}
    assert hf_generate_options(extra) == extra
    HFGenerator().check_settings(GenerationSettings(max_new_tokens=4, extra=extra))


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"num_return_sequences": 3}, "num_return_sequences cannot be given here: the candidate count"),
        ({"temperature": 0.5}, "set it as the sampling setting temperature"),
        ({"return_dict_in_generate": True}, "read the sampled token ids only"),
        ({"logits_processor": []}, "seeded sampler is the logits processor"),
        ({"repetiton_penalty": 1.1}, "repetiton_penalty unknown to Hugging Face generate()"),
        ({"num_beams": 4, "num_beam_groups": 2}, "num_beam_groups is not supported: group beam search does not sample"),
        ({"penalty_alpha": 0.6}, "penalty_alpha is not supported: contrastive search does not sample"),
        ({"prompt_lookup_num_tokens": 3}, "prompt_lookup_num_tokens is not supported: assisted decoding"),
        ({"num_beams": 0}, "num_beams must be a whole number >= 1 \\(got 0\\)"),
        ({"num_beams": "2"}, "num_beams must be a whole number >= 1 \\(got '2'\\)"),
        ({"num_beams": True}, "num_beams must be a whole number >= 1 \\(got True\\)"),
    ],
)
def test_reserved_and_unknown_names_are_refused_by_name(extra, message):
    with pytest.raises(OptionError, match=message):
        HFGenerator().check_settings(GenerationSettings(extra=extra))


def test_vllm_maps_what_it_supports_and_refuses_the_rest_by_name():
    assert vllm_sampling_options({"repetition_penalty": 1.2, "min_new_tokens": 2}) == {
        "repetition_penalty": 1.2,
        "min_tokens": 2,
    }
    with pytest.raises(OptionError, match="VLLMGenerator: generation option\\(s\\) no_repeat_ngram_size not supported"):
        vllm_sampling_options({"no_repeat_ngram_size": 2, "min_p": 0.1})
    assert hf_generate_options(None) == {}


def test_a_backend_without_extra_options_refuses_them():
    with pytest.raises(OptionError, match="Generator takes no further generation options \\(got min_p\\)"):
        Generator().check_settings(GenerationSettings(extra={"min_p": 0.1}))
