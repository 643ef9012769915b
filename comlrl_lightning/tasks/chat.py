"""Chat prompts: each agent's prompt rendered with its own tokenizer's chat template.

A formatter (or an item's ``prompt`` / ``messages`` field) gives every agent either a plain text
or a conversation: a list of ``{"role": ..., "content": ...}`` messages, the conversational format
TRL users know. The team renders it once, in the task as the team sees it
(:meth:`~comlrl_lightning.tasks.Task.for_team`, called through the team module's ``team_task``):
a conversation becomes ``tokenizer.apply_chat_template(messages, tokenize=False,
add_generation_prompt=True)`` with that agent's tokenizer; a plain text stays as it is unless the
data module's ``chat_template`` option is on, which sends it as one user message. Collection,
comparators, evaluation, rollouts, the reward function's ``prompts=`` and the round files all see
this rendered text (a :class:`ChatPrompt`, which also keeps the conversation it came from, so an
API comparator can send the messages instead of another model's template).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from comlrl_lightning.errors import ConfigurationError

Message = Dict[str, Any]
Conversation = List[Message]
AgentPrompt = Union[str, Conversation]
"""One agent's prompt before rendering: a plain text or a chat conversation."""

CHAT_TEMPLATE_OPTION = "chat_template"


class ChatTemplateError(ConfigurationError):
    """A prompt that needs a chat template its agent's tokenizer does not have (or cannot apply)."""


class ChatPrompt(str):
    """A prompt rendered with an agent's chat template.

    It is the text the agent reads (what is tokenized and what the round files keep); ``messages``
    is the conversation it was rendered from, for whoever must not see this agent's template (a
    remote chat model, a centralized joint prompt).
    """

    messages: Conversation

    def __new__(cls, text: str, messages: Sequence[Message]) -> "ChatPrompt":
        prompt = super().__new__(cls, text)
        prompt.messages = clean_conversation(messages)
        return prompt

    def __reduce__(self):
        return ChatPrompt, (str(self), self.messages)


def is_conversation(prompt: Any) -> bool:
    """Whether ``prompt`` is a list of chat messages (the form, not yet checked)."""
    return isinstance(prompt, list)


def check_agent_prompt(prompt: Any, source: str) -> AgentPrompt:
    """``prompt`` if it is a string or a non-empty list of ``{"role": str, "content": ...}`` dicts.

    Raises ``TypeError`` naming ``source`` (e.g. ``"formatter 1"``) otherwise; nothing is ever
    turned into text silently.
    """
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list):
        raise TypeError(f"{source} returned {type(prompt).__name__}, expected str or a list of chat messages.")
    problem = conversation_problem(prompt)
    if problem:
        raise TypeError(f"{source} returned a list that is not a chat conversation: {problem}.")
    return prompt


def conversation_problem(messages: list) -> Optional[str]:
    """Why ``messages`` is not a conversation (``None`` when it is one)."""
    if not messages:
        return "it is empty"
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {index} is a {type(message).__name__}, expected {{'role': ..., 'content': ...}}"
        if not isinstance(message.get("role"), str):
            return f"message {index} has no 'role' string"
        if "content" not in message:
            return f"message {index} has no 'content'"
    return None


def clean_conversation(messages: Sequence[Message]) -> Conversation:
    """Copies of the messages without keys whose value is ``None``: a ``datasets`` table gives every
    message every key any message has, and a template (or an API) would read ``None`` as given."""
    return [{key: value for key, value in message.items() if value is not None} for message in messages]


def conversation_of(prompt: str) -> Conversation:
    """The conversation a prompt stands for: a :class:`ChatPrompt`'s messages, else one user message."""
    if isinstance(prompt, ChatPrompt):
        return [dict(message) for message in prompt.messages]
    return [{"role": "user", "content": str(prompt)}]


def prompt_text(prompt: Union[AgentPrompt, str]) -> str:
    """The words of a prompt without any template: a conversation's contents, blank-line separated.

    A centralized adapter builds its joint prompt from these texts (the one model renders the
    joint prompt with its own template), and a centralized task's reward gets them as ``prompts=``.
    """
    if isinstance(prompt, ChatPrompt):
        prompt = prompt.messages
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(message.get("content", "")) for message in prompt)


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_conversation(tokenizer: Any, messages: Sequence[Message], who: str, reason: str) -> ChatPrompt:
    """``messages`` rendered with ``tokenizer``'s chat template, ready for the assistant's turn."""
    if not has_chat_template(tokenizer):
        raise ChatTemplateError(missing_template(who, reason))
    messages = clean_conversation(messages)
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as error:  # jinja2's errors (e.g. "system role not supported") are not ValueErrors
        raise ChatTemplateError(
            f"{who}'s chat template cannot render this prompt: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(text, str):
        raise ChatTemplateError(f"{who}'s apply_chat_template returned {type(text).__name__}, expected str.")
    return ChatPrompt(text, messages)


def missing_template(who: str, reason: str) -> str:
    return (
        f"{who}'s tokenizer has no chat template, but {reason}. Give that agent a tokenizer with a chat "
        f"template (tokenizer.chat_template, or the module's tokenizers option), or turn the data module's "
        f"{CHAT_TEMPLATE_OPTION} option off and use text prompts."
    )


OPTION_ON = f"the data module's {CHAT_TEMPLATE_OPTION} option is on"
MESSAGES_GIVEN = "its prompt is a list of chat messages"


class PromptRenderer:
    """Renders every agent's prompt with that agent's tokenizer.

    Args:
        tokenizers: returns one tokenizer per agent; called on the first render (or :meth:`check`),
            so a run whose prompts need no template never loads a tokenizer for it.
        chat_template: send plain text prompts as one user message through the template too.
        names: how errors name each agent (default ``agent <index>``).
    """

    def __init__(
        self, tokenizers: Callable[[], Sequence[Any]], chat_template: bool, names: Optional[Sequence[str]] = None
    ) -> None:
        self._tokenizers, self.chat_template, self.names = tokenizers, chat_template, names
        self._resolved: Optional[List[Any]] = None

    @property
    def tokenizers(self) -> List[Any]:
        if self._resolved is None:
            self._resolved = list(self._tokenizers())
        return self._resolved

    def name(self, agent: int) -> str:
        return self.names[agent] if self.names is not None else f"agent {agent}"

    def check(self) -> None:
        """With ``chat_template`` on: every agent's tokenizer must have a template (before any sampling)."""
        if self.chat_template:
            for agent, tokenizer in enumerate(self.tokenizers):
                if not has_chat_template(tokenizer):
                    raise ChatTemplateError(missing_template(self.name(agent), OPTION_ON))

    def render(self, agent: int, prompt: AgentPrompt) -> str:
        """The text agent ``agent`` reads: a conversation (or, with ``chat_template``, a text as one
        user message) through its chat template; else the text unchanged."""
        if isinstance(prompt, str) and not self.chat_template:
            return prompt
        messages = conversation_of(prompt) if isinstance(prompt, str) else prompt
        reason = MESSAGES_GIVEN if is_conversation(prompt) else OPTION_ON
        return render_conversation(self.tokenizers[agent], messages, self.name(agent), reason)


__all__ = [
    "AgentPrompt",
    "ChatPrompt",
    "ChatTemplateError",
    "Conversation",
    "PromptRenderer",
    "check_agent_prompt",
    "conversation_of",
    "prompt_text",
    "render_conversation",
]
