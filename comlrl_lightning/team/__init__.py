"""The team: N causal-LM agents, their tokenizers, and batched sequence scoring.

:class:`Team` holds the models and tokenizers and scores completions; where they come from is
:mod:`.loading`, and what a team module is told about them (models, LoRA, memory) is
:class:`TeamOptions` (:mod:`.options`). How a team scores and samples is its plan, decided when it
is built (:mod:`.scoring_plan`). The internals that make scoring fast and memory-light live beside it: LoRA teams
on one shared base (:mod:`.lora`), scored and sampled in one pass for all agents
(:mod:`.lora_routing`), packed scoring without padding (:mod:`.packed_scoring`, rows laid out by :mod:`.batch_layout`), the
fused, chunked LM head (:mod:`.fused_head`) and activation checkpointing
(:mod:`.activation_checkpointing`). A team's agents are saved as Hugging Face folders by
:mod:`.saving`. Sampling is not here: a generator
(:mod:`comlrl_lightning.generation`) samples with a team's agents.

Imports: :mod:`comlrl_lightning.runtime` and the foundation modules (``options``, ``losses``,
``defaults``); nothing above.
"""

from comlrl_lightning.team.loading import (
    ModelSource,
    encode_prompt,
    load_model,
    load_tokenizer,
)
from comlrl_lightning.team.options import MemoryOptions, TeamOptions
from comlrl_lightning.team.team import Team, left_pad, pack_sequences

__all__ = [
    "MemoryOptions",
    "ModelSource",
    "Team",
    "TeamOptions",
    "encode_prompt",
    "left_pad",
    "load_model",
    "load_tokenizer",
    "pack_sequences",
]
