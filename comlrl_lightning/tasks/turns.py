"""Multi-turn tasks: how many turns, what the environment says between them, and the return.

With ``num_turns = H > 1`` a joint answer is a trajectory: every agent answers its prompt (turn 0),
the task's ``external_transition`` reads what happened and returns each agent's next user
message, every agent answers again given its own conversation so far, and so on for ``H`` turns
(fewer when ``stop_when`` or ``early_termination_threshold`` ends it early). The oracle scores the
joint answer of every turn; the trajectory's return is the last turn's reward, or with
``discount`` the discounted sum ``sum_t discount^t r_t``.

The transition's calling convention: ``external_transition(item, turn, history) -> list[str]``,
one message per agent, after turn ``turn`` (0-based); ``history`` is a :class:`TurnHistory` (every
agent's prompts and responses so far, each turn's raw and processed rewards). Whether an agent
sees the other agents' responses is the transition's choice.

How an agent's conversation grows (:func:`next_prompt`): where its prompt went through a chat
template (a conversation, or the ``chat_template`` option), the conversation gets its previous
response as an ``assistant`` message and the transition's message as a ``user`` message and is
rendered again; otherwise the plain-text layout ``previous prompt + previous response + "\\n\\n" +
message + "\\n"`` (:data:`PLAIN_TURN_SEPARATOR`) is the next prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from jsonargparse.typing import PositiveInt

from comlrl_lightning.errors import DataError
from comlrl_lightning.runtime.text import one_line_text, valid_text
from comlrl_lightning.tasks.chat import ChatPrompt, conversation_of, render_conversation
from comlrl_lightning.tasks.oracle import CallableSpec, function_name, resolve_callable
from comlrl_lightning.validation import at_least, number, require

PLAIN_TURN_SEPARATOR = "\n\n"
"""Between an agent's previous response and the next message in the plain-text layout."""

ERROR_CHARS = 300
"""The longest reason a transition's exception gives in a :class:`TransitionError`, in characters."""


class TransitionError(DataError):
    """The task's ``external_transition`` raised or returned something other than one text per agent."""


@dataclass(frozen=True)
class Turns:
    """How many turns a joint answer has and how its turns end (a task's ``turns`` option; the
    reference (CoMLRL)'s names).

    Args:
        num_turns: ``H``, turns per trajectory (1: single-turn, exactly as without this option).
        external_transition: ``transition(item, turn, history) -> list[str]`` (a callable or an import
            path): each agent's next user message after turn ``turn`` (0-based); required when ``H > 1``.
        discount: ``None``: a trajectory's return is its last turn's reward; a number ``gamma`` in
            ``(0, 1]``: the discounted sum ``sum_t gamma^t r_t`` over its turns.
        early_termination_threshold: a trajectory ends after a turn whose (processed) reward is at
            least this (``None``: never).
        stop_when: ``stop_when(reward) -> bool`` (a callable or an import path) on each turn's
            processed reward: ``True`` ends the trajectory after that turn.
    """

    num_turns: PositiveInt = 1
    external_transition: CallableSpec = None
    discount: Optional[float] = None
    early_termination_threshold: Optional[float] = None
    stop_when: CallableSpec = None

    def __post_init__(self) -> None:
        at_least("num_turns", self.num_turns, 1)
        if self.discount is not None:
            number("discount", self.discount)
            require(0 < self.discount <= 1, "discount must be in (0, 1] or null (the last turn's reward).")
        if self.early_termination_threshold is not None:
            number("early_termination_threshold", self.early_termination_threshold)
        require(
            self.num_turns == 1 or self.external_transition is not None,
            f"num_turns={self.num_turns} needs an external_transition: the messages each agent reads "
            "between turns (a callable or an import path).",
        )
        resolve_callable(self.external_transition, "external_transition")
        resolve_callable(self.stop_when, "stop_when")

    @property
    def multi(self) -> bool:
        """Whether trajectories have more than one turn."""
        return self.num_turns > 1

    @property
    def transition(self) -> Optional[Callable]:
        return resolve_callable(self.external_transition, "external_transition")

    def stops(self, reward: float) -> bool:
        """Whether a trajectory ends after a turn with processed reward ``reward``."""
        threshold = self.early_termination_threshold
        if threshold is not None and reward >= threshold:
            return True
        stop_when = resolve_callable(self.stop_when, "stop_when")
        return bool(stop_when(reward)) if stop_when is not None else False

    def trajectory_return(self, rewards: Sequence[float]) -> float:
        """The return of a trajectory with per-turn rewards ``rewards`` (:func:`trajectory_return`)."""
        return trajectory_return(rewards, self.discount)


