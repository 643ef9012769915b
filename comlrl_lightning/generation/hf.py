"""Hugging Face ``generate()`` on the agents' own models: the default generation backend.

Prompts of many items share one left-padded call (as many sequences as a share of the device's
memory holds), and each prompt is prefilled once for all its samples
(:func:`~comlrl_lightning.generation.shared_prompt.sample_with_shared_prompts`). Every prompt
draws from its own seed (:mod:`~comlrl_lightning.generation.seeded_sampling`), so the tokens do
not depend on the batching, and a LoRA team samples all its agents in the same calls, each row
through its own agent's adapter (:mod:`~comlrl_lightning.team.lora_routing`). A team sharded
across processes (FSDP2) samples in lockstep.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple, cast

import torch
from torch import nn

from comlrl_lightning.errors import DataError
from comlrl_lightning.generation.base import (
    Completion,
    GenerationSettings,
    Generator,
    agent_context,
    completion_from_ids,
    context_overflow,
)
from comlrl_lightning.generation.extra_options import PLAIN_GENERATE_ONLY, beam_search, hf_generate_options
from comlrl_lightning.generation.gqa_decode import packed_decoding
from comlrl_lightning.generation.seeded_sampling import (
    beam_sampling_options,
    request_rng,
    request_seeds,
    seeded_sampling_options,
)
from comlrl_lightning.generation.shared_prompt import sample_with_shared_prompts
from comlrl_lightning.runtime.progress import report_generated
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.runtime.sharding import max_over_ranks
from comlrl_lightning.team.scoring_plan import SamplingPlan
from comlrl_lightning.team.team import Team, left_pad
from comlrl_lightning.validation import at_least, require

if TYPE_CHECKING:
    from transformers import GenerationMixin

KV_CACHE_MEMORY_SHARE = 0.25
"""Automatic generation batches: one call's KV caches and logits may use this share of the memory
the team's training state leaves free on the device."""
FALLBACK_GENERATION_BATCH_SIZE = 64
"""Sequences per call when the memory of the device or the size of the model's cache is unknown."""
TRAINING_STATE_COPIES = 4
"""Bytes a trainable parameter holds per byte of its weight: the weight, its gradient and AdamW's two moments."""


def generation_memory_budget(total: int, resident: int, share: float = KV_CACHE_MEMORY_SHARE) -> int:
    """Bytes one ``generate()`` call may use: ``share`` of the device's ``total`` memory less the
    ``resident`` bytes the team's training state holds there (never below 0)."""
    return max(int(share * (total - resident)), 0)


