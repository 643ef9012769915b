"""Task side of a run: where the items come from, how each agent is prompted, and the oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Sequence, Union

from .defaults import EMBEDDED, MATCHER_TEMPLATE, TOY_EVAL_SEED, TOY_TRAIN_SEED, WRITER_TEMPLATE, toy_items
from .oracle import CallableSpec, Oracle, resolve_callable

ItemSource = Union[str, List[Dict[str, Any]], None]
FormatterSpec = Union[str, Callable, None]


def load_items(source: ItemSource, split: str = "train", role: str = "train") -> List[Dict[str, Any]]:
    """Task items from a Python list, a ``.json``/``.jsonl`` file, a Hugging Face dataset, or ``"embedded"``.

    A JSON file holds a list of objects (or ``{"items": [...]}``); a JSONL file one object per line.
    Any other string is passed to ``datasets.load_dataset(source, split=split)`` (a hub name or a
    local dataset folder). ``"embedded"`` is the toy task (``role`` picks its train or eval items).
    """
    if source is None:
        return []
    if isinstance(source, (list, tuple)):
        items = list(source)
    elif source == EMBEDDED:
        items = toy_items(16 if role == "train" else 32, TOY_TRAIN_SEED if role == "train" else TOY_EVAL_SEED)
    elif str(source).endswith(".jsonl"):
        items = []
        with open(source, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{role}_dataset: {source} line {number}: not valid JSON ({error.msg}, "
                                     f"column {error.colno}).") from None
    elif str(source).endswith(".json"):
        payload = json.loads(Path(source).read_text(encoding="utf-8"))
        if isinstance(payload, dict):
            if not isinstance(payload.get("items"), list):
                raise ValueError(f"{role}_dataset: {source} holds an object; expected a list of items or {{\"items\": [...]}}.")
            payload = payload["items"]
        items = payload
    else:
        from datasets import load_dataset

        items = list(load_dataset(source, split=split))
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"{role}_dataset: item {index} is a {type(item).__name__}, expected an object (dict).")
    return items


class TemplateFormatter:
    """Prompt from a ``str.format`` template over the item's fields, e.g. ``"Q: {question}\\nA:"``."""

    def __init__(self, template: str) -> None:
        self.template = template

    def __call__(self, item: Dict[str, Any]) -> str:
        try:
            return self.template.format(**item)
        except KeyError as error:
            raise KeyError(f"formatter template {self.template!r} needs field {error} missing from item {item!r}") from None

    def __repr__(self) -> str:
        return f"TemplateFormatter({self.template!r})"


def default_formatter(item: Dict[str, Any]) -> str:
    """``item["prompt"]``, which must be a string (``None``, lists or numbers are not turned into text)."""
    if "prompt" not in item:
        raise KeyError("field 'prompt' is missing (set formatters to build prompts from other fields)")
    if not isinstance(item["prompt"], str):
        raise TypeError(f"field 'prompt' is a {type(item['prompt']).__name__}, expected a string")
    return item["prompt"]


def resolve_formatter(spec: FormatterSpec) -> Callable[[Dict[str, Any]], str]:
    """A formatter: ``None`` -> ``item["prompt"]``; a string with ``{`` -> template; else an import path."""
    if spec is None:
        return default_formatter
    if isinstance(spec, str) and "{" in spec:
        return TemplateFormatter(spec)
    return resolve_callable(spec, "formatters")


def check_items(task: "Task", items: Sequence[Dict[str, Any]], role: str) -> None:
    """Build every item's prompts now, before any model work: a missing field or a prompt that is
    not a string is an error naming the dataset, the item and the field."""
    for index, item in enumerate(items):
        try:
            task.prompts(item)
        except (KeyError, TypeError, ValueError) as error:
            message = error.args[0] if isinstance(error, KeyError) and error.args else error
            raise ValueError(f"{role}_dataset: item {index}: {message}.") from None


class Task:
    """Formatters (one per agent) and the oracle that scores joint responses.

    Args:
        formatters: ``None`` (every agent gets ``item["prompt"]``), one formatter for all agents,
            or one per agent; each a callable, an import path, or a template string.
        reward_func: the task reward (callable or import path), see :mod:`comlrl_lightning.oracle`.
        reward_processor: optional map from raw reward to the score used for pairs.
        num_agents: the team size the formatters must match.
    """

    def __init__(
        self,
        formatters: Union[FormatterSpec, Sequence[FormatterSpec]] = None,
        reward_func: CallableSpec = None,
        reward_processor: CallableSpec = None,
        num_agents: int = 2,
    ) -> None:
        if isinstance(formatters, (list, tuple)):
            if len(formatters) != num_agents:
                raise ValueError("Number of formatters must match num_agents when providing a sequence.")
            self.formatters = [resolve_formatter(spec) for spec in formatters]
        else:
            self.formatters = [resolve_formatter(formatters)] * num_agents
        self.oracle = Oracle(reward_func, reward_processor)

    centralized: ClassVar[bool] = False
    """Whether one joint completion answers every role (:class:`~comlrl_lightning.collaboration.CentralizedTask`)."""
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

    def prompts(self, item: Dict[str, Any]) -> List[str]:
        """Each agent's prompt for ``item``."""
        prompts = [formatter(item) for formatter in self.formatters]
        for index, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise TypeError(f"formatter {index} returned {type(prompt).__name__}, expected str.")
        return prompts


def embedded_formatters() -> List[str]:
    """The toy task's prompt templates (writer, matcher)."""
    return [WRITER_TEMPLATE, MATCHER_TEMPLATE]


__all__ = ["Task", "load_items", "resolve_formatter", "TemplateFormatter", "embedded_formatters"]
