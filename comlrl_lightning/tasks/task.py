"""Task side of a run: where the items come from, how each agent is prompted, and the oracle."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union, cast

from comlrl_lightning.defaults import (
    EMBEDDED,
    MATCHER_TEMPLATE,
    TOY_EVAL_SEED,
    TOY_TRAIN_SEED,
    WRITER_TEMPLATE,
    toy_items,
)
from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.tasks.chat import (
    AgentPrompt,
    ChatTemplateError,
    PromptRenderer,
    check_agent_prompt,
    conversation_problem,
)
from comlrl_lightning.tasks.held_out import HELD_OUT, check_evaluation_source, check_held_out_size, held_out_split
from comlrl_lightning.tasks.item_sources import HFDataset, ItemSet, load_dataset_items
from comlrl_lightning.tasks.oracle import CallableSpec, Oracle, resolve_callable
from comlrl_lightning.tasks.task_files import read_json, read_jsonl, task_file_format
from comlrl_lightning.tasks.turns import Turns
from comlrl_lightning.validation import require

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from comlrl_lightning.team.team import Team

ItemSource = Union[str, HFDataset, ItemSet, List[Dict[str, Any]], None]
"""Task items: a list, a file, a dataset name or folder, an :class:`HFDataset`, an :class:`ItemSet`
(by import path in a config), ``"embedded"`` or ``None``; from Python also a ``datasets.Dataset`` /
``DatasetDict``."""
FormatterSpec = Union[str, Callable, None]


def load_items(source: ItemSource, split: str = "train", role: str = "train") -> Sequence[Dict[str, Any]]:
    """Task items from a Python list, a ``.json``/``.jsonl`` file, a Hugging Face dataset, or ``"embedded"``.

    A JSON file holds a list of objects (or ``{"items": [...]}``); a JSONL file one object per line;
    both become a list, and both may be compressed (``items.jsonl.gz``; read under the bounds of
    :mod:`~comlrl_lightning.tasks.file_bounds`). Any other string (a hub name, a local dataset folder, a folder written by
    ``save_to_disk``), an :class:`~comlrl_lightning.tasks.HFDataset` (with a configuration
    ``name``, ``data_files``, a ``split``) or a ``datasets.Dataset`` is read as a dataset and served
    without copying (:class:`~comlrl_lightning.tasks.item_sources.DatasetItems`); ``split`` is its split
    unless the source names one. ``"embedded"`` is the toy task (``role`` picks its train or eval items).
    """
    if source is None:
        return []
    option = f"{role}_dataset"
    text = require_local(source, option, "a local file or folder, or a hub dataset name") if _is_path(source) else None
    if isinstance(source, (list, tuple)):
        items = list(source)
    elif isinstance(source, ItemSet):
        items = list(source.items())
    elif text == EMBEDDED:
        items = toy_items(16 if role == "train" else 32, TOY_TRAIN_SEED if role == "train" else TOY_EVAL_SEED)
    elif text is not None and task_file_format(text) == "jsonl":
        items = read_jsonl(Path(text), option)
    elif text is not None and task_file_format(text) == "json":
        payload = read_json(Path(text), option)
        if isinstance(payload, dict):
            if not isinstance(payload.get("items"), list):
                raise DataError(f'{option}: {source} holds an object; expected a list of items or {{"items": [...]}}.')
            payload = payload["items"]
        if not isinstance(payload, list):
            raise DataError(f"{option}: {source} holds a {type(payload).__name__}; expected a list of items.")
        items = payload
    else:
        return load_dataset_items(source, split, role)  # a dataset's rows are always objects
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f"{option}: item {index} is a {type(item).__name__}, expected an object (dict).")
    return items


def _is_path(source: Any) -> bool:
    return isinstance(source, (str, os.PathLike))


class TemplateFormatter:
    """Prompt from a ``str.format`` template over the item's fields, e.g. ``"Q: {question}\\nA:"``."""

    def __init__(self, template: str) -> None:
        self.template = template

    def __call__(self, item: Dict[str, Any]) -> str:
        try:
            return self.template.format(**item)
        except KeyError as error:
            raise KeyError(
                f"formatter template {self.template!r} needs field {error} missing from item {item!r}"
            ) from None

    def __repr__(self) -> str:
        return f"TemplateFormatter({self.template!r})"


