"""A team of N causal-LM agents: loading, batched sampling and batched sequence scoring."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import torch
from torch import nn

from .defaults import EMBEDDED, embedded_model_path
from .fused_head import captured_head, fusable_head, linear_logprobs, output_head
from .losses import gathered_logprobs
from .rng import RandomStream
from .packed_scoring import packed_token_logprobs
from .progress import report_generated
from .quiet import transformers_bars_off
from .shared_prompt import sample_with_shared_prompts
from .sharding import max_over_ranks

ModelSource = Union[str, nn.Module]


@dataclass
class GenerationSettings:
    """Sampling settings shared by collection and evaluation (seed names)."""

    max_new_tokens: int = 256
    temperature: float = 0.6
    top_p: float = 0.6
    top_k: Optional[int] = 50


KV_CACHE_MEMORY_SHARE = 0.25
"""Automatic generation batches: one call's KV caches and logits may use this share of the device's memory."""
FALLBACK_GENERATION_BATCH_SIZE = 64
"""Sequences per call when the memory of the device or the size of the model's cache is unknown."""


def auto_generation_batch_size(model: nn.Module, device: torch.device, sequence_length: int) -> int:
    """How many sequences of ``sequence_length`` tokens one ``generate()`` call may sample at once.

    Estimated from the model's config: per sequence, its key/value cache (counted twice, as a
    growing cache is reallocated while the old one is alive) plus a few float32 logit rows,
    against :data:`KV_CACHE_MEMORY_SHARE` of the device's *total* memory. Total, not free, memory
    keeps the choice (and with it the sampled tokens) the same when a run resumes on the same
    kind of machine; set ``HFGenerator(batch_size=...)`` to pin it across machines.
    """
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers, heads, hidden = (getattr(config, name, None) for name in ("num_hidden_layers", "num_attention_heads", "hidden_size"))
    memory = device_memory(device)
    if not (layers and heads and hidden and memory):
        return FALLBACK_GENERATION_BATCH_SIZE
    key_value_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    element = next(model.parameters()).element_size()
    per_sequence = 2 * (2 * layers * key_value_heads * head_dim * element) * sequence_length
    per_sequence += 3 * 4 * (getattr(config, "vocab_size", None) or 0)
    return max(1, int(memory * KV_CACHE_MEMORY_SHARE // max(per_sequence, 1)))


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


@dataclass
class Completion:
    """One sampled completion: its token ids (up to and including the first EOS) and its text."""

    ids: List[int]
    text: str


def completion_from_ids(tokenizer, ids: List[int]) -> Completion:
    """A sampled completion as every generator returns it: ids cut after the first EOS (kept), text
    decoded without special tokens."""
    if tokenizer.eos_token_id in ids:
        ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
    return Completion(ids=ids, text=tokenizer.decode(ids, skip_special_tokens=True))


def resolve_source(source: str) -> str:
    """Map the embedded default's id to its local folder; other ids and paths pass through.

    A source written as a path (absolute, ``./``, ``../``, ``~``, or more than one ``/``, which no
    hub id has) must exist: a missing one is an error saying so, not a hub lookup's complaint.
    """
    if source == EMBEDDED:
        return str(embedded_model_path())
    text = str(source)
    if text.startswith(("/", "./", "../", "~")) or text.count("/") > 1:
        path = os.path.expanduser(text)
        if not os.path.exists(path):
            raise FileNotFoundError(f"model path {text} does not exist.")
        return path
    return source


def load_model(source: ModelSource, dtype: Optional[str] = None) -> nn.Module:
    """A causal LM from a hub id, a local path, ``"embedded"``, or a model object (used as is)."""
    if isinstance(source, nn.Module):
        return source
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
    with transformers_bars_off():  # no per-file bar for every agent, snapshot and critic loaded
        return AutoModelForCausalLM.from_pretrained(resolve_source(source), **kwargs)


def load_tokenizer(source: str):
    """A tokenizer with ``pad := eos`` when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_source(source))
    return prepare_tokenizer(tokenizer)


def encode_prompt(tokenizer, prompt: str) -> List[int]:
    """A prompt's token ids: with the tokenizer's special tokens, unless the text already starts with
    its BOS token (a rendered chat template usually does, and a second BOS would change the model's
    input). Sampling and re-tokenized round-file records both use it, so they get the same ids."""
    bos = getattr(tokenizer, "bos_token", None)
    starts_with_bos = isinstance(bos, str) and bool(bos) and prompt.startswith(bos)
    return tokenizer(prompt, add_special_tokens=not starts_with_bos)["input_ids"]


def prepare_tokenizer(tokenizer):
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ValueError("Tokenizer must expose pad_token_id (it has neither a pad nor an eos token).")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class Team(nn.Module):
    """N agents, each a causal LM with its own tokenizer.

    Args:
        agents: one model source per agent: a hub id, a local path, ``"embedded"``, or a model object.
        tokenizers: one tokenizer per agent, or one shared by all; required for model objects,
            loaded from the model source otherwise.
        dtype: torch dtype name for models loaded from a source (``"bfloat16"``...), default: as saved.
    """

    def __init__(self, agents: Sequence[ModelSource], tokenizers=None, dtype: Optional[str] = None) -> None:
        super().__init__()
        if not agents:
            raise ValueError("A team needs at least one agent.")
        self.agents = nn.ModuleList([load_model(source, dtype) for source in agents])
        self.tokenizers = self.resolve_tokenizers(agents, tokenizers)

    @staticmethod
    def resolve_tokenizers(agents: Sequence[ModelSource], tokenizers) -> list:
        """One prepared tokenizer per agent: ``tokenizers`` (one for all, or one per agent), else
        each loaded from the agent's source (one load per distinct source)."""
        if tokenizers is None:
            if not all(isinstance(source, str) for source in agents):
                raise ValueError("Tokenizer(s) must be provided when agents are model objects.")
            cache = {}
            for source in agents:
                cache.setdefault(source, load_tokenizer(source))
            return [cache[source] for source in agents]
        if not isinstance(tokenizers, (list, tuple)):
            tokenizers = [tokenizers] * len(agents)
        if len(tokenizers) != len(agents):
            raise ValueError("tokenizers length must match agents.")
        return [prepare_tokenizer(tokenizer) for tokenizer in tokenizers]

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    def device_of(self, agent_index: int) -> torch.device:
        return next(self.agents[agent_index].parameters()).device

    def encode_prompts(self, agent_index: int, prompts: Sequence[str]) -> List[List[int]]:
        return [encode_prompt(self.tokenizers[agent_index], prompt) for prompt in prompts]

    # ------------------------------------------------------------------------------------------
    # Sampling

    @torch.no_grad()
    def generate(
        self,
        agent_index: int,
        prompts: Sequence[str],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
        batch_size: Optional[int] = None,
    ) -> List[List[Completion]]:
        """Sample ``num_samples`` completions for every prompt with agent ``agent_index``.

        Prompts of many items share one left-padded ``generate()`` call of at most ``batch_size``
        sequences (``None``: :func:`auto_generation_batch_size`), and each prompt is prefilled once
        for all its samples (:func:`sample_with_shared_prompts`). Sampling draws from ``stream`` when given.
        Returns ``result[prompt][sample]``.
        """
        model = self.agents[agent_index]
        tokenizer = self.tokenizers[agent_index]
        device = self.device_of(agent_index)
        encoded = self.encode_prompts(agent_index, prompts)
        batch_size = batch_size or auto_generation_batch_size(
            model, device, max(map(len, encoded), default=0) + settings.max_new_tokens
        )
        prompts_per_call = max(1, batch_size // num_samples)
        sampling = dict(
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        # top_k None means "off" (documented); left out, generate() would apply the generation config's
        # top_k (50 by default) and pay for a top-k filter on every step. 0 disables it.
        sampling["top_k"] = settings.top_k if settings.top_k is not None else 0
        calls = -(-len(encoded) // prompts_per_call)
        if self.synced:  # a sharded forward is a collective: every rank makes as many calls, as many steps
            calls = max_over_ranks(calls, device)
        results: List[List[Completion]] = []
        was_training = model.training
        model.eval()
        try:
            with stream.active(device) if stream is not None else contextlib.nullcontext():
                for start in range(0, calls * prompts_per_call, prompts_per_call):
                    chunk = encoded[start : start + prompts_per_call]
                    input_ids, attention_mask = left_pad(chunk or [[tokenizer.eos_token_id]], tokenizer.pad_token_id)
                    if self.synced:  # plain generate(): the same forwards on every rank, until every rank is done
                        output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                                num_return_sequences=num_samples, synced_gpus=True, **sampling)
                    else:
                        output = sample_with_shared_prompts(
                            model, input_ids.to(device), attention_mask.to(device), num_samples, sampling
                        )
                    if not chunk:  # this rank's share is done; it only kept the others company
                        continue
                    generated = output[:, input_ids.shape[1] :].tolist()
                    for offset in range(0, len(generated), num_samples):
                        results.append(
                            [completion_from_ids(tokenizer, row) for row in generated[offset : offset + num_samples]]
                        )
                    report_generated(len(chunk))  # a collection's progress bar, when one is shown
        finally:
            model.train(was_training)
        return results

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

    def sequence_logprobs(
        self,
        agent_index: int,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        score_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Summed log-probabilities of the scored completion tokens, one value per row.

        Computed packed (:func:`~comlrl_lightning.packed_scoring.packed_token_logprobs`: each
        distinct prompt once, no padding) when the model allows it, else with one padded forward: the batch
        layout (see :func:`pack_sequences`) puts every completion at the same columns, prompts
        left-padded to width ``P``, completions right-padded to width ``C``, so only the last
        ``C + 1`` positions need the LM head. Log-softmax runs in float32 whatever the dtype.

        Args:
            input_ids, attention_mask: ``[M, P + C]``.
            score_mask: ``[M, C]``, 1 where a completion token is scored.
        """
        token_logprobs = self.token_logprobs(agent_index, input_ids, attention_mask, score_mask.shape[1], score_mask=score_mask)
        return (token_logprobs * score_mask.to(token_logprobs.device)).sum(dim=-1)

    def token_logprobs(
        self,
        agent_index: int,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        width: int,
        model=None,
        score_mask: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """``[M, width]`` float32 log-probabilities of the last ``width`` tokens of each row.

        ``model`` scores with another model of the same vocabulary (a frozen reference policy).
        With ``score_mask`` (``[M, width]``) the batch is scored packed when the model allows it
        (:func:`~comlrl_lightning.packed_scoring.packed_token_logprobs`: each distinct prompt
        once, no padding, nothing after a row's last scored token, which then reads 0).
        """
        home = input_ids.device
        model = model if model is not None else self.agents[agent_index]
        # an agent may live on its own device (agent_devices); results come back to the batch's
        device = getattr(model, "device", None) or self.device_of(agent_index)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        head = self.fused_head_of(model)
        if score_mask is not None:
            packed = packed_token_logprobs(model, input_ids, attention_mask, score_mask.to(device), head)
            if packed is not None:
                return packed.to(home)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        with captured_head(head) if head is not None else contextlib.nullcontext() as captured:
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

    synced: bool = False
    """The agents are sharded across processes (FSDP2): sampling keeps every rank in lockstep."""

    fused_head: Optional[bool] = None
    """Score with the fused, chunked LM head: ``None`` where the head allows it, ``True`` always
    (an error where it does not), ``False`` never (materialised logits)."""

    def fused_head_of(self, model: nn.Module) -> Optional[nn.Linear]:
        """The LM head to fuse for ``model`` under :attr:`fused_head`, or ``None`` (materialised logits)."""
        if self.fused_head is False or self.synced:  # a sharded head's weight exists only inside its forward
            return None
        head = fusable_head(model)
        if head is None and self.fused_head:
            raise ValueError("fused_lm_head: true needs a plain linear LM head without logit soft-capping or scaling; "
                             f"{type(output_head(model)).__name__} is not one (set fused_lm_head: null or false).")
        return head


def _as_list(tokens) -> List[int]:
    return tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(input_ids, attention_mask)``."""
    sequences = [_as_list(s) for s in sequences]
    width = max(len(s) for s in sequences)
    input_ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in sequences], dtype=torch.long)
    attention_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], dtype=torch.long)
    return input_ids.view(len(sequences), width), attention_mask.view(len(sequences), width)


def pack_sequences(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    scored_lengths: Sequence[int],
    pad_id: int,
) -> dict:
    """Lay out prompt/completion pairs for :meth:`Team.sequence_logprobs`.

    Returns ``input_ids`` and ``attention_mask`` of shape ``[M, P + C]`` (prompt left-padded to
    ``P``, completion right-padded to ``C >= 1``) and ``score_mask`` ``[M, C]``.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("Scoring a completion requires a non-empty tokenized prompt.")
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    completions = [_as_list(c) for c in completions]
    width = max(1, max(len(c) for c in completions))
    rows = len(completions)
    completion_ids = torch.tensor([c + [pad_id] * (width - len(c)) for c in completions], dtype=torch.long)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions], dtype=torch.long)
    scored = [min(max(int(n), 0), width) for n in scored_lengths]
    score_mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in scored], dtype=torch.float32)
    completion_ids, completion_mask, score_mask = (t.view(rows, width) for t in (completion_ids, completion_mask, score_mask))
    return {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "score_mask": score_mask,
    }
