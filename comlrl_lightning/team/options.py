"""What a team is made of, as options: its models, their tokenizers, dtype and devices, LoRA, memory.

:class:`TeamOptions` is the team module's ``team`` option (a nested section of a config, no
``class_path``); :class:`MemoryOptions` is its ``memory``; ``lora`` is peft's own ``LoraConfig``
(``class_path: peft.LoraConfig``, every field of it available). Both check their values when made,
so a bad config fails while it is parsed, before any model loads; :meth:`TeamOptions.build` then
makes the :class:`~comlrl_lightning.team.Team`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from jsonargparse.typing import PositiveInt
from peft import LoraConfig

from comlrl_lightning.defaults import EMBEDDED
from comlrl_lightning.runtime.devices import DeviceSpec
from comlrl_lightning.team.activation_checkpointing import enable_activation_checkpointing
from comlrl_lightning.team.loading import (
    ModelSource,
    add_special_tokens,
    check_attention,
    check_dtype,
    fit_embeddings,
)
from comlrl_lightning.team.lora import build_lora_agents, lora_for_agents
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import at_least, require


@dataclass(frozen=True)
class MemoryOptions:
    """How the agents save memory in training.

    Args:
        gradient_checkpointing: recompute each agent layer's activations during backward
            (transformers' activation checkpointing, non-reentrant): the activation memory of
            training falls to about one layer's, for about one more forward per step.
        checkpoint_every_n_layers: with ``gradient_checkpointing``, checkpoint only every n-th
            layer; the others keep their activations (memory traded back for speed).
        fused_lm_head: score tokens with the fused, chunked LM head (no ``[positions, vocabulary]``
            logits): ``None`` wherever the model's head is a plain linear layer (else the
            materialised logits), ``True`` always (an error where it cannot), ``False`` never.
        hold_agent_graphs: MADPO's joint loss: keep every agent's activations from its forward
            until the one backward (speed over memory: no second forward, N agents' activations
            at once). ``False`` (default): each agent's scoring forward runs again in the backward,
            so one agent's activations are alive at a time, as the reference's agent-by-agent
            backward; the gradient is the same. About one more forward per agent per step; no
            effect with ``gradient_checkpointing``, a LoRA team's one pass or sharded agents.
    """

    gradient_checkpointing: bool = False
    checkpoint_every_n_layers: PositiveInt = 1
    fused_lm_head: Optional[bool] = None
    hold_agent_graphs: bool = False

    def __post_init__(self) -> None:
        at_least("checkpoint_every_n_layers", self.checkpoint_every_n_layers, 1)


@dataclass(frozen=True)
class TeamOptions:
    """The agents of a team module: which models, how many, their tokenizers, dtype, devices,
    LoRA adapters and memory options.

    Args:
        agent_model: model for every agent: a hub id, a local path, or ``"embedded"`` (tiny local model).
        agents: one model per agent (hub ids / paths, or model objects from Python); overrides
            ``agent_model`` and sets the team size (a centralized team: one model).
        num_agents: number of roles (default: ``len(agents)``, else 2): the team size, or with a
            centralized ``collaboration`` the roles its one model writes; must match a
            decentralized ``agents`` list when both are given.
        tokenizers: tokenizer object(s), one for all agents or one per agent (Python API only):
            required for model objects; for model sources they replace the saved tokenizers (e.g.
            to give an agent another chat template). Prompts are rendered with each agent's own.
        dtype: torch dtype name for loaded models (``bfloat16``, ``float32``...); default: as saved.
        agent_devices: one device per agent inside one process (``None``/``auto``: the strategy's
            device; a device for all; a list of 1 or N). Single-process runs only: with DDP every
            process drives one device.
        lora: build the team as ONE base model with one adapter per agent (``agent_0`` ...), each
            made from this ``peft.LoraConfig`` (``class_path: peft.LoraConfig`` with any of its
            fields; ``task_type`` is ``CAUSAL_LM``); ``None``: every agent is a full model. All
            agents must then share one model source.
        lora_one_pass: a LoRA team scores and samples all its agents in one pass of the shared
            base, each row through its own agent's adapter (the same log-probabilities, gradients
            and tokens as one pass per agent, up to float rounding); ``False``: one pass per
            agent. Adapters that cannot be routed per row (DoRA, an adapter on the LM head,
            ``modules_to_save``) run agent by agent either way; without ``lora`` it has no effect.
        memory: activation checkpointing and the fused LM head (:class:`MemoryOptions`).
        attn_implementation: the attention of loaded models (``from_pretrained``'s: ``sdpa``,
            ``eager``, ``flash_attention_2``...; ``None``: transformers' choice).
        special_tokens: added to every agent's tokenizer (``tokenizer.add_special_tokens``, e.g.
            ``{additional_special_tokens: ["<tool>"]}``), each model's token embeddings grown to
            the tokenizer's size.
    """

    agent_model: str = EMBEDDED
    agents: Optional[List[str]] = None
    num_agents: Optional[int] = None
    tokenizers: Optional[Any] = None
    dtype: Optional[str] = None
    agent_devices: DeviceSpec = None
    lora: Optional[LoraConfig] = None
    lora_one_pass: bool = True
    memory: MemoryOptions = MemoryOptions()
    attn_implementation: Optional[str] = None
    special_tokens: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        at_least("num_agents", self.num_agents, 1, allow_none=True)
        check_dtype(self.dtype)  # before any model loads, not at the first one
        check_attention(self.attn_implementation)
        require(
            self.special_tokens is None or isinstance(self.special_tokens, dict),
            "special_tokens must be a mapping for tokenizer.add_special_tokens "
            "(e.g. {additional_special_tokens: [...]}).",
        )
        if self.lora is not None:
            at_least("lora.r", self.lora.r, 1)
            lora_for_agents(self.lora)  # its task type, now rather than when the team loads
            require(
                len({str(source) for source in self.agents or [self.agent_model]}) == 1,
                "lora: a LoRA team needs one base model for all agents (use agent_model, or identical agents).",
            )

    def sources(self, centralized: bool) -> List[ModelSource]:
        """One model source per agent: a centralized team has one model, a decentralized one a model per role."""
        if centralized:
            return list(self.agents or [self.agent_model])
        return list(self.agents) if self.agents else [self.agent_model] * (self.num_agents or 2)

    def load_tokenizers(self, sources: List[ModelSource]) -> List[Any]:
        """Each agent's tokenizer, loaded without the models (a LoRA team's adapters share its base's)."""
        if self.lora is None:
            tokenizers = Team.resolve_tokenizers(sources, self.tokenizers)
        else:
            # the base's tokenizer (a model object's is an error saying to pass tokenizers, as without LoRA)
            shared = self.tokenizers if self.tokenizers is not None else Team.resolve_tokenizers(sources[:1], None)[0]
            tokenizers = Team.resolve_tokenizers(sources, shared)
        add_special_tokens(tokenizers, self.special_tokens)
        return tokenizers

    def build(self, sources: List[ModelSource], tokenizers: List[Any]) -> Team:
        """The team: full models, or one base with an adapter per agent; checkpointed as ``memory`` says."""
        fused = self.memory.fused_lm_head
        attention = self.attn_implementation
        if self.lora is None:
            team = Team(sources, tokenizers, self.dtype, fused_head=fused, attn_implementation=attention)
            models = list(team.agents)
        else:
            agents = build_lora_agents(sources[0], len(sources), self.lora, self.dtype, attention)
            team = Team(agents, tokenizers, fused_head=fused, one_pass=self.lora_one_pass)
            team.loading = {"dtype": self.dtype, "attn_implementation": attention}
            models = [agents[0].get_base_model()]  # the one model the adapters share
        if self.special_tokens:
            for model, tokenizer in zip(models, tokenizers):
                fit_embeddings(model, tokenizer)
        if self.memory.gradient_checkpointing:
            for agent in team.agents:
                enable_activation_checkpointing(agent, self.memory.checkpoint_every_n_layers)
        return team


__all__ = ["MemoryOptions", "TeamOptions"]