def default_formatter(item: Dict[str, Any]) -> AgentPrompt:
    """``item["prompt"]`` (a string or a list of chat messages), else ``item["messages"]`` (a list of
    chat messages); ``None``, numbers or lists of anything else are never turned into text."""
    if "prompt" not in item and "messages" in item:
        field = "messages"
        if not isinstance(item[field], list):
            raise TypeError(f"field 'messages' is a {type(item[field]).__name__}, expected a list of chat messages")
    elif "prompt" not in item:
        raise KeyError("field 'prompt' is missing (set formatters to build prompts from other fields)")
    else:
        field = "prompt"
        if not isinstance(item[field], (str, list)):
            raise TypeError(
                f"field 'prompt' is a {type(item[field]).__name__}, expected a string or a list of chat messages"
            )
    problem = conversation_problem(item[field]) if isinstance(item[field], list) else None
    if problem:
        raise TypeError(f"field {field!r} is a list, expected a string or a list of chat messages ({problem})")
    return item[field]


def resolve_formatter(spec: FormatterSpec) -> Callable[[Dict[str, Any]], AgentPrompt]:
    """A formatter: ``None`` -> ``item["prompt"]``; a string with ``{`` -> template; else an import path."""
    if spec is None:
        return default_formatter
    if isinstance(spec, str) and "{" in spec:
        return TemplateFormatter(spec)
    formatter = resolve_callable(spec, "formatters")
    assert formatter is not None  # None only for a None spec (above)
    return formatter


def check_items(task: "Task", items: Sequence[Dict[str, Any]], role: str) -> None:
    """Build every item's prompts now, before any sampling: a missing field, a prompt that is neither
    a string nor a list of chat messages, or one its agent's chat template cannot render is an
    error naming the dataset, the item and the cause."""
    for index, item in enumerate(items):
        try:
            task.prompts(item)
        except (KeyError, TypeError, ValueError) as error:
            message = error.args[0] if isinstance(error, KeyError) and error.args else error
            raise DataError(f"{role}_dataset: item {index}: {str(message).rstrip('.')}.") from None


def check_prompts_fit(
    task: "Task", team: "Team", max_new_tokens: int, items_by_role: Dict[str, Sequence[Dict[str, Any]]]
) -> None:
    """Every prompt plus ``max_new_tokens`` fits its agent's context (``task`` as the team sees it).

    A model whose config names its context (``max_position_embeddings`` or ``n_positions``) would
    otherwise fail deep inside sampling; the error names the dataset, the item, the agent and the excess.
    """
    for agent in range(team.num_agents):
        config = cast("PreTrainedModel", team.agents[agent]).config  # a transformers model's, or a LoRA view's
        text_config_of = getattr(config, "get_text_config", None)
        config = text_config_of() if text_config_of is not None else config
        context = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if not context:
            continue
        for role, items in items_by_role.items():
            for index, item in enumerate(items):
                length = len(team.encode_prompts(agent, [task.prompts(item)[agent]])[0])
                require(
                    length + max_new_tokens <= context,
                    f"{role}_dataset: item {index}: agent {agent}'s prompt has {length} tokens; with "
                    f"max_new_tokens={max_new_tokens} that is {length + max_new_tokens - context} more than the "
                    f"model's context of {context}. Shorten the prompt or lower max_new_tokens.",
                )


