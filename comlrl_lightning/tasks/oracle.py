"""The oracle: scores joint responses with a task reward function and a reward processor.

Calling convention (the reference's): for each joint candidate index ``j`` the reward
function is called once with one single-element list per agent, ``f([c_1^j], ..., [c_N^j])``;
how the lists are passed depends on its signature:

* ``*args``                      -> ``f([c_1], ..., [c_N])``
* N > 1, exactly N positionals   -> ``f([c_1], ..., [c_N])``
* N > 1, N + 1 positionals       -> ``f(prompts, [c_1], ..., [c_N])``
* N > 1, one positional          -> ``f([[c_1], ..., [c_N]])``
* N == 1, two or more positionals -> ``f(prompts, [c_1])``
* otherwise                      -> ``f([c_1], ..., [c_N])``

``prompts`` (``[prompt of agent 0]``) and ``batch_items`` (``[item]``) are passed as keywords when the
function names them or takes ``**kwargs``. A parameter named ``batch_items`` is never counted as
positional, nor is ``prompts`` unless it is the first parameter. Only the first returned value is used; ``reward_processor`` maps it to the processed
score. Anything else (an exception, no value, a non-number, NaN or infinity) is an error naming the
function and the value: a silently wrong reward would corrupt every pair built from it.

Batch form: a reward function with the attribute ``accepts_batch = True`` is called once for many
joint responses (a whole round's, or a whole evaluation batch's, through :meth:`Oracle.rewards_many`):
the same signature rules, each list holding ``n`` completions (agent ``i``'s of every joint
response), ``batch_items`` and ``prompts`` ``n`` long (one per joint response), and it returns ``n``
values, response by response. A test runner that starts one process per program scores a round
in parallel this way; every other function keeps the one-call-per-joint-response convention, and
both conventions give the same scores.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence as SequenceType
from numbers import Real
from typing import Any, Callable, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import torch

from comlrl_lightning.errors import ConfigurationError, ConfigurationTypeError, DataError
from comlrl_lightning.runtime.import_paths import import_object
from comlrl_lightning.validation import OptionError, require

CallableSpec = Union[str, Callable, None]
ScoreRequest = Tuple[Sequence[Sequence[str]], Sequence[str], Any]
"""One item's joint responses to score: ``(candidates[agent][j], the agents' prompts, the item)``."""


class RewardFunctionError(DataError, RuntimeError):
    """The task's reward function raised (the message names it and what it raised)."""


def resolve_callable(spec: CallableSpec, option: str) -> Optional[Callable]:
    """A callable given directly or by import path ``"package.module.name"`` (a module in the working
    directory too: :func:`~comlrl_lightning.runtime.import_paths.import_object`)."""
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str):
        raise ConfigurationTypeError(f"{option} must be a callable or an import path (got {spec!r}).")
    value = import_object(spec, option)  # from sys.path, else the working directory (as python -m)
    if not callable(value):
        raise ConfigurationError(f"{option}: {spec!r} is not callable.")
    return value


def function_name(func: Callable) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def resolve_reward_range(reward_func: Any, required_by: Optional[str] = None) -> Optional[Tuple[float, float]]:
    """``(minimum, maximum)`` declared by ``reward_func.reward_range`` (the reference's check).

    A declared range must be two numbers, both finite, with ``minimum < maximum``; anything else
    is an :class:`OptionError` (a ``ValueError``). Without a declared range: ``None``, or, when
    ``required_by`` names the part that needs one, an :class:`OptionError` saying how to declare it.
    """
    declared = getattr(reward_func, "reward_range", None)
    if declared is None:
        require(
            required_by is None,
            f"{required_by} requires reward_func.reward_range to declare the raw reward scale as "
            "(minimum, maximum): set fn.reward_range = (lo, hi) on the reward function.",
        )
        return None
    two_items = not isinstance(declared, (str, bytes)) and isinstance(declared, SequenceType) and len(declared) == 2
    require(two_items, f"reward_func.reward_range must be a two-item sequence: (minimum, maximum) (got {declared!r}).")
    try:
        minimum, maximum = (float(value) for value in declared)
    except (TypeError, ValueError):
        raise OptionError(f"reward_func.reward_range values must be numbers (got {declared!r}).") from None
    require(
        math.isfinite(minimum) and math.isfinite(maximum),
        f"reward_func.reward_range values must be finite (got {declared!r}).",
    )
    require(minimum < maximum, f"reward_func.reward_range minimum must be less than maximum (got {declared!r}).")
    return minimum, maximum


