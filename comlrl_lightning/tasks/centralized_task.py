"""One model writing every role: the joint prompt, the split of a joint completion, the task it makes.

A centralized source (a centralized team, or a :class:`~comlrl_lightning.comparators.CentralizedComparator`)
answers ONE prompt for all N roles. An adapter builds that prompt from the roles' prompts
(:meth:`CentralizedAdapter.build_prompt`) and splits the completion back into one text per role
(:meth:`CentralizedAdapter.parse_completion`); the default adapter asks for
``<agent_i>...</agent_i>`` tags, :class:`DelimitedAdapter` for separators.
:class:`CentralizedTask` is the task as a centralized team sees it: one joint prompt per item,
scored through its roles, with every completion that does not split counted.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple

from comlrl_lightning.errors import DataError
from comlrl_lightning.runtime.import_paths import import_object
from comlrl_lightning.tasks.chat import PromptRenderer, is_conversation, prompt_text
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.validation import OptionError, require

ADAPTER_OPTION = "adapter"


class CentralizedComparatorParseError(DataError):
    """A centralized completion cannot be split into the agents' outputs."""


class AdapterError(OptionError, TypeError):
    """An adapter that does not have the adapter interface (a config error, and a ``TypeError`` as in the reference)."""


class CentralizedAdapter:
    """Builds the joint prompt of a centralized source and splits its completion into roles.

    Subclass it (or write any class with these two methods) and name it by import path.
    """

    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        """The one prompt that asks for every role, from the task item and the agents' own prompts."""
        raise NotImplementedError

    def parse_completion(self, completion: str, batch_item: Dict[str, Any], num_agents: int) -> List[str]:
        """One text per role; raise :class:`CentralizedComparatorParseError` when it cannot be split."""
        raise NotImplementedError


ROLE_TAG = re.compile(r"<\s*(/?)\s*agent_(\d+)\s*>", re.IGNORECASE)
"""An opening or closing role tag of the tagged protocol (case-insensitive, spaces inside allowed)."""


def escape_role_tags(text: str) -> str:
    """``text`` with every role tag's angle brackets escaped (``</agent_0>`` -> ``&lt;/agent_0&gt;``), so
    text pasted into a joint prompt cannot open or close a section the model is asked to write."""
    return ROLE_TAG.sub(lambda match: f"&lt;{match.group(0)[1:-1]}&gt;", text)


class TaggedCentralizedComparatorAdapter(CentralizedAdapter):
    """The default protocol: one ``<agent_i>...</agent_i>`` section per agent (0-based).

    ``build_prompt(batch_item, agent_prompts)`` lists every agent's original prompt (role tags in
    them escaped, see :func:`escape_role_tags`) and the expected sections;
    ``parse_completion(completion, batch_item, num_agents)`` takes each agent's section (tags
    case-insensitive, spaces inside the angle brackets allowed), stripped. Sections follow one
    another: a role tag inside a section (nesting), a second section of a role, or a closing tag
    without its opening one raises :class:`CentralizedComparatorParseError`, so the text cannot
    hand one role's words to another. A missing section gives ``""`` (also a last one left open, as
    a completion cut at ``max_new_tokens`` leaves it), and no section at all raises.
    """

    def build_prompt(self, batch_item: Dict[str, Any], agent_prompts: Sequence[str]) -> str:
        count = len(agent_prompts)
        prompt_sections = "\n\n".join(
            f"Agent {i} original prompt:\n{escape_role_tags(str(prompt))}" for i, prompt in enumerate(agent_prompts)
        )
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
        text = str(completion)
        sections: Dict[int, str] = {}
        opened: Optional[re.Match] = None  # the section being read
        for tag in ROLE_TAG.finditer(text):
            closing, role = bool(tag.group(1)), int(tag.group(2))
            if opened is None:
                if closing:
                    raise CentralizedComparatorParseError(f"{tag.group(0)} closes a section that was never opened.")
                if role in sections:
                    raise CentralizedComparatorParseError(f"agent_{role} has more than one section.")
                opened = tag
            elif closing and role == int(opened.group(2)):
                sections[role] = text[opened.end() : tag.start()].strip()
                opened = None
            else:
                raise CentralizedComparatorParseError(
                    f"{tag.group(0)} inside the section of agent_{opened.group(2)} (sections do not nest)."
                )
        if not any(role < num_agents for role in sections):  # a last section left open (cut off) is missing
            raise CentralizedComparatorParseError("Centralized completion did not contain any indexed agent sections.")
        return [sections.get(i, "") for i in range(num_agents)]


