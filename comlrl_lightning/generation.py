"""Generation backends: how a team's agents sample completions.

A :class:`Generator` is chosen on the team module (``model.init_args.generator``) the way
Lightning users choose callbacks: ``class_path`` plus its own ``init_args``. What to sample
(``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``) stays a module option, because every
backend and the API comparator honour it; how to sample (batching, engines, memory) belongs to
the backend. Collection, comparators, evaluation and rollouts all sample through the module's
generator. :class:`~comlrl_lightning.vllm_generator.VLLMGenerator` (optional, needs vLLM) samples
with vLLM engines colocated in the training process.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from .options import at_least
from .rng import RandomStream
from .team import Completion, GenerationSettings, Team


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

    def weights_updated(self) -> None:
        """The team's weights may have changed: the team module calls this after every training
        batch and when it loads a checkpoint. A backend that keeps its own copy of the weights
        refreshes it before its next sample; one that samples with the agents themselves ignores it.
        Call it yourself after changing an agent's weights outside training."""


class HFGenerator(Generator):
    """Hugging Face ``generate()`` on the agent's own model (the default backend).

    Prompts of many items share one left-padded call and each prompt is prefilled once for all
    its samples; the tokens are those of plain ``generate()``.

    Args:
        batch_size: sequences (prompts x samples) per ``generate()`` call. ``None``: as many as a
            quarter of the device's *total* memory holds (KV cache estimated from the model's
            config), the same on the same kind of machine, so runs resume exactly; set a number to
            pin it across machines or to cap collection's memory.
    """

    def __init__(self, batch_size: Optional[int] = None) -> None:
        at_least("batch_size", batch_size, 1, allow_none=True)
        self.batch_size = batch_size

    def generate(
        self,
        team: Team,
        agent_index: int,
        prompts: Sequence[str],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
    ) -> List[List[Completion]]:
        return team.generate(agent_index, prompts, num_samples, settings, stream, batch_size=self.batch_size)

    def __repr__(self) -> str:
        return f"HFGenerator(batch_size={self.batch_size})"


# at the end: the vLLM backend subclasses Generator (it imports vLLM only when constructed)
from .vllm_generator import VLLMGenerator  # noqa: E402

__all__ = ["Generator", "HFGenerator", "VLLMGenerator"]