class Task:
    """Formatters (one per agent) and the oracle that scores joint responses.

    Args:
        formatters: ``None`` (every agent gets ``item["prompt"]``, else ``item["messages"]``), one
            formatter for all agents, or one per agent; each a callable, an import path, or a
            template string. A formatter returns a text or a list of chat messages.
        reward_func: the task reward (callable or import path), see :mod:`comlrl_lightning.tasks.oracle`.
        reward_processor: optional map from raw reward to the score used for pairs.
        num_agents: the team size the formatters must match.
        chat_template: render text prompts with each agent's chat template too (as one user
            message); chat-message prompts are always rendered. Rendering needs the team's
            tokenizers: it happens in the task as the team sees it (:meth:`for_team`).
        turns: how many turns a joint answer has, the transition between them and the return
            (:class:`~comlrl_lightning.tasks.turns.Turns`; ``None``: one turn).
    """

    def __init__(
        self,
        formatters: Union[FormatterSpec, Sequence[FormatterSpec]] = None,
        reward_func: CallableSpec = None,
        reward_processor: CallableSpec = None,
        num_agents: int = 2,
        chat_template: bool = False,
        turns: Optional[Turns] = None,
    ) -> None:
        if isinstance(formatters, (list, tuple)):
            if len(formatters) != num_agents:
                raise ConfigurationError("Number of formatters must match num_agents when providing a sequence.")
            self.formatters = [resolve_formatter(spec) for spec in formatters]
        else:
            # one formatter for every agent (any other sequence is refused by resolve_callable)
            self.formatters = [resolve_formatter(cast(FormatterSpec, formatters))] * num_agents
        self.oracle = Oracle(reward_func, reward_processor)
        self.chat_template = chat_template
        self.turns = turns if turns is not None else Turns()
        self.renderer: Optional[PromptRenderer] = None

    centralized: ClassVar[bool] = False
    """Whether one joint completion answers every role (:class:`~comlrl_lightning.tasks.CentralizedTask`)."""
    scored_completions = 0
    unparsed_completions = 0
    """Joint completions scored, and those that could not be split into roles (centralized tasks only)."""

    @property
    def num_agents(self) -> int:
        return len(self.formatters)

    @property
    def num_roles(self) -> int:
        """Roles the reward scores (here: one per agent)."""
        return len(self.formatters)

    def agent_prompts(self, item: Dict[str, Any]) -> List[AgentPrompt]:
        """Each agent's prompt for ``item`` as its formatter gives it: a text or a list of chat messages."""
        return [
            check_agent_prompt(formatter(item), f"formatter {index}") for index, formatter in enumerate(self.formatters)
        ]

    def prompts(self, item: Dict[str, Any]) -> List[str]:
        """Each agent's prompt for ``item`` as the agent reads it (rendered where a chat template applies)."""
        return [self.render(agent, prompt) for agent, prompt in enumerate(self.agent_prompts(item))]

    def render(self, agent: int, prompt: AgentPrompt) -> str:
        """Agent ``agent``'s text for ``prompt``: through the team's renderer, or as it is without one."""
        if self.renderer is not None:
            return self.renderer.render(agent, prompt)
        if isinstance(prompt, str) and not self.chat_template:
            return prompt
        raise ChatTemplateError(
            f"agent {agent}'s prompt needs its tokenizer's chat template, and this task has no tokenizers: the "
            "team renders prompts in the task as it sees it (Task.for_team, called by the team module's team_task)."
        )

    def for_team(self, tokenizers: Callable[[], Sequence[Any]]) -> "Task":
        """The task as a team whose agents use ``tokenizers`` (a callable, loaded on first need) sees it:
        each agent's prompt rendered with its own tokenizer's chat template where one applies.

        With ``chat_template`` on, every agent's tokenizer is checked for a template now, before any sampling.
        """
        task = copy.copy(self)
        task.renderer = PromptRenderer(tokenizers, self.chat_template)
        task.renderer.check()
        return task