def resolve_adapter(spec: Any) -> Any:
    """The adapter: ``None`` (tagged), an import path, or an object.

    An import path may name a class (instantiated without arguments), a factory function returning
    an adapter, or an adapter object. It must have callable ``build_prompt`` and ``parse_completion``.
    """
    if spec is None:
        return TaggedCentralizedComparatorAdapter()
    adapter = spec
    if isinstance(spec, str):
        adapter = import_object(spec, ADAPTER_OPTION, OptionError)  # from sys.path, else the working directory
        if isinstance(adapter, type) or (callable(adapter) and not hasattr(adapter, "build_prompt")):
            adapter = adapter()
    for method in ("build_prompt", "parse_completion"):
        if not callable(getattr(adapter, method, None)):
            raise AdapterError(f"{ADAPTER_OPTION}.{method} must be callable.")
    return adapter


def joint_prompt(adapter: Any, item: Dict[str, Any], prompts: Sequence[str]) -> str:
    """``adapter.build_prompt(item, prompts)``, checked to be a non-empty string."""
    prompt = adapter.build_prompt(item, list(prompts))
    if not isinstance(prompt, str) or not prompt:
        raise AdapterError(f"{ADAPTER_OPTION}.build_prompt must return a non-empty str (got {type(prompt).__name__}).")
    return prompt


def parse_roles(adapter: Any, text: str, item: Dict[str, Any], num_roles: int) -> Optional[List[str]]:
    """``num_roles`` role texts of a joint completion, or ``None`` when the adapter cannot split it.

    The adapter signals an unparseable completion with :class:`CentralizedComparatorParseError`;
    any other malformed answer (not a sequence of ``num_roles`` strings) is a programming error.
    """
    try:
        roles = adapter.parse_completion(text, item, num_roles)
    except CentralizedComparatorParseError:
        return None
    if isinstance(roles, (str, bytes)) or not isinstance(roles, Sequence):
        raise AdapterError(
            f"{ADAPTER_OPTION}.parse_completion must return a sequence of strings, not {type(roles).__name__}."
        )
    roles = list(roles)
    if len(roles) != num_roles:
        raise AdapterError(
            f"{ADAPTER_OPTION}.parse_completion must return exactly {num_roles} outputs; got {len(roles)}."
        )
    if not all(isinstance(role, str) for role in roles):
        raise AdapterError(f"{ADAPTER_OPTION}.parse_completion must return strings only.")
    return roles


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

    def __init__(
        self, separator: str = ";", prompt_template: Optional[str] = None, missing: Literal["error", "empty"] = "error"
    ) -> None:
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
    reward get the roles' prompts as text (:func:`~comlrl_lightning.tasks.chat.prompt_text`: a
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
        self.turns = roles.turns
        self.renderer = None
        if tokenizers is not None:
            self.renderer = PromptRenderer(tokenizers, roles.chat_template, names=["the centralized team's model"])
            self.renderer.check()
        self.oracle = CentralizedOracle(self)  # type: ignore[assignment]  # duck-typed: Oracle's rewards, rewards_many, reward_func
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

    def rewards(
        self, candidates: Sequence[Sequence[str]], prompts: Sequence[str], item: Any
    ) -> Tuple[List[float], List[float]]:
        return self.task.roles.oracle.rewards(*self._by_role(candidates, item))

    def rewards_many(self, requests: Sequence[Tuple[Sequence[Sequence[str]], Sequence[str], Any]]):
        """:meth:`rewards` of every request, through the roles' oracle in one batch where its reward takes one."""
        return self.task.roles.oracle.rewards_many(
            [self._by_role(candidates, item) for candidates, _, item in requests]
        )

    def _by_role(self, candidates: Sequence[Sequence[str]], item: Any) -> Tuple[List[List[str]], List[str], Any]:
        split = [self.task.split(text, item)[0] for text in candidates[0]]
        by_role = [[roles[r] for roles in split] for r in range(self.task.num_roles)]
        return by_role, self.task.role_prompts(item), item
