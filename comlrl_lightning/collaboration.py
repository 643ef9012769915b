"""How a team covers the task's roles: one model per role, or one model writing every role.

Chosen on the team module (``model.init_args.collaboration``). :class:`Decentralized` (the
default) gives every role its own agent. :class:`Centralized` gives the team ONE model that
writes all N roles in one joint completion: its prompt is built by an adapter from the roles'
prompts, and the completion is split back into role texts for the task reward. The team module
then trains a one-agent team on a :class:`CentralizedTask`, the task as that team sees it, so
collection, pairs, round files (the joint text verbatim), MADPO, MARLHF and every comparator work
unchanged: a comparator samples the joint prompt too (centralized generation from slot 0).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Dict, List, Literal, Optional, Sequence, Tuple, Union

from .chat import PromptRenderer, is_conversation, prompt_text

from .comparators.centralized import (
    CentralizedAdapter,
    CentralizedComparatorParseError,
    joint_prompt,
    parse_roles,
    resolve_adapter,
)
from .options import require
from .task import Task


class Collaboration:
    """The base: how the team module's agents map onto the task's roles."""

    centralized: ClassVar[bool] = False

    def team_task(self, task: Task, tokenizers: Optional[Callable[[], Sequence[Any]]] = None) -> Task:
        """The task as this team sees it: each agent's prompt rendered with its tokenizer's chat
        template where one applies (``tokenizers`` returns one per agent; ``None``: as it is)."""
        return task if tokenizers is None else task.for_team(tokenizers)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Decentralized(Collaboration):
    """One agent per role: agent ``i`` answers role ``i``'s prompt (the default)."""


class Centralized(Collaboration):
    """One model writes every role in one joint completion.

    Args:
        adapter: builds the joint prompt from the item and the roles' prompts and splits the
            completion into role texts: a :class:`~comlrl_lightning.comparators.CentralizedAdapter`,
            or an import path of a class, factory or object with ``build_prompt`` and
            ``parse_completion`` (default: the tagged ``<agent_i>...</agent_i>`` adapter).
    """

    centralized = True

    def __init__(self, adapter: Union[CentralizedAdapter, str, None] = None) -> None:
        self.adapter = resolve_adapter(adapter)

    def team_task(self, task: Task, tokenizers: Optional[Callable[[], Sequence[Any]]] = None) -> "CentralizedTask":
        return CentralizedTask(task, self.adapter, tokenizers)

    def __repr__(self) -> str:
        return f"Centralized(adapter={type(self.adapter).__name__})"


class DelimitedAdapter(CentralizedAdapter):
    """Roles one after the other, separated by ``separator`` (``"a;b"`` -> ``["a", "b"]``).

    A model with a small vocabulary (the embedded default has no ``<`` or ``/``) can write it.

    Args:
        separator: text between two roles (text after the last role's separator stays in the last role).
        prompt_template: the joint prompt, formatted with the item's fields (``"topic: {prompt}\\n"``);
            ``None``: the roles' prompts, one per line, then ``"answer every role, separated by <separator>:"``.
        missing: a completion with fewer separators than roles - 1: ``error`` (it does not parse, and
            scores as every role empty) or ``empty`` (its parts go to the first roles, the rest are
            empty: a model that leaves roles out is scored on that).
    """

    def __init__(self, separator: str = ";", prompt_template: Optional[str] = None,
                 missing: Literal["error", "empty"] = "error") -> None:
        require(bool(separator), "separator must not be empty.")
        require(missing in ("error", "empty"), "missing must be one of: error, empty.")
        self.separator, self.prompt_template, self.missing = separator, prompt_template, missing

    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        if self.prompt_template is not None:
            return self.prompt_template.format(**batch_item)
        return "\n".join(agent_prompts) + f"\nanswer every role, separated by {self.separator}:"

    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        parts = completion.split(self.separator, num_agents - 1)
        if len(parts) != num_agents and self.missing == "error":
            raise CentralizedComparatorParseError(f"expected {num_agents - 1} separator(s) {self.separator!r}.")
        return [part.strip() for part in parts] + [""] * (num_agents - len(parts))


class CentralizedTask(Task):
    """The task as a centralized team sees it: one joint prompt per item, scored through its roles.

    ``prompts(item)`` is ``[adapter.build_prompt(item, role_prompts(item))]``, rendered with the one
    model's chat template when the roles' task has ``chat_template`` on or a role's prompt is a list
    of chat messages (then the joint prompt is one user message). The adapter and the roles'
    reward get the roles' prompts as text (:func:`~comlrl_lightning.chat.prompt_text`: a
    conversation's contents). The oracle splits each joint completion into the roles' texts and
    calls the roles' task reward with them. A completion that does not split scores as every role
    empty (as the reference) and is counted in :attr:`unparsed_completions`, never a crash.

    Args:
        roles: the task of the roles (one formatter per role).
        adapter: builds the joint prompt and splits joint completions.
        tokenizers: returns the one model's tokenizer (in a list); ``None``: prompts are not rendered.
    """

    centralized = True

    def __init__(self, roles: Task, adapter: Any, tokenizers: Optional[Callable[[], Sequence[Any]]] = None) -> None:
        # no Task.__init__: the roles' task already resolved the formatters and the reward
        self.roles, self.adapter, self.chat_template = roles, adapter, roles.chat_template
        self.renderer = None
        if tokenizers is not None:
            self.renderer = PromptRenderer(tokenizers, roles.chat_template, names=["the centralized team's model"])
            self.renderer.check()
        self.oracle = CentralizedOracle(self)
        self.scored_completions = 0
        self.unparsed_completions = 0

    @property
    def num_agents(self) -> int:
        return 1

    @property
    def num_roles(self) -> int:
        return self.roles.num_agents

    def role_prompts(self, item: Dict[str, Any]) -> List[str]:
        """Each role's prompt as text (what the adapter and the roles' reward get)."""
        return [prompt_text(prompt) for prompt in self.roles.agent_prompts(item)]

    def prompts(self, item: Dict[str, Any]) -> List[str]:
        given = self.roles.agent_prompts(item)
        joint = joint_prompt(self.adapter, item, [prompt_text(prompt) for prompt in given])
        if any(is_conversation(prompt) for prompt in given):  # chat roles: the joint prompt is a chat turn too
            return [self.render(0, [{"role": "user", "content": joint}])]
        return [self.render(0, joint)]

    def split(self, text: str, item: Dict[str, Any]) -> Tuple[List[str], bool]:
        """The role texts of a joint completion, and whether it parsed (else every role is empty)."""
        roles = parse_roles(self.adapter, text, item, self.num_roles)
        self.scored_completions += 1
        if roles is None:
            self.unparsed_completions += 1
            return [""] * self.num_roles, False
        return roles, True


class CentralizedOracle:
    """Scores joint completions with the roles' oracle (``candidates[0][j]`` is joint completion ``j``)."""

    def __init__(self, task: CentralizedTask) -> None:
        self.task = task

    @property
    def reward_func(self):
        return self.task.roles.oracle.reward_func

    def score(self, candidates: Sequence[Sequence[str]], prompts: Sequence[str], item: Any) -> Tuple[List[float], List[float]]:
        split = [self.task.split(text, item)[0] for text in candidates[0]]
        by_role = [[roles[r] for roles in split] for r in range(self.task.num_roles)]
        return self.task.roles.oracle.score(by_role, self.task.role_prompts(item), item)


__all__ = ["Centralized", "CentralizedTask", "Collaboration", "Decentralized", "DelimitedAdapter"]
