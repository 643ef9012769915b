"""A team of N causal-LM agents: their models, their tokenizers and batched sequence scoring.

How the team scores (full models, LoRA agent by agent or in one pass; fused head or logits) is
its :class:`~comlrl_lightning.team.scoring_plan.ScoringPlan`, decided when the team is built;
:meth:`Team.score` is the one public scoring method and follows it: token or sequence
log-probabilities, each agent's graph held until the backward or recomputed in it. Sampling lives
in :mod:`comlrl_lightning.generation` (a generator samples with a team's agents); where models and
tokenizers come from lives in :mod:`comlrl_lightning.team.loading`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.losses import gathered_logprobs
from comlrl_lightning.runtime.sharding import shard_model
from comlrl_lightning.team.batch_layout import left_pad, pack_sequences, stack_batches, unstack_rows
from comlrl_lightning.team.fused_head import (
    captured_head_if,
    fusable_head,
    linear_logprobs,
    output_head,
)
from comlrl_lightning.team.loading import (
    ModelSource,
    encode_prompt,
    load_model,
    load_tokenizer,
    prepare_tokenizer,
)
from comlrl_lightning.team.lora import BaseModelView, LoraAgent
from comlrl_lightning.team.lora_routing import MixedAdapters
from comlrl_lightning.team.packed_scoring import packed_token_logprobs
from comlrl_lightning.team.scoring_plan import SamplingPlan, ScoringPlan, decide_scoring_plan

ScoreUnit = Literal["token", "sequence"]
"""What :meth:`Team.score` returns per row: every scored token's log-probability, or their sum."""
Graphs = Literal["held", "recompute"]
"""Whether :meth:`Team.score` keeps each forward's activations for the backward or recomputes them there."""


