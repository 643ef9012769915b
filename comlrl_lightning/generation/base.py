"""What every generation backend shares: the sampling settings, the completion record, the base class.

A :class:`Generator` is chosen on the team module (``model.init_args.generator``) the way
Lightning users choose callbacks: ``class_path`` plus its own ``init_args``. What to sample
(:class:`GenerationSettings`: ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``) is the
module's ``sampling`` option, because every backend and the API comparator honour it; how to
sample (batching, engines, memory) belongs to the backend. Collection, comparators, evaluation and rollouts all sample through the module's
generator; :func:`sample_team` is the one call that has every agent sample its own prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from jsonargparse.typing import PositiveFloat, PositiveInt

from comlrl_lightning.generation.extra_options import check_saveable
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import OptionError, at_least, number, positive, require


@dataclass(frozen=True)
class GenerationSettings:
    """What to sample, for collection, comparators, evaluation and rollouts alike (the seed's names
    and defaults; checked when made, so a bad value fails while the config is parsed).

    Args:
        max_new_tokens: tokens sampled per completion (>= 1).
        temperature: sampling temperature (> 0).
        top_p: nucleus sampling mass in (0, 1].
        top_k: top-k sampling (``None``: off).
        extra: further sampling options by Hugging Face ``generate()``'s names
            (``repetition_penalty``...), checked by the generator (see
            :mod:`comlrl_lightning.generation.extra_options`).
    """

    max_new_tokens: PositiveInt = 256
    temperature: PositiveFloat = 0.6
    top_p: float = 0.6
    top_k: Optional[PositiveInt] = 50
    extra: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        at_least("max_new_tokens", self.max_new_tokens, 1)
        positive("temperature", self.temperature)
        number("top_p", self.top_p)
        require(0 < self.top_p <= 1, "top_p must be in (0, 1].")
        at_least("top_k", self.top_k, 1, allow_none=True)
        check_saveable(self.extra)


@dataclass
class Completion:
    """One sampled completion: its token ids (up to and including the first EOS) and its text."""

    ids: List[int]
    text: str


def agent_context(team: Team, agent: int) -> Optional[int]:
    """How many positions agent ``agent``'s model reads: its config's ``max_position_embeddings`` or
    ``n_positions`` (a multimodal config's text model's), ``None`` where the config names neither."""
    config = getattr(team.agents[agent], "config", None)  # a transformers model's, or a LoRA view's
    text_config_of = getattr(config, "get_text_config", None)
    config = text_config_of() if text_config_of is not None else config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or None


def context_overflow(length: int, max_new_tokens: int, context: Optional[int], who: str) -> Optional[str]:
    """Why ``who``'s prompt of ``length`` tokens cannot be sampled from: ``length + max_new_tokens``
    positions past the model's ``context``, said with the excess; ``None`` when it fits or the
    context is unknown."""
    if not context or length + max_new_tokens <= context:
        return None
    return (
        f"{who}'s prompt has {length} tokens; with max_new_tokens={max_new_tokens} that is "
        f"{length + max_new_tokens - context} more than the model's context of {context}"
    )


def prompt_overflow(team: Team, agent: int, prompt: str, max_new_tokens: int) -> Optional[str]:
    """:func:`context_overflow` of ``prompt`` as agent ``agent`` of ``team`` encodes it (not
    tokenized at all where the model names no context)."""
    context = agent_context(team, agent)
    if context is None:
        return None
    length = len(team.encode_prompts(agent, [prompt])[0])
    return context_overflow(length, max_new_tokens, context, f"agent {agent}")


def completion_from_ids(tokenizer, ids: List[int]) -> Completion:
    """A sampled completion as every generator returns it: ids cut after the first EOS (kept), text
    decoded without special tokens."""
    if tokenizer.eos_token_id in ids:
        ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
    return Completion(ids=ids, text=tokenizer.decode(ids, skip_special_tokens=True))


class Generator:
    """Samples completions for one agent of a team. Subclass it to add a backend.

    The contract: :meth:`generate` returns ``result[prompt][sample]`` with ``num_samples``
    completions per prompt, each cut after its first EOS (ids include it, text does not), drawn
    from ``stream`` when one is given, so that runs repeat and resume exactly.
    """

    def generate(
        self,
        team: Team,
        agent_index: int,
        prompts: Sequence[str],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
    ) -> List[List[Completion]]:
        raise NotImplementedError

    def generate_team(
        self,
        team: Team,
        prompts: Sequence[Sequence[str]],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
    ) -> List[List[List[Completion]]]:
        """Every agent samples ``num_samples`` completions of each of its own prompts
        (``prompts[agent]``); returns ``result[agent][prompt][sample]``.

        Here agent after agent, each with one :meth:`generate` call, from the same ``stream``. A
        backend that can sample several agents in one pass overrides it, drawing from ``stream``
        what the agent-by-agent calls would draw.
        """
        return [
            self.generate(team, agent, agent_prompts, num_samples, settings, stream)
            for agent, agent_prompts in enumerate(prompts)
        ]

    def check_settings(self, settings: GenerationSettings) -> None:
        """Refuse, before any sampling, settings this backend cannot honour (by default: any ``extra``)."""
        if settings.extra:
            raise OptionError(
                f"{type(self).__name__} takes no further generation options (got {', '.join(sorted(settings.extra))})."
            )

    def weights_updated(self) -> None:
        """The team's weights may have changed: the team module calls this after every training
        batch and when it loads a checkpoint. A backend that keeps its own copy of the weights
        refreshes it before its next sample; one that samples with the agents themselves ignores it.
        Call it yourself after changing an agent's weights outside training."""

    def close(self) -> None:
        """Release what this backend holds beside the team (vLLM's engines); the next sample builds it
        again. The team module calls it when a single-process fit, validation, test or prediction ends."""


def sample_team(
    generator: Generator,
    team: Team,
    prompts: Sequence[Sequence[str]],
    num_samples: int,
    settings: GenerationSettings,
    stream: Optional[RandomStream] = None,
) -> List[List[List[Completion]]]:
    """Every agent of ``team`` samples ``num_samples`` completions of its own prompt for every item.

    ``prompts[item][agent]`` is agent ``agent``'s prompt for an item; every item of an agent is
    sampled in batched calls (:meth:`Generator.generate_team`: agent by agent from the same
    ``stream``, or a LoRA team's agents in one pass). Returns ``completions[agent][item][sample]``.
    """
    per_agent = [[per_item[agent] for per_item in prompts] for agent in range(team.num_agents)]
    return generator.generate_team(team, per_agent, num_samples, settings, stream)


__all__ = [
    "Completion",
    "GenerationSettings",
    "Generator",
    "agent_context",
    "completion_from_ids",
    "context_overflow",
    "prompt_overflow",
    "sample_team",
]