def trajectory_return(rewards: Sequence[float], discount: Optional[float] = None) -> float:
    """``rewards[-1]`` (``discount`` ``None``), else ``sum_t discount^t rewards[t]``."""
    if discount is None:
        return float(rewards[-1])
    return float(sum(discount**turn * reward for turn, reward in enumerate(rewards)))


@dataclass
class TurnHistory:
    """What one trajectory did so far, as a transition reads it.

    Attributes:
        prompts: ``prompts[t][agent]``: the text agent ``agent`` read at turn ``t`` (rendered).
        responses: ``responses[t][agent]``: what the agent answered at turn ``t``.
        raw_rewards: ``raw_rewards[t]``: the reward function's value of turn ``t``'s joint answer.
        rewards: ``rewards[t]``: that value after the reward processor.
    """

    prompts: List[List[str]] = field(default_factory=list)
    responses: List[List[str]] = field(default_factory=list)
    raw_rewards: List[float] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)

    @property
    def num_turns(self) -> int:
        return len(self.responses)


def call_transition(
    transition: Callable, item: Dict[str, Any], turn: int, history: TurnHistory, num_agents: int, index: int
) -> List[str]:
    """``transition(item, turn, history)`` checked: one text per agent, else a :class:`TransitionError`
    naming the transition, the item (its index in the round's items) and the turn, in one line.
    A message's lone surrogates (``"\\ud800"``, which no tokenizer can encode) become U+FFFD
    (:func:`~comlrl_lightning.runtime.text.valid_text`); its lines and other characters are kept."""
    where = f"external_transition {function_name(transition)} (item {index}, after turn {turn})"
    try:
        messages = transition(item, turn, history)
    except Exception as error:
        reason = one_line_text(f"{type(error).__name__}: {error}", ERROR_CHARS)
        raise TransitionError(f"{where} raised {reason}") from error
    if not isinstance(messages, (list, tuple)) or len(messages) != num_agents:
        got = f"{len(messages)} values" if isinstance(messages, (list, tuple)) else type(messages).__name__
        raise TransitionError(f"{where} must return a list of {num_agents} messages, one per agent (got {got}).")
    for agent, message in enumerate(messages):
        if not isinstance(message, str):
            raise TransitionError(
                f"{where} returned a {type(message).__name__} for agent {agent}; each message must be a str."
            )
    return [valid_text(message) for message in messages]


def next_prompt(tokenizer: Callable[[], Any], previous: str, response: str, message: str, who: str) -> str:
    """The text an agent reads next: its conversation grown by ``response`` (assistant) and
    ``message`` (user) and rendered with the chat template of ``tokenizer()`` when ``previous`` was
    rendered with one (a :class:`ChatPrompt`); otherwise the plain-text layout
    ``previous + response + "\\n\\n" + message + "\\n"``."""
    if isinstance(previous, ChatPrompt):
        conversation = conversation_of(previous) + [
            {"role": "assistant", "content": response},
            {"role": "user", "content": message},
        ]
        return render_conversation(tokenizer(), conversation, who, "its conversation went through its chat template")
    return f"{previous}{response}{PLAIN_TURN_SEPARATOR}{message}\n"


__all__ = [
    "PLAIN_TURN_SEPARATOR",
    "TransitionError",
    "TurnHistory",
    "Turns",
    "call_transition",
    "next_prompt",
    "trajectory_return",
]