class Team(nn.Module):
    """N agents, each a causal LM with its own tokenizer.

    Args:
        agents: one model source per agent: a hub id, a local path, ``"embedded"``, or a model object.
        tokenizers: one tokenizer per agent, or one shared by all; required for model objects,
            loaded from the model source otherwise.
        dtype: torch dtype name for models loaded from a source (``"bfloat16"``...), default: as saved.
        fused_head: score with the fused, chunked LM head: ``None`` where the head allows it,
            ``True`` always (an error where it does not), ``False`` never (materialised logits).
        synced: the agents are already sharded across processes (FSDP2); :meth:`shard` sets it for a
            team it shards itself.
        one_pass: a LoRA team scores and samples every agent in one pass of its shared base
            (:meth:`one_pass_adapters`); ``False``: agent by agent. Kept as the attribute
            :attr:`one_pass` (setting it makes the plan again).

    What these decide is the team's :attr:`plan`, made here and again only when the one-pass
    switch changes or the team is sharded (:meth:`shard`).
    """

    def __init__(
        self,
        agents: Sequence[ModelSource],
        tokenizers=None,
        dtype: Optional[str] = None,
        fused_head: Optional[bool] = None,
        synced: bool = False,
        one_pass: bool = True,
        attn_implementation: Optional[str] = None,
    ) -> None:
        super().__init__()
        if not agents:
            raise ConfigurationError("A team needs at least one agent.")
        self.agents = nn.ModuleList([load_model(source, dtype, attn_implementation) for source in agents])
        # how the team's models were loaded: the parts beside it (reward model, critics) load so too
        self.loading: Dict[str, Any] = {"dtype": dtype, "attn_implementation": attn_implementation}
        self.tokenizers = self.resolve_tokenizers(agents, tokenizers)
        self._fused_head, self._synced, self._one_pass = fused_head, synced, one_pass
        self.plan: ScoringPlan = self._decide_plan()

    def _decide_plan(self) -> ScoringPlan:
        return decide_scoring_plan(list(self.agents), self.tokenizers, self._one_pass, self._fused_head, self._synced)

    @property
    def one_pass(self) -> bool:
        """Whether a LoRA team may run every agent in one pass (see :attr:`plan`)."""
        return self._one_pass

    @one_pass.setter
    def one_pass(self, value: bool) -> None:
        self._one_pass = value
        self.plan = self._decide_plan()

    @property
    def is_lora(self) -> bool:
        """Whether the agents are LoRA views of one shared base model."""
        return self.plan.lora

    @staticmethod
    def resolve_tokenizers(agents: Sequence[ModelSource], tokenizers) -> list:
        """One prepared tokenizer per agent: ``tokenizers`` (one for all, or one per agent), else
        each loaded from the agent's source (one load per distinct source)."""
        if tokenizers is None:
            names = [source for source in agents if isinstance(source, str)]
            if len(names) != len(agents):
                raise ConfigurationError("Tokenizer(s) must be provided when agents are model objects.")
            cache: Dict[str, Any] = {}
            for name in names:
                if name not in cache:
                    cache[name] = load_tokenizer(name)
            return [cache[name] for name in names]
        if not isinstance(tokenizers, (list, tuple)):
            tokenizers = [tokenizers] * len(agents)
        if len(tokenizers) != len(agents):
            raise ConfigurationError("tokenizers length must match agents.")
        return [prepare_tokenizer(tokenizer) for tokenizer in tokenizers]

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    def lora_agent(self, agent_index: int) -> LoraAgent:
        """Agent ``agent_index`` of a LoRA team (:attr:`is_lora`): a view of the one shared peft model."""
        agent = self.agents[agent_index]
        if not isinstance(agent, LoraAgent):
            raise TypeError(f"agent {agent_index} is not a LoRA agent (a {type(agent).__name__}).")
        return agent

    def device_of(self, agent_index: int) -> torch.device:
        return next(self.agents[agent_index].parameters()).device

    def encode_prompts(self, agent_index: int, prompts: Sequence[str]) -> List[List[int]]:
        return [encode_prompt(self.tokenizers[agent_index], prompt) for prompt in prompts]

    # ------------------------------------------------------------------------------------------
    # Scoring

    def scored_length(self, agent_index: int, completion: Sequence[int], score_last_token: bool) -> int:
        """How many leading completion tokens are scored. ``False`` (the reference's MADPO): cut at
        the first pad id (the EOS when pad == eos), then leave out the last token. ``True``: the
        reference's full-completion rule (:meth:`joint_scored_length`): up to the first pad id, that
        pad kept only when it is the EOS; pads and what follows one are never scored."""
        if score_last_token:
            return self.joint_scored_length(agent_index, completion)
        pad = self.tokenizers[agent_index].pad_token_id
        length = list(completion).index(pad) if pad is not None and pad in completion else len(completion)
        return max(length - 1, 0)

    def joint_scored_length(self, agent_index: int, completion: Sequence[int]) -> int:
        """Tokens of a centralized joint completion that are scored: up to the first pad id, that
        token included when it is the EOS (pad == eos), else excluded; every token without a pad."""
        tokenizer = self.tokenizers[agent_index]
        pad = tokenizer.pad_token_id
        if pad is None or pad not in completion:
            return len(completion)
        cut = list(completion).index(pad)
        return cut + 1 if pad == tokenizer.eos_token_id else cut

    def _token_logprobs(
        self,
        agent_index: int,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        width: int,
        model=None,
        score_mask: Optional[torch.Tensor] = None,
        row_groups: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """``[M, width]`` float32 log-probabilities of the last ``width`` tokens of each row, in one
        forward of agent ``agent_index`` (the step :meth:`score` takes per forward).

        Without ``score_mask``, one padded forward: the batch layout (:func:`pack_sequences`) puts
        every completion at the same columns, so only the last ``width + 1`` positions need the LM
        head; log-softmax runs in float32 whatever the dtype.
        ``model`` scores with another model of the same vocabulary (a frozen reference policy).
        With ``score_mask`` (``[M, width]``) the batch is scored packed when the model allows it
        (:func:`~comlrl_lightning.team.packed_scoring.packed_token_logprobs`: each distinct prompt
        once, no padding, nothing after a row's last scored token, which then reads 0); rows of
        different ``row_groups`` (``[M]``) never share a prompt there.
        """
        home = input_ids.device
        model = model if model is not None else self.agents[agent_index]
        # an agent may live on its own device (agent_devices); results come back to the batch's
        device = getattr(model, "device", None) or self.device_of(agent_index)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        head = self.fused_head_of(model)
        if score_mask is not None:
            groups = row_groups.to(device) if row_groups is not None else None
            packed = packed_token_logprobs(model, input_ids, attention_mask, score_mask.to(device), head, groups)
            if packed is not None:
                return packed.to(home)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        with captured_head_if(head) as captured:
            output = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=False,
                logits_to_keep=width + 1,
            )
        targets = input_ids[:, -width:]
        if head is None:
            return gathered_logprobs(output.logits[:, -(width + 1) : -1], targets).to(home)
        hidden = captured[-1][:, -(width + 1) : -1]
        logprobs = linear_logprobs(hidden.reshape(-1, hidden.shape[-1]), head.weight, head.bias, targets.reshape(-1))
        return logprobs.view(targets.shape).to(home)

    @property
    def synced(self) -> bool:
        """The agents are sharded across processes (FSDP2): sampling keeps every rank in lockstep."""
        return self._synced

    # ------------------------------------------------------------------------------------------
    # Every agent at once: one pass for a LoRA team

    def score(
        self,
        batches: Sequence[dict],
        *,
        unit: ScoreUnit = "token",
        graphs: Graphs = "held",
        models: Optional[Sequence] = None,
        agents: Optional[Sequence[int]] = None,
    ) -> List[torch.Tensor]:
        """The team's one scoring method: the log-probabilities of every batch's scored completion
        tokens, each batch (:func:`pack_sequences`: ``input_ids``, ``attention_mask``, ``score_mask``
        ``[M_i, C_i]``) by its own agent, as the team's :attr:`plan` says.

        Each batch is scored packed where the model allows it (each distinct prompt once, no
        padding, :func:`~comlrl_lightning.team.packed_scoring.packed_token_logprobs`), else padded.
        A one-pass LoRA team scores the rows of every agent in one forward of its shared base, each
        row through its own agent's adapter; one backward then gives every adapter the gradient of
        its own rows, as N forwards would. Otherwise agent by agent.

        Args:
            batches: one batch per agent (``batches[i]`` is agent ``i``'s), or as ``agents`` says.
            unit: ``"token"``: ``[M_i, C_i]`` float32 log-probabilities (0 where a token is not
                scored when packed); ``"sequence"``: ``[M_i]``, their sum over the scored tokens.
            graphs: ``"held"``: each forward's activations kept until the backward; ``"recompute"``:
                dropped after each forward and recomputed in the backward (``torch.utils.checkpoint``,
                non-reentrant, the random state kept: the same values and gradients, one forward's
                activations alive at a time when the backward reaches the agents one after another).
            models: one model per batch to score with instead of its agent (e.g. the frozen reference
                policy): in one pass too when they are all the team's base with its adapters disabled.
            agents: the agent of each batch (default: batch ``i`` is agent ``i``'s).
        """
        if unit not in ("token", "sequence"):
            raise ValueError(f"score: unit must be 'token' or 'sequence' (got {unit!r}).")
        if graphs not in ("held", "recompute"):
            raise ValueError(f"score: graphs must be 'held' or 'recompute' (got {graphs!r}).")
        owners = list(agents) if agents is not None else list(range(len(batches)))
        if len(owners) != len(batches):
            raise ValueError(f"score: {len(batches)} batches but {len(owners)} agents.")
        forward = self._token_logprobs if graphs == "held" else self._recomputed_token_logprobs
        logprobs = self._planned_token_logprobs(batches, owners, models, forward)
        if unit == "token":
            return logprobs
        return [(lp * batch["score_mask"].to(lp.device)).sum(dim=-1) for lp, batch in zip(logprobs, batches)]

    def _planned_token_logprobs(
        self, batches: Sequence[dict], owners: List[int], models: Optional[Sequence], forward
    ) -> List[torch.Tensor]:
        """Every batch's token log-probabilities by ``forward`` (:meth:`_token_logprobs` or its
        recomputed form), in one pass of the shared base where the plan allows it."""
        adapters = self.plan.adapters
        shared = self.lora_agent(0).shared if adapters is not None else None
        if models is not None and not all(isinstance(m, BaseModelView) and m.shared is shared for m in models):
            adapters = None
        if len(batches) < 2:  # one batch: its agent alone (a pass of one needs no routing)
            adapters = None
        if adapters is None or shared is None:  # shared: None exactly when the plan has no adapters
            return [
                forward(
                    agent,
                    batch["input_ids"],
                    batch["attention_mask"],
                    batch["score_mask"].shape[1],
                    model=models[i] if models is not None else None,
                    score_mask=batch["score_mask"],
                )
                for i, (agent, batch) in enumerate(zip(owners, batches))
            ]
        stacked, groups = stack_batches(batches, self.tokenizers[0].pad_token_id)
        routed = [adapters[agent] for agent in owners]
        model = MixedAdapters(shared, routed, groups) if models is None else models[0]
        logprobs = forward(
            owners[0],
            stacked["input_ids"],
            stacked["attention_mask"],
            stacked["score_mask"].shape[1],
            model=model,
            score_mask=stacked["score_mask"],
            row_groups=groups if models is None else None,  # the base alone: prompts shared across agents
        )
        return unstack_rows(logprobs, batches)

    def _recomputed_token_logprobs(self, agent_index: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        """:meth:`_token_logprobs`, its activations dropped after the forward and recomputed in the backward."""
        return checkpoint(self._token_logprobs, agent_index, *args, use_reentrant=False, **kwargs)

    def one_pass_adapters(self) -> Optional[List[str]]:
        """The agents' adapter names when the team runs all agents in one pass (its :attr:`plan`):
        :attr:`one_pass` is on, the agents are LoRA views of one model whose adapter layers can be
        routed per row (:func:`~comlrl_lightning.team.lora_routing.supports_mixed_adapters`) and
        their tokenizers share the pad and EOS ids; ``None`` otherwise (every agent runs on its own)."""
        return list(self.plan.adapters) if self.plan.adapters is not None else None

    def one_pass_model(self, groups: torch.Tensor) -> MixedAdapters:
        """The shared model with each unit (row or prompt) through the adapter of agent ``groups[unit]``."""
        if self.plan.adapters is None:
            raise ValueError("one_pass_model needs a LoRA team that runs in one pass (see one_pass_adapters).")
        return MixedAdapters(self.lora_agent(0).shared, self.plan.adapters, groups)

    def sampling_plan(self, prompts: Sequence[Sequence[str]]) -> SamplingPlan:
        """How a generator samples every agent's ``prompts[agent]``: the encoded prompts and, for a
        one-pass LoRA team, the routed model (:meth:`one_pass_model`) that samples them all together."""
        encoded = [self.encode_prompts(agent, agent_prompts) for agent, agent_prompts in enumerate(prompts)]
        return SamplingPlan(encoded, self.one_pass_model if self.plan.one_pass else None)

    @property
    def fused_head(self) -> Optional[bool]:
        """The ``fused_head`` option the team was made with."""
        return self._fused_head

    def shard(self, mesh, precision: str = "32-true") -> None:
        """FSDP2 over ``mesh``: every agent per decoder layer and root. A LoRA team's one shared model is
        sharded at the transformers model under peft, whose forward every call (``generate()`` too) runs."""
        models = [self.lora_agent(0).get_base_model()] if self.plan.lora else list(self.agents)
        for model in models:
            shard_model(model, mesh, precision)
        self._synced = True
        self.plan = self._decide_plan()

    def fused_head_of(self, model: nn.Module) -> Optional[nn.Linear]:
        """The LM head to fuse for ``model`` under :attr:`fused_head`, or ``None`` (materialised logits)."""
        if self.plan.fused_head is False:  # never, or a sharded team (its head's weight exists only in its forward)
            return None
        head = fusable_head(model)
        if head is None and self.plan.fused_head:
            raise ConfigurationError(
                "fused_lm_head: true needs a plain linear LM head without logit soft-capping or scaling; "
                f"{type(output_head(model)).__name__} is not one (set fused_lm_head: null or false)."
            )
        return head


__all__ = ["Graphs", "ScoreUnit", "Team", "left_pad", "pack_sequences", "stack_batches", "unstack_rows"]