def batch_size_for_budget(per_sequence: int, budget: int) -> int:
    """Sequences of ``per_sequence`` bytes that fit in ``budget`` bytes (at least 1)."""
    return max(1, budget // max(per_sequence, 1))


def training_state_bytes(models: Iterable[nn.Module]) -> int:
    """Bytes the models' training state holds: every parameter once (a shared base counted once),
    a trainable one :data:`TRAINING_STATE_COPIES` times (weight, gradient, AdamW's two moments)."""
    seen, total = set(), 0
    for model in models:
        for parameter in model.parameters():
            if id(parameter) not in seen:
                seen.add(id(parameter))
                copies = TRAINING_STATE_COPIES if parameter.requires_grad else 1
                total += parameter.numel() * parameter.element_size() * copies
    return total


def sequence_bytes(model: nn.Module, sequence_length: int) -> Optional[int]:
    """Estimated bytes one sequence of ``sequence_length`` tokens takes in ``generate()``, from the
    model's config: its key/value cache (counted twice, as a growing cache is reallocated while the
    old one is alive) plus a few float32 logit rows; ``None`` when the config does not say."""
    config = getattr(model, "config", None)
    text_config_of = getattr(config, "get_text_config", None)
    config = text_config_of() if text_config_of is not None else config
    layers, heads, hidden = (
        getattr(config, name, None) for name in ("num_hidden_layers", "num_attention_heads", "hidden_size")
    )
    if not (layers and heads and hidden):
        return None
    key_value_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    element = next(model.parameters()).element_size()
    per_sequence = 2 * (2 * layers * key_value_heads * head_dim * element) * sequence_length
    return per_sequence + 3 * 4 * (getattr(config, "vocab_size", None) or 0)


def auto_generation_batch_size(
    model: nn.Module, device: torch.device, sequence_length: int, resident: int = 0, budget: Optional[int] = None
) -> int:
    """How many sequences of ``sequence_length`` tokens one ``generate()`` call may sample at once.

    :func:`sequence_bytes` per sequence against ``budget`` bytes (default:
    :func:`generation_memory_budget` of the device's *total* memory less ``resident``, the team's
    :func:`training_state_bytes`). Total, not free, memory keeps the choice the same when a run
    resumes on the same kind of machine; set ``HFGenerator(batch_size=...)`` to pin it across machines.
    """
    per_sequence = sequence_bytes(model, sequence_length)
    if budget is None:
        memory = device_memory(device)
        budget = generation_memory_budget(memory, resident) if memory else None
    if per_sequence is None or budget is None:
        return FALLBACK_GENERATION_BATCH_SIZE
    return batch_size_for_budget(per_sequence, budget)


def device_memory(device: torch.device) -> Optional[int]:
    """Total bytes of ``device`` (host RAM for the CPU), or ``None`` when unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    return None


def check_prompts_fit_context(
    team: Team, agents: Sequence[int], encoded: Sequence[Sequence[int]], max_new_tokens: int
) -> None:
    """Every encoded prompt ``encoded[i]`` plus ``max_new_tokens`` fits agent ``agents[i]``'s context,
    else a :class:`DataError` naming the prompt and the excess (the run checks its prompts, first
    and later turns, before sampling; this keeps a position-embedding ``IndexError`` out of any other call)."""
    for index, (agent, prompt) in enumerate(zip(agents, encoded)):
        why = context_overflow(len(prompt), max_new_tokens, agent_context(team, agent), f"agent {agent}")
        if why is not None:
            raise DataError(f"cannot sample prompt {index} of this call: {why}.")


class HFGenerator(Generator):
    """Hugging Face ``generate()`` on the agent's own model (the default backend).

    Prompts of many items share one left-padded call and each prompt is prefilled once for all
    its samples; every prompt draws its tokens from its own seed, so they do not depend on how
    prompts are batched; a LoRA team samples all its agents in the same calls.

    Args:
        batch_size: sequences (prompts x samples) per ``generate()`` call. ``None``: as many as the
            memory budget holds (KV cache estimated from the model's config); set a number to cap
            collection's memory.
        memory_budget_gib: the automatic batch size's budget, GiB per call. ``None``: a quarter
            of what the team's weights, gradients and AdamW moments leave of the device's
            *total* memory (:func:`generation_memory_budget`).
    """

    def __init__(self, batch_size: Optional[int] = None, memory_budget_gib: Optional[float] = None) -> None:
        at_least("batch_size", batch_size, 1, allow_none=True)
        require(
            memory_budget_gib is None or memory_budget_gib > 0,
            f"memory_budget_gib must be > 0 GiB (got {memory_budget_gib}).",
        )
        self.batch_size = batch_size
        self.memory_budget_gib = memory_budget_gib

    @torch.no_grad()
    def generate(
        self,
        team: Team,
        agent_index: int,
        prompts: Sequence[str],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
    ) -> List[List[Completion]]:
        """Sample ``num_samples`` completions for every prompt with agent ``agent_index`` of ``team``.

        Prompts of many items share one left-padded ``generate()`` call of at most ``batch_size``
        sequences (``None``: :func:`auto_generation_batch_size`), and each prompt is prefilled once
        for all its samples (:func:`sample_with_shared_prompts`). Every prompt draws from its own
        seed, drawn from ``stream`` when given
        (:mod:`~comlrl_lightning.generation.seeded_sampling`), so the tokens do not depend on the
        batch size. Returns ``result[prompt][sample]``.
        """
        encoded = team.encode_prompts(agent_index, prompts)
        seeds = request_seeds(stream, len(encoded))
        return self.sample(team, [agent_index] * len(encoded), encoded, seeds, num_samples, settings, owner=agent_index)

    @torch.no_grad()
    def generate_team(
        self,
        team: Team,
        prompts: Sequence[Sequence[str]],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
    ) -> List[List[List[Completion]]]:
        """Every agent samples its own prompts (``prompts[agent]``), as the team's sampling plan
        (:meth:`~comlrl_lightning.team.Team.sampling_plan`) says: a one-pass LoRA team with all
        agents' prompts in the same ``generate()`` calls, each row through its own agent's adapter;
        other teams agent by agent. The seeds are drawn from ``stream`` agent by agent in both
        cases, so both sample the same tokens. Returns ``result[agent][prompt][sample]``."""
        if not team.plan.one_pass:
            return super().generate_team(team, prompts, num_samples, settings, stream)
        plan = team.sampling_plan(prompts)
        seeds = [seed for agent_prompts in plan.encoded for seed in request_seeds(stream, len(agent_prompts))]
        flat = self.sample(team, plan.agents, plan.prompts, seeds, num_samples, settings, plan=plan)
        return plan.per_agent(flat)

    def sample(
        self,
        team: Team,
        agents: List[int],
        encoded: List[List[int]],
        seeds: List[int],
        num_samples: int,
        settings: GenerationSettings,
        plan: Optional[SamplingPlan] = None,
        owner: Optional[int] = None,
    ) -> List[List[Completion]]:
        """``num_samples`` completions of every encoded prompt, prompt ``i`` by agent ``agents[i]``
        from seed ``seeds[i]``. Prompts of several agents (a LoRA team's one pass) share calls, each
        row through its own agent's adapter (``plan``'s routed model, else
        :meth:`~comlrl_lightning.team.Team.one_pass_model`); the agents' prompts must then be consecutive.
        ``owner``: the agent whose model runs the calls (default: the first prompt's agent)."""
        check_prompts_fit_context(team, agents, encoded, settings.max_new_tokens)
        route = (plan.route if plan is not None else None) or team.one_pass_model
        one_pass = len(set(agents)) > 1
        # a sharded rank with no prompts keeps the others company through the agent they sample: another
        # agent's forward would gather other weights (rank 1's shard of agent 0) or run another adapter
        owner = agents[0] if agents else (owner or 0)
        model, tokenizer, device = team.agents[owner], team.tokenizers[owner], team.device_of(owner)
        beams = beam_search(settings.extra)  # one request per call, drawn from the request's seed
        prompts_per_call, calls = self.calls_plan(team, owner, encoded, num_samples, settings, beams)
        results: List[List[Completion]] = []
        was_training = model.training
        model.eval()
        try:
            with packed_decoding(model):  # no KV-cache copy per query head (older transformers)
                for start in range(0, calls * prompts_per_call, prompts_per_call):
                    rows = slice(start, start + prompts_per_call)
                    chunk = encoded[rows]
                    input_ids, attention_mask = left_pad(chunk or [[tokenizer.eos_token_id]], tokenizer.pad_token_id)
                    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
                    if beams:
                        sampling = beam_sampling_options(settings, tokenizer)
                    else:
                        sampling = seeded_sampling_options(
                            settings, tokenizer, seeds[rows] or [0], num_samples, input_ids.shape[1]
                        )
                    sampling |= hf_generate_options(settings.extra)  # eos_token_id may be overridden, as the reference
                    caller = route(torch.tensor(agents[rows] or [owner], device=device)) if one_pass else model
                    seed = seeds[start] if beams and chunk else None
                    output = self._generate(caller, team.synced, input_ids, attention_mask, num_samples, sampling, seed)
                    if not chunk:  # this rank's share is done; it only kept the others company
                        continue
                    generated = output[:, input_ids.shape[1] :].tolist()
                    for index, offset in enumerate(range(0, len(generated), num_samples)):
                        decoder = team.tokenizers[agents[start + index]]
                        results.append(
                            [completion_from_ids(decoder, row) for row in generated[offset : offset + num_samples]]
                        )
                    report_generated(len(chunk))  # a collection's progress bar, when one is shown
        finally:
            model.train(was_training)
        return results

    def calls_plan(
        self,
        team: Team,
        owner: int,
        encoded: List[List[int]],
        num_samples: int,
        settings: GenerationSettings,
        beams: bool,
    ) -> Tuple[int, int]:
        """``(prompts per generate() call, calls)`` for ``encoded`` by agent ``owner``'s model: the calls
        fit the batch size (beam search: one prompt a call); a sharded team makes every rank's largest
        number of calls, since its forward is a collective (an idle rank's calls sample a one-token prompt)."""
        batch_size = self.batch_size or self.auto_batch_size(
            team, owner, max(map(len, encoded), default=0) + settings.max_new_tokens
        )
        prompts_per_call = 1 if beams else max(1, batch_size // num_samples)
        calls = -(-len(encoded) // prompts_per_call)
        return prompts_per_call, max_over_ranks(calls, team.device_of(owner)) if team.synced else calls

    @staticmethod
    def _generate(
        caller: nn.Module,
        synced: bool,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        num_samples: int,
        sampling: dict,
        beam_seed: Optional[int],
    ) -> torch.Tensor:
        """One ``generate()`` call of ``num_samples`` rows per prompt: plain ``generate()`` (a copy of
        each prompt per sample) in lockstep on a sharded team and for beam search (its draws from
        ``beam_seed``), else each prompt prefilled once for all its samples."""
        if synced or PLAIN_GENERATE_ONLY & set(sampling):
            generating = cast("GenerationMixin", caller)  # a transformers model, or a LoRA view with its generate()
            copies = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(num_samples)
            sampling = {**sampling, "synced_gpus": True} if synced else sampling
            beams = beam_seed is not None or int(sampling.get("num_beams") or 1) > 1
            with request_rng(beam_seed or 0, input_ids.device) if beams else contextlib.nullcontext():
                return generating.generate(
                    input_ids=input_ids[copies], attention_mask=attention_mask[copies], **sampling
                )
        return sample_with_shared_prompts(caller, input_ids, attention_mask, num_samples, sampling)

    def auto_batch_size(self, team: Team, agent: int, sequence_length: int) -> int:
        """:func:`auto_generation_batch_size` for agent ``agent``'s model, within ``memory_budget_gib``
        or what the team's training state leaves of its device's memory."""
        budget = int(self.memory_budget_gib * 2**30) if self.memory_budget_gib is not None else None
        resident = training_state_bytes(team.agents) if budget is None else 0
        return auto_generation_batch_size(team.agents[agent], team.device_of(agent), sequence_length, resident, budget)

    def check_settings(self, settings: GenerationSettings) -> None:
        """``settings.extra`` must be ``generate()`` options the generator does not set itself."""
        hf_generate_options(settings.extra)

    def __repr__(self) -> str:
        return f"HFGenerator(batch_size={self.batch_size}, memory_budget_gib={self.memory_budget_gib})"


__all__ = [
    "HFGenerator",
    "auto_generation_batch_size",
    "batch_size_for_budget",
    "device_memory",
    "generation_memory_budget",
    "sequence_bytes",
    "training_state_bytes",
]
