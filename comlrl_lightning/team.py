"""A team of N causal-LM agents: loading, batched sampling and batched sequence scoring."""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import torch
from torch import nn

from .defaults import EMBEDDED, embedded_model_path
from .losses import gathered_logprobs
from .rng import RandomStream

ModelSource = Union[str, nn.Module]


@dataclass
class GenerationSettings:
    """Sampling settings shared by collection and evaluation (seed names)."""

    max_new_tokens: int = 256
    temperature: float = 0.6
    top_p: float = 0.6
    top_k: Optional[int] = 50
    generation_batch_size: int = 64
    """Sequences per ``generate()`` call (prompts x samples); prompts of many items share a call."""


@dataclass
class Completion:
    """One sampled completion: its token ids (up to and including the first EOS) and its text."""

    ids: List[int]
    text: str


def resolve_source(source: str) -> str:
    """Map the embedded default's id to its local folder; other ids and paths pass through."""
    return str(embedded_model_path()) if source == EMBEDDED else source


def load_model(source: ModelSource, dtype: Optional[str] = None) -> nn.Module:
    """A causal LM from a hub id, a local path, ``"embedded"``, or a model object (used as is)."""
    if isinstance(source, nn.Module):
        return source
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
    return AutoModelForCausalLM.from_pretrained(resolve_source(source), **kwargs)


def load_tokenizer(source: str):
    """A tokenizer with ``pad := eos`` when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_source(source))
    return prepare_tokenizer(tokenizer)


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
        self.tokenizers = self._resolve_tokenizers(agents, tokenizers)

    @staticmethod
    def _resolve_tokenizers(agents: Sequence[ModelSource], tokenizers) -> list:
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
        tokenizer = self.tokenizers[agent_index]
        return [tokenizer(prompt, add_special_tokens=True)["input_ids"] for prompt in prompts]

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
    ) -> List[List[Completion]]:
        """Sample ``num_samples`` completions for every prompt with agent ``agent_index``.

        Prompts of many items share one left-padded ``generate()`` call of at most
        ``settings.generation_batch_size`` sequences. Sampling draws from ``stream`` when given.
        Returns ``result[prompt][sample]``.
        """
        model = self.agents[agent_index]
        tokenizer = self.tokenizers[agent_index]
        device = self.device_of(agent_index)
        encoded = self.encode_prompts(agent_index, prompts)
        prompts_per_call = max(1, settings.generation_batch_size // num_samples)
        sampling = dict(
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.max_new_tokens,
            num_return_sequences=num_samples,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        # top_k None means "off" (README); left out, generate() would apply the generation config's
        # top_k (50 by default) and pay for a top-k filter on every step. 0 disables it.
        sampling["top_k"] = settings.top_k if settings.top_k is not None else 0
        results: List[List[Completion]] = []
        was_training = model.training
        model.eval()
        try:
            with stream.active(device) if stream is not None else contextlib.nullcontext():
                for start in range(0, len(encoded), prompts_per_call):
                    input_ids, attention_mask = left_pad(encoded[start : start + prompts_per_call], tokenizer.pad_token_id)
                    output = model.generate(
                        input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **sampling
                    )
                    generated = output[:, input_ids.shape[1] :].tolist()
                    for offset in range(0, len(generated), num_samples):
                        results.append(
                            [self._completion(tokenizer, row) for row in generated[offset : offset + num_samples]]
                        )
        finally:
            model.train(was_training)
        return results

    @staticmethod
    def _completion(tokenizer, ids: List[int]) -> Completion:
        if tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
        return Completion(ids=ids, text=tokenizer.decode(ids, skip_special_tokens=True))

    # ------------------------------------------------------------------------------------------
    # Scoring

    def scored_length(self, agent_index: int, completion: Sequence[int], score_last_token: bool) -> int:
        """How many leading completion tokens are scored.

        Parity with the reference (``score_last_token=False``): cut at the first pad id (which is
        the EOS when pad == eos), then leave out the last token. Otherwise every token, EOS included.
        """
        if score_last_token:
            return len(completion)
        pad = self.tokenizers[agent_index].pad_token_id
        length = list(completion).index(pad) if pad is not None and pad in completion else len(completion)
        return max(length - 1, 0)

    def sequence_logprobs(
        self,
        agent_index: int,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        score_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Summed log-probabilities of the scored completion tokens, one value per row.

        The batch layout (see :func:`pack_sequences`) puts every completion at the same columns:
        prompts left-padded to width ``P``, completions right-padded to width ``C``, so only the
        last ``C + 1`` positions need the LM head. Log-softmax runs in float32 whatever the dtype.

        Args:
            input_ids, attention_mask: ``[M, P + C]``.
            score_mask: ``[M, C]``, 1 where a completion token is scored.
        """
        model, home = self.agents[agent_index], input_ids.device
        # an agent may live on its own device (agent_devices); results come back to the batch's
        device = self.device_of(agent_index)
        input_ids, attention_mask, score_mask = input_ids.to(device), attention_mask.to(device), score_mask.to(device)
        if _can_share_prompts(model):
            shared = _shared_prompt_logprobs(model, input_ids, attention_mask, score_mask)
            if shared is not None:
                return shared.to(home)
        token_logprobs = self.token_logprobs(agent_index, input_ids, attention_mask, score_mask.shape[1])
        return (token_logprobs * score_mask).sum(dim=-1).to(home)

    def token_logprobs(
        self, agent_index: int, input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int, model=None
    ) -> torch.Tensor:
        """``[M, width]`` float32 log-probabilities of the last ``width`` tokens of each row.

        ``model`` scores with another model of the same vocabulary (a frozen reference policy).
        """
        home = input_ids.device
        model = model if model is not None else self.agents[agent_index]
        device = getattr(model, "device", None) or self.device_of(agent_index)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        output = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=width + 1,
        )
        logits = output.logits[:, -(width + 1) : -1]
        return gathered_logprobs(logits, input_ids[:, -width:]).to(home)


