"""Sampling: how a team's agents write completions.

:class:`Generator` is the base a backend subclasses; :class:`HFGenerator` (the default) samples
with Hugging Face ``generate()`` on the agents' own models, :class:`VLLMGenerator` (optional,
needs vLLM) with vLLM engines colocated in the training process and kept in sync with the
weights. :class:`GenerationSettings` says what to sample, :class:`Completion` is what comes back,
and :func:`sample_team` has every agent of a team sample its own prompts (a LoRA team's agents in
one pass with :class:`HFGenerator`). Every prompt draws from its own seed, drawn from the caller's
stream (:mod:`~comlrl_lightning.generation.seeded_sampling`), so what is sampled does not depend
on how prompts are batched.

Imports: :mod:`comlrl_lightning.team` and :mod:`comlrl_lightning.runtime` (and the foundation
modules: ``options``, ``losses``, ``defaults``); nothing above.
"""

from comlrl_lightning.generation.base import (
    Completion,
    GenerationSettings,
    Generator,
    completion_from_ids,
    sample_team,
)
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.vllm import VLLMGenerator

__all__ = [
    "Completion",
    "GenerationSettings",
    "Generator",
    "HFGenerator",
    "VLLMGenerator",
    "completion_from_ids",
    "sample_team",
]