@dataclass(frozen=True)
class TaskOptions:
    """What a team learns: its task items, how each agent is prompted, and the reward (a data
    module's ``task`` option; the reference (CoMLRL) takes these as its trainers' arguments).

    Args:
        train_dataset: task items: a list of dicts, a ``.json``/``.jsonl`` path, a Hugging Face dataset
            name or folder (also one written by ``save_to_disk``), an
            :class:`~comlrl_lightning.tasks.HFDataset` (``{path: gsm8k, name: main}``,
            ``data_files``, ``split``), an :class:`~comlrl_lightning.tasks.item_sources.ItemSet` by
            ``class_path`` (``comlrl_lightning.tasks.coding.HumanEval``), a ``datasets.Dataset``
            (Python), or ``"embedded"`` (the toy task).
            Datasets are indexed where they are, never copied into a list.
        eval_dataset: evaluation items, same forms (``None``: no evaluation), or ``"held_out"``: items
            of ``train_dataset`` kept out of training (:mod:`~comlrl_lightning.tasks.held_out`). The
            embedded task's (``"embedded"``) beside a ``train_dataset`` of one's own is refused.
        dataset_split: split for a Hugging Face ``train_dataset`` (unless it names its own).
        eval_split: split for a Hugging Face ``eval_dataset`` (unless it names its own).
        held_out_size: with ``eval_dataset: held_out``, how many items of ``train_dataset`` are held
            out: an int is a count, a float in (0, 1) a fraction (at least one item).
        held_out_seed: the seed of that draw (the same held-out items whatever the run's seed).
        formatters: per-agent prompt builders: callables, import paths, or templates like
            ``"Q: {question}"``; ``None`` uses ``item["prompt"]`` (else ``item["messages"]``) for
            every agent (the embedded task: its own templates). A prompt is a text or a list of
            ``{"role", "content"}`` chat messages; messages are rendered with each agent's own
            tokenizer's chat template.
        chat_template: render text prompts with each agent's chat template too, as one user message
            (for instruct models); off: text prompts are given to the model as they are.
        reward_func: task reward (callable or import path), called per joint response (the
            embedded task: its own reward).
        reward_processor: optional map from raw reward to the pair score (callable or import path).
        turns: multi-turn trajectories (:class:`~comlrl_lightning.tasks.turns.Turns`: ``num_turns``,
            ``external_transition``, ``discount``, ``early_termination_threshold``, ``stop_when``);
            the default is one turn.
    """

    train_dataset: ItemSource = EMBEDDED
    eval_dataset: ItemSource = None
    dataset_split: str = "train"
    eval_split: str = "test"
    held_out_size: Union[int, float] = 0.1
    held_out_seed: int = 0
    formatters: Union[str, List[str], Callable, List[Callable], None] = None
    chat_template: bool = False
    reward_func: CallableSpec = None
    reward_processor: CallableSpec = None
    turns: Turns = Turns()

    def __post_init__(self) -> None:
        check_held_out_size(self.held_out_size)

    @property
    def held_out(self) -> bool:
        """Whether the evaluation items are held out of ``train_dataset`` (``eval_dataset: held_out``)."""
        return isinstance(self.eval_dataset, str) and self.eval_dataset == HELD_OUT

    @property
    def embedded(self) -> bool:
        """Whether the training items are the embedded toy task's."""
        return isinstance(self.train_dataset, str) and self.train_dataset == EMBEDDED

    @property
    def formatter_specs(self) -> Union[FormatterSpec, Sequence[FormatterSpec]]:
        """The formatters given, or the embedded task's."""
        return embedded_formatters() if self.formatters is None and self.embedded else self.formatters

    @property
    def reward_spec(self) -> CallableSpec:
        """The reward function given, or the embedded task's."""
        return EMBEDDED_REWARD if self.reward_func is None and self.embedded else self.reward_func

    def build(self, num_agents: int) -> "Task":
        """The :class:`Task` of ``num_agents`` roles (formatters, oracle, chat rendering)."""
        return Task(
            self.formatter_specs, self.reward_spec, self.reward_processor, num_agents, self.chat_template, self.turns
        )

    def items(self) -> Tuple[Sequence[Dict[str, Any]], Sequence[Dict[str, Any]]]:
        """``(training items, evaluation items)``, loaded once (with ``held_out``: one split of ``train_dataset``)."""
        train = load_items(self.train_dataset, self.dataset_split, "train")
        check_evaluation_source(self.train_dataset, self.eval_dataset)  # after train_dataset's own errors
        if self.held_out:
            return held_out_split(train, self.held_out_size, self.held_out_seed)
        return train, load_items(self.eval_dataset, self.eval_split, "eval")

    def train_items(self) -> Sequence[Dict[str, Any]]:
        return self.items()[0] if self.held_out else load_items(self.train_dataset, self.dataset_split, "train")

    def eval_items(self) -> Sequence[Dict[str, Any]]:
        check_evaluation_source(self.train_dataset, self.eval_dataset)
        return self.items()[1] if self.held_out else load_items(self.eval_dataset, self.eval_split, "eval")


EMBEDDED_REWARD = "comlrl_lightning.defaults.vowel_length_reward"
"""The embedded toy task's reward function."""


def embedded_formatters() -> List[str]:
    """The toy task's prompt templates (writer, matcher)."""
    return [WRITER_TEMPLATE, MATCHER_TEMPLATE]


__all__ = ["Task", "TaskOptions", "load_items", "resolve_formatter", "TemplateFormatter", "embedded_formatters"]