def _can_share_prompts(model: nn.Module) -> bool:
    """Whether ``model`` can score completions on a shared prompt KV cache (HF causal LMs can,
    unless gradient checkpointing turns the cache off)."""
    return bool(getattr(model, "_supports_cache_class", True)) and not _checkpointing(model)


def _checkpointing(model: nn.Module) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new name first (no warning)
        if hasattr(type(model), name) or name in vars(model):
            return bool(getattr(model, name))
    return False


@functools.lru_cache(maxsize=None)
def _forward_keyword(model_type: type) -> str:
    """The forward() keyword of the KV cache: ``cache`` (recent transformers) or ``past_key_values``."""
    try:
        return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def _cache_keyword(model: nn.Module) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_keyword(type(base))


CPU_CALL_COST = 5e7
"""On CPU one more stage-2 forward call costs about ``CPU_CALL_COST / parameters`` padded token
positions (a fixed per-call cost against a per-token cost that grows with the model), clamped to
``[8, 512]``; see :func:`length_buckets`."""
ACCELERATOR_CALL_COST_TOKENS = 2048
"""On accelerators kernel launches dominate small calls: bucket only when padding is large."""


def call_cost_tokens(model: nn.Module, device: torch.device) -> int:
    if device.type != "cpu":
        return ACCELERATOR_CALL_COST_TOKENS
    parameters = sum(p.numel() for p in model.parameters())
    return int(min(max(CPU_CALL_COST / max(parameters, 1), 8), 512))


def length_buckets(lengths: Sequence[int], call_cost: int = ACCELERATOR_CALL_COST_TOKENS) -> List[List[int]]:
    """Split rows into buckets (lists of row indices) that each run padded to their longest row.

    Minimises ``sum(rows * width) + call_cost * buckets`` over splits of the rows sorted by length
    (dynamic programming over the distinct lengths): one call when lengths are alike, several when
    a few long rows would otherwise pad many short ones.
    """
    order = sorted(range(len(lengths)), key=lambda r: lengths[r])
    widths = sorted(set(lengths))
    upto = [sum(1 for v in lengths if v <= w) for w in widths]  # rows with length <= widths[k]
    best, cut = [0.0] + [float("inf")] * len(widths), [0] * (len(widths) + 1)
    for end in range(1, len(widths) + 1):
        for begin in range(end):
            rows = upto[end - 1] - (upto[begin - 1] if begin else 0)
            cost = best[begin] + rows * widths[end - 1] + call_cost
            if cost < best[end]:
                best[end], cut[end] = cost, begin
    bounds, end = [], len(widths)
    while end > 0:
        bounds.append((cut[end], end))
        end = cut[end]
    buckets = []
    for begin, end in reversed(bounds):
        low, high = (upto[begin - 1] if begin else 0), upto[end - 1]
        buckets.append(order[low:high])
    return buckets


