"""Centralized comparator generation (``comparator_generation_mode="centralized"``, SPEC 6.6).

One source -- the local model of agent slot ``comparator_centralized_agent_index`` (under the
``current``, ``current_copy``, ``model`` or ``history`` policy) or the API -- writes every role in
one completion. An adapter builds that completion's prompt from the agents' prompts and splits
the completion back into one text per role; the default asks for ``<agent_i>...</agent_i>`` tags.

Improvement over the reference: a completion that cannot be split (the adapter raises
:class:`CentralizedComparatorParseError`) is dropped, i.e. that joint candidate is removed for
every agent, and counted in ``comparator/unparseable``; only a round where no completion parses
is an error. The reference aborted training on the first unparseable completion.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..options import OptionError
from ..rng import RandomStream
from ..snapshots import PolicySnapshots
from ..team import Completion, GenerationSettings, Team
from .api import ApiComparator, ApiJob, ApiOptions, encode
from .local import Comparator, CurrentComparator, CurrentCopyComparator, HistoryComparator, ModelComparator

ADAPTER_OPTION = "comparator_centralized_adapter"


class CentralizedComparatorParseError(ValueError):
    """A centralized completion cannot be split into the agents' outputs."""


class AdapterError(OptionError, TypeError):
    """An adapter that does not have the adapter interface (a config error, and a ``TypeError`` as in the reference)."""


class TaggedCentralizedComparatorAdapter:
    """The default protocol: one ``<agent_i>...</agent_i>`` section per agent (0-based).

    ``build_prompt(batch_item, agent_prompts)`` lists every agent's original prompt and the
    expected sections; ``parse_completion(completion, batch_item, num_agents)`` takes, for each
    agent, the first section (tags case-insensitive, spaces inside the angle brackets allowed),
    stripped; a missing section gives ``""``, and no section at all raises
    :class:`CentralizedComparatorParseError`.
    """

    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        count = len(agent_prompts)
        prompt_sections = "\n\n".join(f"Agent {i} original prompt:\n{prompt}" for i, prompt in enumerate(agent_prompts))
        output_sections = "\n".join(f"<agent_{i}>\n...\n</agent_{i}>" for i in range(count))
        return (
            f"You are a centralized coordinator producing the separate outputs of {count} agents.\n\n"
            "Each output must satisfy its corresponding original prompt. Keep the outputs separate;\n"
            "do not merge them or add commentary outside the required tags.\n\n"
            f"{prompt_sections}\n\n"
            "Return exactly one section for each agent in this format:\n"
            f"{output_sections}\n"
        )

    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        outputs: List[str] = []
        found = False
        for i in range(num_agents):
            match = re.search(rf"<\s*agent_{i}\s*>(.*?)<\s*/\s*agent_{i}\s*>", str(completion), re.IGNORECASE | re.DOTALL)
            found = found or match is not None
            outputs.append(match.group(1).strip() if match else "")
        if not found:
            raise CentralizedComparatorParseError("Centralized completion did not contain any indexed agent sections.")
        return outputs


def resolve_adapter(spec: Any) -> Any:
    """The adapter of ``comparator_centralized_adapter``: ``None`` (tagged), an import path, or an object.

    An import path may name a class (instantiated without arguments), a factory function returning
    an adapter, or an adapter object. It must have callable ``build_prompt`` and ``parse_completion``.
    """
    if spec is None:
        return TaggedCentralizedComparatorAdapter()
    adapter = spec
    if isinstance(spec, str):
        module_name, _, name = spec.strip().rpartition(".")
        try:
            adapter = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError) as error:
            raise OptionError(f"{ADAPTER_OPTION}: cannot import {spec!r} ({error}).") from None
        if isinstance(adapter, type) or (callable(adapter) and not hasattr(adapter, "build_prompt")):
            adapter = adapter()
    for method in ("build_prompt", "parse_completion"):
        if not callable(getattr(adapter, method, None)):
            raise AdapterError(f"{ADAPTER_OPTION}.{method} must be callable.")
    return adapter


