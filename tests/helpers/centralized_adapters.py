"""Centralized comparator adapters used by the tests (imported by path, as a config would)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from comlrl_lightning.tasks.centralized_task import (
    CentralizedAdapter,
    CentralizedComparatorParseError,
)


class HalvesAdapter:
    """A short prompt the tiny model can take; the completion is cut into N consecutive parts.

    A completion whose character codes sum to an odd number is unparseable: a deterministic coin
    flip per text, so a tiny-model round drops about half of its completions and keeps the rest.
    """

    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        return f"topic: {batch_item['prompt']}\nboth:"

    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        if sum(map(ord, completion)) % 2:
            raise CentralizedComparatorParseError("odd checksum")
        cuts = [len(completion) * i // num_agents for i in range(num_agents + 1)]
        return [completion[cuts[i] : cuts[i + 1]] for i in range(num_agents)]


class NeverParses(HalvesAdapter):
    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        raise CentralizedComparatorParseError("never")


class WrongCount(HalvesAdapter):
    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        return [completion]


class NotASequence(HalvesAdapter):
    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> Any:
        return completion


class EchoAdapter(CentralizedAdapter):
    """A subclass of the adapter base class: every role gets the whole completion."""

    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        return f"topic: {batch_item['prompt']}\nboth:"

    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        return [completion] * num_agents


class NoParser:
    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        return "x"


def make_halves() -> HalvesAdapter:
    """A factory: the option may name a function that returns an adapter."""
    return HalvesAdapter()


INSTANCE = HalvesAdapter()