def _bind(func: Callable, completions: List[List[str]], prompts: List[str], batch_items: list) -> Tuple[tuple, dict]:
    num_agents = len(completions)
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return tuple(completions), {"batch_items": batch_items}
    names = {p.name for p in parameters}
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in parameters)
    has_var_args = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # batch_items, and prompts anywhere but first, are keywords: f(a, b, prompts=None) gets completions in a, b
    positional = [n for i, n in enumerate(positional) if n != "batch_items" and (n != "prompts" or i == 0)]
    prompts_positional = False
    args: Tuple[Any, ...]
    if has_var_args:
        args = tuple(completions)
    elif num_agents > 1 and len(positional) == num_agents + 1:
        args, prompts_positional = (prompts, *completions), True
    elif num_agents > 1 and len(positional) == 1:
        args = (completions,)
    elif num_agents == 1 and len(positional) >= 2:
        args, prompts_positional = (prompts, *completions), True
    else:
        args = tuple(completions)
    kwargs = {}
    if "batch_items" in names or has_var_kw:
        kwargs["batch_items"] = batch_items
    if not prompts_positional and ("prompts" in names or has_var_kw):
        kwargs["prompts"] = prompts
    return args, kwargs


def _first_value(func: Callable, value: Any) -> float:
    name = function_name(func)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().reshape(-1).tolist()
    elif isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if isinstance(value, (list, tuple)):
        if not value:
            raise DataError(f"reward function {name} returned no value (got {value!r}).")
        value = value[0]
        if isinstance(value, (torch.Tensor, np.ndarray)):
            value = value.item()
    if value is None or isinstance(value, bool) or not isinstance(value, Real):
        raise DataError(f"reward function {name} returned a non-numeric value {value!r} ({type(value).__name__}).")
    value = float(value)
    if not math.isfinite(value):
        raise DataError(f"reward function {name} returned {value!r}; rewards must be finite numbers.")
    return value


def accepts_batch(func: Callable) -> bool:
    """Whether ``func`` declares the batch form (``accepts_batch = True``)."""
    return getattr(func, "accepts_batch", False) is True


def call_reward_batch(
    func: Callable, completions: List[List[str]], prompts: List[str], batch_items: list
) -> List[float]:
    """Call a batch-form ``func`` once on ``n`` joint responses (``completions[agent][j]``); its ``n`` values."""
    count = len(batch_items)
    args, kwargs = _bind(func, completions, prompts, batch_items)
    args, kwargs = _callable_with(func, (args, kwargs), (tuple(completions), {}))
    try:
        values = func(*args, **kwargs)
    except Exception as error:
        raise RewardFunctionError(
            f"reward function {function_name(func)} raised {type(error).__name__}: {error}"
        ) from error
    if isinstance(values, (torch.Tensor, np.ndarray)):
        values = values.reshape(-1).tolist()
    if not isinstance(values, (list, tuple)) or len(values) != count:
        size = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise DataError(
            f"reward function {function_name(func)} declares accepts_batch, so it must return one value per "
            f"joint response: {count} expected, got {size}."
        )
    return [_first_value(func, [value]) for value in values]


def call_reward_function(
    func: Callable,
    completions: List[List[str]],
    prompts: Optional[List[str]] = None,
    batch_items: Optional[list] = None,
) -> float:
    """Call ``func`` on one joint response (one single-element list per agent); return its first value."""
    args, kwargs = _bind(func, completions, prompts or [], batch_items or [])
    args, kwargs = _callable_with(func, (args, kwargs), (tuple(completions), {}))
    try:
        value = func(*args, **kwargs)  # once: a reward with side effects must not run twice
    except Exception as error:
        raise RewardFunctionError(
            f"reward function {function_name(func)} raised {type(error).__name__}: {error}"
        ) from error
    return _first_value(func, value)


