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


__all__ = ["Completion", "GenerationSettings", "Generator", "completion_from_ids", "sample_team"]
