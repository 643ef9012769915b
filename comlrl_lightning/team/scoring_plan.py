"""How a team scores and samples: decided once, when the team is built.

A team's agents are either full models or LoRA views of one shared base (:mod:`.lora`). A LoRA
team runs its agents either one by one (each forward switches the adapter) or all in one pass of
the base, each row through its own agent's adapter (:mod:`.lora_routing`). That choice, and
whether the LM head is fused (:mod:`.fused_head`), is a :class:`ScoringPlan` made when the team
is built and made again only when what it depends on changes (the ``one_pass`` switch, sharding);
scoring and sampling read it instead of asking on every call. Whether a model is scored packed
or padded (:mod:`.packed_scoring`) is decided per model, once, and a fallback to padded scoring
names its reason once in the log.

A generator reads a :class:`SamplingPlan` (:meth:`~comlrl_lightning.team.Team.sampling_plan`):
every agent's encoded prompts, the agent of each prompt, and for a one-pass team the routed model
that samples all agents' prompts in the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from torch import nn

from comlrl_lightning.team.lora import is_lora_team
from comlrl_lightning.team.lora_routing import supports_mixed_adapters
from comlrl_lightning.team.packed_scoring import fall_back, packing_refusal

FULL_MODELS = "full models"
LORA_PER_AGENT = "LoRA agent by agent"
LORA_ONE_PASS = "LoRA in one pass"


@dataclass(frozen=True)
class ScoringPlan:
    """How a team runs its agents.

    Attributes:
        lora: the agents are LoRA views of one shared base model
            (:func:`~comlrl_lightning.team.lora.is_lora_team`, asked here once).
        adapters: each agent's adapter name when all agents run in one pass of the shared base;
            ``None``: agent by agent.
        fused_head: the LM head policy: ``None`` fused where the head allows it, ``True`` always,
            ``False`` never (materialised logits; always so for a sharded team, whose head's
            weight exists only inside its forward).
        padded: per agent, why its model is scored with padded forwards rather than packed, as
            known before any call (``None``: packed, unless its attention refuses at the first call).
    """

    lora: bool
    adapters: Optional[Tuple[str, ...]]
    fused_head: Optional[bool]
    padded: Tuple[Optional[str], ...] = ()

    @property
    def one_pass(self) -> bool:
        return self.adapters is not None

    @property
    def kind(self) -> str:
        """:data:`FULL_MODELS`, :data:`LORA_PER_AGENT` or :data:`LORA_ONE_PASS`."""
        if not self.lora:
            return FULL_MODELS
        return LORA_ONE_PASS if self.one_pass else LORA_PER_AGENT

    def __str__(self) -> str:
        head = {None: "fused head where it allows", True: "fused head", False: "materialised logits"}
        return f"{self.kind}, {head[self.fused_head]}"


def one_pass_adapters(agents: Sequence[Any], tokenizers: Sequence, lora: bool) -> Optional[Tuple[str, ...]]:
    """The agents' adapter names when they can run in one pass: at least two LoRA views of one
    model whose adapter layers can be routed per row
    (:func:`~comlrl_lightning.team.lora_routing.supports_mixed_adapters`) and tokenizers that share
    the pad and EOS ids; ``None`` otherwise."""
    if not lora or len(agents) < 2:
        return None
    if len({(t.pad_token_id, t.eos_token_id) for t in tokenizers}) != 1:
        return None
    return tuple(agent.adapter for agent in agents) if supports_mixed_adapters(agents[0].shared) else None


def decide_scoring_plan(
    agents: Sequence[nn.Module], tokenizers: Sequence, one_pass: bool, fused_head: Optional[bool], synced: bool
) -> ScoringPlan:
    """The :class:`ScoringPlan` of a team of ``agents`` (one pass only when ``one_pass`` allows it).
    An agent that cannot be scored packed is set to padded scoring here, its reason logged once."""
    lora = is_lora_team(agents)
    adapters = one_pass_adapters(agents, tokenizers, lora) if one_pass else None
    padded = tuple(packing_refusal(agent) for agent in agents)
    for agent, reason in zip(agents, padded):
        if reason is not None:
            fall_back(agent, reason)
    return ScoringPlan(lora=lora, adapters=adapters, fused_head=False if synced else fused_head, padded=padded)


@dataclass
class SamplingPlan:
    """One collection's prompts as a generator samples them.

    Attributes:
        encoded: every agent's encoded prompts, ``encoded[agent][prompt]``.
        route: for a one-pass LoRA team, the shared model with each prompt (``[prompts]`` agent
            indices) through its own agent's adapter; ``None``: the team samples agent by agent.
    """

    encoded: List[List[List[int]]]
    route: Optional[Callable[[torch.Tensor], nn.Module]] = None

    @property
    def one_pass(self) -> bool:
        return self.route is not None

    @property
    def agents(self) -> List[int]:
        """The agent of every prompt, all agents' prompts in order."""
        return [agent for agent, prompts in enumerate(self.encoded) for _ in prompts]

    @property
    def prompts(self) -> List[List[int]]:
        """Every agent's encoded prompts, flattened in agent order."""
        return [ids for prompts in self.encoded for ids in prompts]

    def per_agent(self, flat: Sequence) -> List[list]:
        """Values of the flattened prompts (:attr:`prompts`) back into one list per agent."""
        out, start = [], 0
        for prompts in self.encoded:
            out.append(list(flat[start : start + len(prompts)]))
            start += len(prompts)
        return out


__all__ = [
    "FULL_MODELS",
    "LORA_ONE_PASS",
    "LORA_PER_AGENT",
    "SamplingPlan",
    "ScoringPlan",
    "decide_scoring_plan",
    "one_pass_adapters",
]
