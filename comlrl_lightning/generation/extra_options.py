"""Further sampling options (``GenerationSettings.extra``): Hugging Face ``generate()`` keyword
arguments, checked by name before any sampling, and the ones vLLM can honour mapped onto its own.

The reference (CoMLRL) forwards ``train(**kwargs)`` to ``generate()`` verbatim. Here they are the
sampling settings' ``extra`` and reach every sampler alike (collection, comparators, evaluation,
rollouts): :class:`~comlrl_lightning.generation.HFGenerator` passes them to ``generate()`` (a name
``generate()`` does not know is an error now, not at the first sample), and
:class:`~comlrl_lightning.generation.VLLMGenerator` maps those vLLM supports (:data:`VLLM_NAMES`)
and refuses the others by name. Options the generators set themselves, and decoding modes that do
not sample a prompt's candidates (:data:`UNSUPPORTED`), are refused with the reason. Beam search
(``num_beams`` above 1) is ``generate()``'s own beam sampling, as the reference (CoMLRL) calls it,
one request per call with the global generators seeded from the request's seed: the same tokens
for the same request whatever the batching, up to float rounding.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Mapping, Optional

from comlrl_lightning.validation import OptionError

RESERVED: Dict[str, str] = {
    "num_return_sequences": "the candidate count is preference_num_candidates / num_generations",
    "max_new_tokens": "set it as the sampling setting max_new_tokens",
    "temperature": "set it as the sampling setting temperature",
    "top_p": "set it as the sampling setting top_p",
    "top_k": "set it as the sampling setting top_k",
    "do_sample": "preference collection samples (do_sample=True always)",
    "pad_token_id": "the agent's tokenizer's pad token marks the end of a completion",
    "return_dict_in_generate": "the generators read the sampled token ids only",
    "output_scores": "the generators read the sampled token ids only",
    "output_logits": "the generators read the sampled token ids only",
    "output_attentions": "the generators read the sampled token ids only",
    "output_hidden_states": "the generators read the sampled token ids only",
    "synced_gpus": "set by the generator for a sharded team",
    "logits_processor": "the generator's seeded sampler is the logits processor (every prompt draws from its own seed)",
    "inputs": "the prompts come from the task",
    "input_ids": "the prompts come from the task",
    "attention_mask": "the prompts come from the task",
}
"""``generate()`` options the generators set themselves, and why they cannot be given."""

UNSUPPORTED: Dict[str, str] = {
    "num_beam_groups": "group beam search does not sample (and transformers 5 loads it from the Hub as remote code)",
    "diversity_penalty": "group beam search does not sample (and transformers 5 loads it from the Hub as remote code)",
    "penalty_alpha": "contrastive search does not sample: every candidate of a prompt would be the same",
    "constraints": "constrained beam search does not sample (and transformers 5 loads it from the Hub as remote code)",
    "force_words_ids": "constrained beam search does not sample (and transformers 5 loads it from the Hub as remote code)",
    "dola_layers": "DoLa decoding is loaded from the Hub as remote code in transformers 5",
    "assistant_model": "assisted decoding samples one sequence per call, not a prompt's candidates together",
    "prompt_lookup_num_tokens": "assisted decoding samples one sequence per call, not a prompt's candidates together",
    "assistant_early_exit": "assisted decoding samples one sequence per call, not a prompt's candidates together",
}
"""``generate()`` options that cannot sample a prompt's candidates, and why (refused by name)."""

PLAIN_GENERATE_ONLY = frozenset({"num_beams"})
"""Options that need ``generate()``'s own expansion of the prompts (beam search): with them the
prompts' shared prefill is skipped."""


def beam_search(extra: Optional[Mapping[str, Any]]) -> bool:
    """Whether ``extra`` asks for beam search (``num_beams`` above 1): ``generate()``'s own beam
    sampling then replaces the seeded sampler, one request per call (from the request's seed)."""
    return int((extra or {}).get("num_beams") or 1) > 1


VLLM_NAMES: Dict[str, str] = {
    "repetition_penalty": "repetition_penalty",
    "min_p": "min_p",
    "min_new_tokens": "min_tokens",
}
"""The ``generate()`` options vLLM honours, and their ``SamplingParams`` names."""


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if type(value) in (list, tuple):  # a list subclass (StoppingCriteriaList) holds objects
        return all(_plain(item) for item in value)
    if type(value) is dict:
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    return False


def check_saveable(extra: Any) -> None:
    """``extra`` is a mapping of option names to plain values (numbers, text, lists and mappings of
    them): what a checkpoint saves, so a resume continues with every option. An option holding an
    object is an :class:`OptionError` naming it."""
    if extra is None:
        return
    if not isinstance(extra, Mapping):
        raise OptionError(f"generation options (extra) must be a mapping of option names (got {type(extra).__name__}).")
    for name, value in extra.items():
        if not _plain(value):
            raise OptionError(
                f"generation option {name} holds a {type(value).__name__} object: checkpoints save plain values "
                "only (numbers, text, lists and mappings of them), so a resume could not continue with it; give "
                "it as plain values (token ids, not a processor object)."
            )


def _generate_names() -> frozenset:
    from transformers import GenerationConfig, GenerationMixin

    names = set(GenerationConfig().to_dict()) | set(inspect.signature(GenerationMixin.generate).parameters)
    return frozenset(name for name in names if not name.startswith("_") and name not in ("self", "kwargs"))


def hf_generate_options(extra: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``extra`` as ``generate()`` keyword arguments; a reserved name or one ``generate()`` does not
    know is an :class:`OptionError` naming it."""
    extra = dict(extra or {})
    for name in sorted(extra):
        if name in RESERVED:
            raise OptionError(f"generation option {name} cannot be given here: {RESERVED[name]}.")
        if name in UNSUPPORTED:
            raise OptionError(f"generation option {name} is not supported: {UNSUPPORTED[name]}.")
    beams = extra.get("num_beams", 1)
    if isinstance(beams, bool) or not isinstance(beams, int) or beams < 1:
        raise OptionError(f"generation option num_beams must be a whole number >= 1 (got {beams!r}).")
    unknown = sorted(set(extra) - _generate_names())
    if unknown:
        raise OptionError(
            f"generation option(s) {', '.join(unknown)} unknown to Hugging Face generate() "
            "(see transformers.GenerationConfig for its options)."
        )
    return extra


def vllm_sampling_options(extra: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``extra`` as vLLM ``SamplingParams`` fields (:data:`VLLM_NAMES`); any other is an :class:`OptionError`."""
    extra = dict(extra or {})
    hf_generate_options(extra)
    unsupported = sorted(set(extra) - set(VLLM_NAMES))
    if unsupported:
        raise OptionError(
            f"VLLMGenerator: generation option(s) {', '.join(unsupported)} not supported by vLLM sampling "
            f"(supported: {', '.join(VLLM_NAMES)}); use HFGenerator for them."
        )
    return {VLLM_NAMES[name]: value for name, value in extra.items()}


__all__ = [
    "PLAIN_GENERATE_ONLY",
    "RESERVED",
    "UNSUPPORTED",
    "VLLM_NAMES",
    "beam_search",
    "check_saveable",
    "hf_generate_options",
    "vllm_sampling_options",
]
