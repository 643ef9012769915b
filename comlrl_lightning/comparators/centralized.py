"""Centralized comparator generation: one source writes every role in one completion.

:class:`CentralizedComparator` wraps another comparator (its ``source``): the local model of agent
slot ``agent_index`` (current, copy, fixed model or snapshot) or the API writes a joint
completion for a prompt an adapter builds from the agents' prompts, and the adapter splits the
completion back into one text per role. The default adapter asks for ``<agent_i>...</agent_i>``
tags.

Improvement over the reference: a completion that cannot be split (the adapter raises
:class:`CentralizedComparatorParseError`) is dropped, i.e. that joint candidate is removed for
every agent, and counted in ``comparator/unparseable``; only a round where no completion parses
is an error. The reference aborted training on the first unparseable completion.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from comlrl_lightning.comparators.api import encode
from comlrl_lightning.comparators.base import Comparator, ComparatorContext
from comlrl_lightning.comparators.local import CurrentComparator
from comlrl_lightning.errors import DataError
from comlrl_lightning.generation.base import Completion, GenerationSettings
from comlrl_lightning.tasks.centralized_task import (
    ADAPTER_OPTION,
    CentralizedAdapter,
    CentralizedComparatorParseError,
    joint_prompt,
    parse_roles,
    resolve_adapter,
)
from comlrl_lightning.tasks.chat import (
    ChatPrompt,
    has_chat_template,
    prompt_text,
    render_conversation,
)
from comlrl_lightning.validation import OptionError, at_least


class CentralizedComparator(Comparator):
    """Joint completions from one source, split into roles by the adapter.

    Args:
        source: the comparator that writes the joint completions (default: the live team). A local
            source sees only agent ``agent_index`` (its model, tokenizer and device), so a copy or
            a loaded model is one model, not N; an :class:`ApiComparator` is sent the joint prompt
            as agent ``agent_index``. K' is the source's ``num_candidates``.
        adapter: ``build_prompt`` / ``parse_completion`` (a :class:`CentralizedAdapter`, or an import
            path of a class, factory or object with those methods); default: the tagged adapter.
        agent_index: the agent slot whose model, tokenizer and device generate.
    """

    def __init__(
        self,
        source: Optional[Comparator] = None,
        adapter: Union[CentralizedAdapter, str, None] = None,
        agent_index: int = 0,
    ) -> None:
        self.source_comparator = source if source is not None else CurrentComparator()
        if isinstance(self.source_comparator, CentralizedComparator):
            raise OptionError("CentralizedComparator: source must not itself be centralized.")
        super().__init__(self.source_comparator.num_candidates)
        at_least("agent_index", agent_index, 0)
        self.adapter, self.agent_index = resolve_adapter(adapter), agent_index
        self.unparseable = self.empty_sections = self.truncated = 0

    def check_team(self, num_agents: int) -> None:
        if self.agent_index >= num_agents:
            raise OptionError(f"agent_index ({self.agent_index}) must be smaller than num_agents ({num_agents}).")
        self.source_comparator.check_team(num_agents)

    def bind(self, context: ComparatorContext) -> None:
        kind = type(self.source_comparator)
        if (
            kind.sample is not Comparator.sample
            and kind.sample_texts is Comparator.sample_texts
            and kind.source is Comparator.source
        ):
            # it would otherwise quietly write the joint completions with the live slot model
            raise OptionError(
                f"CentralizedComparator: source {kind.__name__} overrides sample() only; a centralized "
                "source must provide source() (a team) or sample_texts() (joint texts)."
            )
        super().bind(context)
        self.source_comparator.bind(context.view(self.agent_index))

    def snapshot_round(self, round_index: int) -> Optional[int]:
        return self.source_comparator.snapshot_round(round_index)

    def start_round(self, round_index: int) -> None:
        self.unparseable = self.empty_sections = self.truncated = 0
        self.source_comparator.start_round(round_index)

    def end_round(self) -> None:
        self.source_comparator.end_round()

    def check_saved_options(self, options: Mapping[str, Any]) -> None:
        self.source_comparator.check_saved_options(options)

    def state_dict(self) -> Dict[str, Any]:
        return {"source": self.source_comparator.state_dict()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.source_comparator.load_state_dict(state.get("source") or {})

    def metrics(self) -> Dict[str, float]:
        metrics = {
            "comparator/unparseable": float(self.unparseable),
            "comparator/empty_sections": float(self.empty_sections),
            "comparator/truncated_roles": float(self.truncated),
        }
        return {**self.source_comparator.metrics(), **metrics}

    def joint_prompt(self, item: Dict[str, Any], prompts: Sequence[str]) -> str:
        """The adapter's joint prompt from the agents' prompts.

        Agents whose prompts were rendered with their chat templates give the adapter their
        conversations' text (never another model's template), and the joint prompt is rendered as
        one user message with the template of agent ``agent_index``'s tokenizer (an API source
        is sent that message); without a template there, the joint prompt stays plain text.
        """
        joint = joint_prompt(self.adapter, item, [prompt_text(prompt) for prompt in prompts])
        if not any(isinstance(prompt, ChatPrompt) for prompt in prompts):
            return joint
        tokenizer = self.context.actors().tokenizers[self.agent_index]
        if not has_chat_template(tokenizer):
            return joint
        return render_conversation(
            tokenizer,
            [{"role": "user", "content": joint}],
            f"agent {self.agent_index}",
            "the agents' prompts are chat prompts",
        )

    def parse(self, text: str, item: Dict[str, Any], num_agents: int) -> Optional[List[str]]:
        """The role texts of one completion, or ``None`` when the adapter cannot split it."""
        return parse_roles(self.adapter, text, item, num_agents)

    def sample(
        self,
        items: Sequence[Dict[str, Any]],
        prompts: Sequence[Sequence[str]],
        num_candidates: int,
        settings: GenerationSettings,
    ) -> List[List[List[Completion]]]:
        team = self.context.actors()
        num_agents = team.num_agents
        joint_prompts = [self.joint_prompt(item, p) for item, p in zip(items, prompts)]
        texts = self.source_comparator.sample_texts(joint_prompts, items, num_candidates, settings)
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
                    completion, cut = encode(team, agent, role, settings.max_new_tokens)
                    result[agent][k].append(completion)
                    self.truncated += cut
        self.unparseable += dropped
        if total == 0:
            raise DataError("Centralized comparator produced no candidates.")
        if dropped == total:
            example = " ".join(texts[next(k for k, t in enumerate(texts) if t)][0].split())[:200]
            raise CentralizedComparatorParseError(
                f"Centralized comparator: none of this round's {total} completions could be split into "
                f"{num_agents} roles (e.g. {example!r}). Check the model or the comparator's {ADAPTER_OPTION}."
            )
        return result