@functools.lru_cache(maxsize=None)
def _cache_data_keyword(cache_type: type) -> Optional[str]:
    """The constructor keyword that fills a cache from ``(key, value)`` per layer, if it has one."""
    try:
        parameters = inspect.signature(cache_type.__init__).parameters
    except (TypeError, ValueError):
        return None
    return next((k for k in ("ddp_cache_data", "_distributed_cache_data") if k in parameters), None)


def _select_rows(cache, rows: torch.Tensor):
    """A new cache holding ``rows`` of ``cache`` (which is left as is), or ``None`` if not possible."""
    keyword = _cache_data_keyword(type(cache))
    if keyword is None:
        return None
    try:
        entries = [tuple(t[rows] if i < 2 else t for i, t in enumerate(entry)) for entry in cache]
    except (TypeError, IndexError):
        return None
    return type(cache)(**{keyword: entries})


def _shared_prompt_logprobs(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, score_mask: torch.Tensor
) -> Optional[torch.Tensor]:
    """:meth:`Team.sequence_logprobs` with every distinct prompt run once and little padding.

    Stage 1 runs the distinct (left-padded) prompts with a KV cache and keeps the logits of their
    last position (they predict completion token 0). Stage 2 runs each row's completion on its
    prompt's cache rows (the gradient flows back into the shared prompt), only up to the last
    token the row scores, in length buckets (:func:`length_buckets`). In a MADPO batch the winner
    and the loser of a pair share their prompt, so prompts are computed half as often as in one
    padded forward of ``[winners; losers]``, and padding and unscored trailing columns mostly
    vanish. Causal attention makes it exact. Returns ``None`` when the cache cannot be reused.
    """
    width = score_mask.shape[1]
    prompt_width = input_ids.shape[1] - width
    scored = score_mask != 0
    if prompt_width < 1 or not bool(scored.any()):
        return None
    columns = torch.arange(width, device=score_mask.device)
    needed = (torch.where(scored, columns + 1, 0).amax(dim=1)).tolist()  # tokens to predict per row
    prompt_mask = attention_mask[:, :prompt_width]
    keys = input_ids[:, :prompt_width].masked_fill(prompt_mask == 0, -1)
    distinct, rows = torch.unique(keys, dim=0, return_inverse=True)
    live = (distinct >= 0).any(dim=0).nonzero()
    distinct = distinct[:, int(live.min()) :]  # drop columns that are padding in every distinct prompt
    distinct_mask = (distinct >= 0).to(attention_mask.dtype)
    first = model(
        input_ids=distinct.clamp(min=0),
        attention_mask=distinct_mask,
        position_ids=(distinct_mask.long().cumsum(-1) - 1).clamp(min=0),
        use_cache=max(needed) > 1,
        logits_to_keep=1,
    )
    first_logprobs = gathered_logprobs(first.logits[:, -1][rows], input_ids[:, prompt_width])
    total = first_logprobs * score_mask[:, 0]
    rest = [r for r in range(len(needed)) if needed[r] > 1]
    if not rest:
        return total
    cache = getattr(first, "cache", None) or getattr(first, "past_key_values", None)
    if cache is None:
        return None
    cache_keyword, prompt_lengths = _cache_keyword(model), distinct_mask.sum(-1).long()
    sums = []
    call_cost = call_cost_tokens(model, input_ids.device)
    buckets = [[rest[k] for k in bucket] for bucket in length_buckets([needed[r] - 1 for r in rest], call_cost)]
    for bucket in buckets:
        index = torch.tensor(bucket, device=input_ids.device)
        span = max(needed[r] for r in bucket) - 1  # completion tokens fed: c[0] .. c[span - 1]
        bucket_cache = _select_rows(cache, rows[index])
        if bucket_cache is None:
            return None
        completion = input_ids[index, prompt_width : prompt_width + span]
        second = model(
            input_ids=completion,
            attention_mask=torch.cat(
                [distinct_mask[rows[index]], attention_mask[index, prompt_width : prompt_width + span]], dim=1
            ),
            position_ids=prompt_lengths[rows[index]].unsqueeze(1) + torch.arange(span, device=input_ids.device),
            use_cache=True,
            logits_to_keep=span,
            **{cache_keyword: bucket_cache},
        )
        targets = input_ids[index, prompt_width + 1 : prompt_width + 1 + span]
        sums.append((gathered_logprobs(second.logits, targets) * score_mask[index, 1 : 1 + span]).sum(dim=-1))
    order = torch.tensor([r for bucket in buckets for r in bucket], device=input_ids.device)
    return total.index_add(0, order, torch.cat(sums))


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