class CentralizedComparator(Comparator):
    """Joint completions from one source, split into roles by the adapter.

    Args:
        team_of_actors: the actors (their tokenizers give each role's token ids).
        stream: the comparator stream (local generation draws from it on slot ``slot``'s device).
        adapter: ``build_prompt`` / ``parse_completion`` (see :class:`TaggedCentralizedComparatorAdapter`).
        slot: ``comparator_centralized_agent_index``: the agent index sent to the API.
        local: a comparator whose ``source()`` team generates the joint completions with agent
            ``slot_in_source`` (``None`` with ``api``).
        api: the API comparator (``None`` with a local source).
    """

    def __init__(
        self,
        team_of_actors: Callable[[], Team],
        stream: RandomStream,
        adapter: Any,
        slot: int,
        local: Optional[Comparator] = None,
        slot_in_source: int = 0,
        api: Optional[ApiComparator] = None,
    ) -> None:
        super().__init__(team_of_actors, stream)
        self.adapter, self.slot, self.local, self.slot_in_source, self.api = adapter, slot, local, slot_in_source, api
        self.unparseable = self.empty_sections = 0

    def start_round(self, round_index: int) -> None:
        self.unparseable = self.empty_sections = 0
        (self.api or self.local).start_round(round_index)

    def end_round(self) -> None:
        (self.api or self.local).end_round()

    def metrics(self) -> Dict[str, float]:
        metrics = {"comparator/unparseable": float(self.unparseable),
                   "comparator/empty_sections": float(self.empty_sections)}
        return {**(self.api.metrics() if self.api is not None else {}), **metrics}

    def joint_prompt(self, item: Dict[str, Any], prompts: Sequence[str]) -> str:
        prompt = self.adapter.build_prompt(item, list(prompts))
        if not isinstance(prompt, str) or not prompt:
            raise TypeError(f"{ADAPTER_OPTION}.build_prompt must return a non-empty str (got {type(prompt).__name__}).")
        return prompt

    def joint_texts(self, joint_prompts: List[str], items: Sequence[Dict[str, Any]], count: int,
                    settings: GenerationSettings) -> List[List[str]]:
        """``count`` joint completions per item (fewer from an API that returned fewer)."""
        if self.api is not None:
            return self.api.texts_for([ApiJob(p, self.slot, item) for p, item in zip(joint_prompts, items)], count, settings)
        team = self.local.source()
        completions = team.generate(self.slot_in_source, joint_prompts, count, settings, self.stream)
        return [[c.text for c in per_item] for per_item in completions]

    def parse(self, text: str, item: Dict[str, Any], num_agents: int) -> Optional[List[str]]:
        """The role texts of one completion, or ``None`` when the adapter cannot split it."""
        try:
            roles = self.adapter.parse_completion(text, item, num_agents)
        except CentralizedComparatorParseError:
            return None
        if isinstance(roles, (str, bytes)) or not isinstance(roles, Sequence):
            raise TypeError(f"{ADAPTER_OPTION}.parse_completion must return a sequence of strings, not {type(roles).__name__}.")
        roles = list(roles)
        if len(roles) != num_agents:
            raise ValueError(f"{ADAPTER_OPTION}.parse_completion must return exactly {num_agents} outputs; got {len(roles)}.")
        if not all(isinstance(role, str) for role in roles):
            raise TypeError(f"{ADAPTER_OPTION}.parse_completion must return strings only.")
        return roles

    def sample(
        self,
        items: Sequence[Dict[str, Any]],
        prompts: Sequence[Sequence[str]],
        num_candidates: int,
        settings: GenerationSettings,
    ) -> List[List[List[Completion]]]:
        team = self._actors()
        num_agents = team.num_agents
        joint_prompts = [self.joint_prompt(item, p) for item, p in zip(items, prompts)]
        texts = self.joint_texts(joint_prompts, items, num_candidates, settings)
        result: List[List[List[Completion]]] = [[[] for _ in items] for _ in range(num_agents)]
        total = dropped = 0
        for k, (item, per_item) in enumerate(zip(items, texts)):
            for text in per_item:
                total += 1
                roles = self.parse(text, item, num_agents)
                if roles is None:
                    dropped += 1
                    continue
                self.empty_sections += sum(1 for role in roles if not role.strip())
                for agent, role in enumerate(roles):
                    result[agent][k].append(encode(team, agent, role))
        self.unparseable += dropped
        if total == 0:
            raise ValueError("Centralized comparator produced no candidates.")
        if dropped == total:
            example = " ".join(texts[next(k for k, t in enumerate(texts) if t)][0].split())[:200]
            raise CentralizedComparatorParseError(
                f"Centralized comparator: none of this round's {total} completions could be split into "
                f"{num_agents} roles (e.g. {example!r}). Check the model or set {ADAPTER_OPTION}."
            )
        return result


def build_centralized_comparator(
    policy: str,
    team_of_actors: Callable[[], Team],
    stream: RandomStream,
    slot: int,
    adapter: Any,
    devices: Sequence[str],
    sources: Sequence[str],
    snapshots: Optional[PolicySnapshots],
    history_k: Optional[int],
    api: Optional[ApiOptions],
) -> CentralizedComparator:
    """The centralized comparator of ``policy`` using agent slot ``slot`` (its model, tokenizer, device).

    Local sources see a one-agent view of slot ``slot``, so ``current_copy`` copies and ``model``
    loads one model, not N; ``history`` loads the round's snapshot (once per round) and uses agent ``slot``.
    """
    count = team_of_actors().num_agents
    if not 0 <= slot < count:
        raise OptionError("comparator_centralized_agent_index must be >= 0." if slot < 0
                          else "comparator_centralized_agent_index must be smaller than num_agents.")

    def slot_view() -> Team:
        team = team_of_actors()
        return Team([team.agents[slot]], tokenizers=[team.tokenizers[slot]])

    if policy == "api":
        return CentralizedComparator(team_of_actors, stream, adapter, slot, api=ApiComparator(team_of_actors, stream, api))
    if policy == "history":
        local: Comparator = HistoryComparator(team_of_actors, stream, snapshots, history_k)
        return CentralizedComparator(team_of_actors, stream, adapter, slot, local=local, slot_in_source=slot)
    if policy == "current_copy":
        local = CurrentCopyComparator(slot_view, stream, [devices[slot]])
    elif policy == "model":
        if len(sources) not in (1, count):
            raise OptionError("comparator_agents length must be 1 or num_agents when comparator_generation_mode='centralized'.")
        local = ModelComparator(slot_view, stream, [sources[0] if len(sources) == 1 else sources[slot]], [devices[slot]])
    else:
        local = CurrentComparator(slot_view, stream)
    return CentralizedComparator(team_of_actors, stream, adapter, slot, local=local, slot_in_source=0)
