"""Sampling whose random draws belong to the request, not to the batch.

Plain ``generate()`` samples every step with one ``torch.multinomial`` over the whole batch from the
global generator, so a sequence's tokens depend on which other sequences share its call (the
batch size, the agents batched together). Here every request (a prompt and its ``K`` samples) gets
a seed drawn from the caller's :class:`~comlrl_lightning.runtime.rng.RandomStream`; sample ``j``
of a request with seed ``s`` draws its uniforms ``u_t`` from a counter-based generator keyed by
``s + j`` (vLLM's convention for a request's samples; :func:`row_uniforms`), and step ``t`` picks the token where the cumulative
distribution first exceeds ``u_t`` (inverse-CDF sampling of ``softmax(processed logits)``, the
distribution ``multinomial`` samples). ``generate()`` runs greedy over a logits processor that
returns only that token: the same tokens whether a request is sampled alone, with the other
prompts of its agent, or with every agent of a LoRA team in one call (up to float rounding of
the logits, which can flip a draw that falls within rounding of a boundary).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, List, Optional, Sequence

import numpy as np
import torch

from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.top_p import CandidateTopP
from comlrl_lightning.runtime.rng import RandomStream

SEED_BOUND = 2**62
"""Request seeds are drawn below this: sample ``j`` of a request gets ``seed + j``, which must stay int64."""


def request_seeds(stream: Optional[RandomStream], count: int) -> List[int]:
    """One seed per request, drawn from the stream's CPU torch state (its Python state, which pair
    selection uses, is left alone); from the global generator without a stream."""
    with stream.active("cpu") if stream is not None else contextlib.nullcontext():
        return torch.randint(0, SEED_BOUND, (count,), dtype=torch.int64).tolist()


GOLDEN_GAMMA = 0x9E3779B97F4A7C15
"""SplitMix64's increment (2**64 / golden ratio)."""


def splitmix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on ``uint64`` values (a bijection that scrambles every bit):
    ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31``,
    arithmetic modulo ``2**64``."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def row_uniforms(seeds: Sequence[int], num_samples: int, steps: int) -> torch.Tensor:
    """``[len(seeds) * num_samples, steps]`` float64 uniforms in ``[0, 1)``, row ``r * K + j`` (the
    order ``generate()`` returns samples in) from seed ``seeds[r] + j``.

    Each row is a SplitMix64 sequence: its state starts at ``splitmix64(seed)`` (so neighbouring
    seeds start far apart) and step ``t`` outputs ``splitmix64(state + (t + 1) * GOLDEN_GAMMA)``,
    whose top 53 bits make the uniform. Counter-based, so every row is computed at once, whatever
    the other rows of the call.
    """
    rows = np.asarray([seed + sample for seed in seeds for sample in range(num_samples)], dtype=np.uint64)
    counters = np.arange(1, steps + 1, dtype=np.uint64) * np.uint64(GOLDEN_GAMMA)
    bits = splitmix64(splitmix64(rows)[:, None] + counters[None, :])
    return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def inverse_cdf_tokens(scores: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """``[B]`` tokens drawn from ``softmax(scores)`` by inverse CDF: token ``i`` is the first with
    ``cumsum(p)_i > u * sum(p)``. A token of probability 0 is never the first to pass ``u``."""
    probabilities = scores.float().softmax(dim=-1)
    cumulative = probabilities.cumsum(dim=-1)
    threshold = uniforms.to(cumulative.dtype) * cumulative[:, -1]
    tokens = torch.searchsorted(cumulative, threshold.unsqueeze(-1), right=True)
    return tokens.clamp(max=scores.shape[-1] - 1).squeeze(-1)


class SeededSampler:
    """The last logits processor of a greedy ``generate()``: every row's next token drawn from its
    own uniforms (:func:`inverse_cdf_tokens`); returns scores that keep only that token.

    Args:
        uniforms: ``[rows, max_new_tokens]`` (:func:`row_uniforms`).
        prompt_width: the width of the ``input_ids`` given to ``generate()`` (step 0 starts there).
    """

    def __init__(self, uniforms: torch.Tensor, prompt_width: int) -> None:
        self.uniforms, self.prompt_width = uniforms, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_width
        uniforms = self.uniforms[:, step].to(scores.device)
        tokens = inverse_cdf_tokens(scores, uniforms)
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, tokens.unsqueeze(-1), 0.0)


def beam_sampling_options(settings: GenerationSettings, tokenizer) -> dict:
    """The keyword arguments of a beam-search ``generate()`` call (``num_beams`` > 1 among the extra
    options): ``generate()``'s own beam sampling (``do_sample=True``, as the reference (CoMLRL)
    calls it) with the settings' temperature, top-k and top-p; run under :func:`request_rng`."""
    return dict(
        do_sample=True,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        max_new_tokens=settings.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


@contextlib.contextmanager
def request_rng(seed: int, device: torch.device) -> Iterator[None]:
    """The global generators (CPU, and every CUDA device's when ``device`` is one) seeded with one
    request's ``seed`` inside, and as they were afterwards: a beam search, whose draws come from
    the global generator, samples the same tokens for the same request and shifts no other stream."""
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def seeded_sampling_options(
    settings: GenerationSettings,
    tokenizer,
    seeds: Sequence[int],
    num_samples: int,
    prompt_width: int,
) -> dict:
    """The keyword arguments of a ``generate()`` call whose rows are ``num_samples`` samples of each
    request with seed ``seeds[r]``: temperature, then top-k, then top-p (Hugging Face's warpers, in
    the order sampling applies them; top-p as :class:`~comlrl_lightning.generation.top_p.CandidateTopP`,
    the warper's kept tokens without sorting the vocabulary), then the :class:`SeededSampler`;
    greedy on what is left."""
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    processors: list = []
    if settings.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(settings.temperature))
    if settings.top_k:
        processors.append(TopKLogitsWarper(top_k=settings.top_k))
    if settings.top_p < 1.0:
        processors.append(CandidateTopP(top_p=settings.top_p))
    uniforms = row_uniforms(seeds, num_samples, settings.max_new_tokens)
    processors.append(SeededSampler(uniforms, prompt_width))
    return dict(
        do_sample=False,
        # the model's generation config may set these for sampling; greedy would warn about them
        temperature=None,
        top_p=None,
        top_k=None,
        logits_processor=LogitsProcessorList(processors),
        max_new_tokens=settings.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