def _callable_with(func: Callable, call: Tuple[tuple, dict], fallback: Tuple[tuple, dict]) -> Tuple[tuple, dict]:
    """``call`` if ``func``'s signature accepts it, else ``fallback`` (checked by binding, never by calling)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return call  # no signature to check (a builtin): call as bound
    for args, kwargs in (call, fallback):
        try:
            signature.bind(*args, **kwargs)
            return args, kwargs
        except TypeError as error:
            problem = error
    raise ConfigurationError(
        f"reward function {function_name(func)} cannot take {len(fallback[0])} completion lists: {problem}"
    ) from problem


class Oracle:
    """Scores joint responses: ``processed = reward_processor(reward_func(...)[0])``.

    Args:
        reward_func: the task reward, a callable or an import path.
        reward_processor: maps a raw reward to the score used for pairs (default: identity).
    """

    def __init__(self, reward_func: CallableSpec, reward_processor: CallableSpec = None) -> None:
        resolved = resolve_callable(reward_func, "reward_func")
        if resolved is None:
            raise ConfigurationError("reward_func must be a callable.")
        self.reward_func: Callable = resolved
        self.reward_processor = resolve_callable(reward_processor, "reward_processor")

    def rewards(
        self, candidates: Sequence[Sequence[str]], prompts: Sequence[str], item: Any
    ) -> Tuple[List[float], List[float]]:
        """Raw and processed scores of joint responses ``j < min_i len(candidates[i])``.

        Args:
            candidates: ``candidates[agent][j]`` completion texts.
            prompts: the agents' prompts for ``item`` (the function receives ``[prompts[0]]``).
        """
        count = min(len(texts) for texts in candidates)
        raw = [
            call_reward_function(self.reward_func, [[texts[j]] for texts in candidates], [prompts[0]], [item])
            for j in range(count)
        ]
        return raw, [self.process(value) for value in raw]

    def rewards_many(self, requests: Sequence[ScoreRequest]) -> List[Tuple[List[float], List[float]]]:
        """:meth:`rewards` of every ``(candidates, prompts, item)`` request, in order: one call of a
        batch-form reward function for all of them (see the module's docstring), else one
        :meth:`rewards` per request."""
        if not accepts_batch(self.reward_func):
            return [self.rewards(*request) for request in requests]
        counts = [min(len(texts) for texts in candidates) for candidates, _, _ in requests]
        if not requests or not sum(counts):
            return [([], []) for _ in requests]
        lists: List[List[str]] = [[] for _ in requests[0][0]]
        prompts, items = [], []
        for (candidates, agent_prompts, item), count in zip(requests, counts):
            for agent, texts in enumerate(candidates):
                lists[agent].extend(texts[:count])
            prompts += [agent_prompts[0]] * count
            items += [item] * count
        values = call_reward_batch(self.reward_func, lists, prompts, items)
        results, start = [], 0
        for count in counts:
            raw = values[start : start + count]
            results.append((raw, [self.process(value) for value in raw]))
            start += count
        return results

    def process(self, value: float) -> float:
        if self.reward_processor is None:
            return value
        processed = self.reward_processor(value)
        try:
            processed = float(processed)
        except (TypeError, ValueError) as error:
            raise DataError(
                f"reward_processor {function_name(self.reward_processor)} returned a non-numeric value {processed!r}."
            ) from error
        if not math.isfinite(processed):
            raise DataError(f"reward_processor {function_name(self.reward_processor)} returned {processed!r}.")
        return processed


class Scorer(Protocol):
    """What pair building needs of an oracle (:class:`Oracle`, :class:`ScoringProgress`, a reward model's):
    :meth:`Oracle.rewards`; ``rewards_many`` is used where it has one (:func:`score_requests`)."""

    def rewards(
        self, candidates: Sequence[Sequence[str]], prompts: Sequence[str], item: Any
    ) -> Tuple[List[float], List[float]]: ...


def score_requests(oracle: Any, requests: Sequence[ScoreRequest]) -> List[Tuple[List[float], List[float]]]:
    """``oracle.rewards_many(requests)`` where the oracle has it (:class:`Oracle`), else one ``rewards`` per request."""
    if hasattr(oracle, "rewards_many"):
        return oracle.rewards_many(requests)
    return [oracle.rewards(*request) for request in requests]


class ScoringProgress:
    """Wraps an oracle and advances a :class:`~comlrl_lightning.runtime.progress.Progress` as items are scored.

    Sampling shows its own progress; a slow reward function (a judge model, a test runner) would
    otherwise leave collection silent for minutes. ``calls_per_item``: oracle calls that make one
    item (2 when the current team's and the comparator's candidates are scored separately).
    """

    def __init__(self, oracle: Any, progress: Any, calls_per_item: int = 1) -> None:
        self.oracle, self.progress, self.calls_per_item = oracle, progress, calls_per_item
        self.calls = 0

    def rewards(
        self, candidates: Sequence[Sequence[str]], prompts: Sequence[str], item: Any
    ) -> Tuple[List[float], List[float]]:
        result = self.oracle.rewards(candidates, prompts, item)
        self.calls += 1
        if self.calls % self.calls_per_item == 0:
            self.progress.advance(1)
        return result

    def rewards_many(self, requests: Sequence[ScoreRequest]) -> List[Tuple[List[float], List[float]]]:
        results = score_requests(self.oracle, requests)
        before = self.calls // self.calls_per_item
        self.calls += len(requests)
        self.progress.advance(self.calls // self.calls_per_item - before)
        return results
