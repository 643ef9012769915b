"""An item's trusted ``check``, rewritten so that each of its tests is counted, run in the trainer.

A test is one ``assert`` statement of ``check(candidate)`` whose condition depends on the program:
it reads ``candidate`` or a name computed from it (followed through assignments, loop targets and
method calls such as ``results.append(candidate(x))``, to a fixed point). ``assert True, "..."``
lines and asserts about the item's own data are not tests. Each test is rewritten to record its
outcome instead of raising, so ``check`` goes on after a failure; a test passes when it ran at least
once and every one of its executions held (an assert inside a loop is one test). A statement that
computes from the program and raises (``result = candidate(x)`` when the call fails) is skipped, so
the asserts after it still run (and fail where they read what it did not assign).

Besides the test source, ``check`` sees the imports, functions and classes the item's prompt
defines (HumanEval's tests call helpers such as ``poly`` or ``encode_cyclic`` from it): the
trusted ones from the item, never the program's.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, cast

from comlrl_lightning.errors import DataError

RECORD = "__comlrl_record__"
"""The name the rewritten ``check`` calls to record one execution of a test."""

VALUE = "__comlrl_value__"
ERROR = "__comlrl_error__"


@dataclass(frozen=True)
class CompiledCheck:
    """One item's rewritten ``check``: the module to run, its tests' count and their source lines."""

    task_id: str
    entry_point: str
    code: Any  # a code object: the prompt's definitions, then the rewritten test source
    tests: Tuple[str, ...]
    """Each test's ``line N: condition``, in the order of the source."""

    @property
    def total(self) -> int:
        return len(self.tests)


@dataclass
class CheckOutcome:
    """What one run of a rewritten ``check`` found: per test, its executions and whether all held."""

    executions: List[int]
    held: List[bool]
    first_failure: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for count, ok in zip(self.executions, self.held) if count and ok)


def _stored_names(node: ast.AST) -> Set[str]:
    """Names a statement writes: assignment and loop targets, and the object a method call or an
    item/attribute assignment changes (``x.append(...)``, ``x[i] = ...``)."""
    names = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Name) and isinstance(part.ctx, (ast.Store, ast.Del)):
            names.add(part.id)
        elif isinstance(part, (ast.Attribute, ast.Subscript)) and isinstance(part.ctx, ast.Store):
            base = part.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif isinstance(part, ast.Call) and isinstance(part.func, ast.Attribute):
            if isinstance(part.func.value, ast.Name):
                names.add(part.func.value.id)
    return names


def _read_names(node: ast.AST) -> Set[str]:
    return {part.id for part in ast.walk(node) if isinstance(part, ast.Name) and isinstance(part.ctx, ast.Load)}


def _headers(statement: ast.stmt) -> List[ast.AST]:
    """The parts of a statement that run as one step: a simple statement, or a compound one's header."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [ast.Tuple(elts=[statement.target, statement.iter], ctx=ast.Load())]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return list(statement.items)
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    return [statement]


def tainted_names(check: ast.FunctionDef, entry_point: str = "") -> Set[str]:
    """The names of ``check`` whose values depend on the program: its first parameter (and the entry
    point's name, which a test may call too), and every name a statement reading one of them writes,
    to a fixed point (loops included)."""
    tainted = {check.args.args[0].arg} | ({entry_point} if entry_point else set())
    steps = [part for node in ast.walk(check) if isinstance(node, ast.stmt) for part in _headers(node)]
    steps = [step for step in steps if step is not check]
    changed = True
    while changed:
        changed = False
        for step in steps:
            if _read_names(step) & tainted:
                new = _stored_names(step) - tainted
                if new:
                    tainted |= new
                    changed = True
    return tainted


def _recorded(index: int, test: ast.Assert) -> ast.stmt:
    """``assert condition`` as: evaluate it, record test ``index``'s outcome (an error is a failure)."""
    template = (
        f"try:\n    {VALUE} = (CONDITION)\nexcept Exception as {ERROR}:\n    {RECORD}({index}, False, {ERROR})\n"
        f"else:\n    {RECORD}({index}, {VALUE}, None)\n"
    )
    statement = cast(ast.Try, ast.parse(template).body[0])
    cast(ast.Assign, statement.body[0]).value = test.test
    return ast.copy_location(statement, test)


def _skipping(statement: ast.stmt) -> ast.stmt:
    """``statement`` inside ``try: ... except Exception: pass``."""
    wrapper = cast(ast.Try, ast.parse("try:\n    pass\nexcept Exception:\n    pass\n").body[0])
    wrapper.body = [statement]
    return ast.copy_location(wrapper, statement)


class _Rewriter(ast.NodeTransformer):
    def __init__(self, tainted: Set[str]) -> None:
        self.tainted = tainted
        self.tests: List[str] = []

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        if not _read_names(node.test) & self.tainted:
            return node
        self.tests.append(f"line {node.lineno}: {ast.unparse(node.test)[:160]}")
        return _recorded(len(self.tests) - 1, node)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        simple = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)
        if isinstance(node, simple) and _read_names(node) & self.tainted:
            return _skipping(node)
        return node


def _prompt_definitions(prompt: str, entry_point: str) -> List[ast.stmt]:
    """The imports, functions and classes of the item's prompt (not its entry point); none when the
    prompt is not Python (a natural-language prompt)."""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return []
    kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node for node in tree.body if isinstance(node, kept) and getattr(node, "name", None) != entry_point]


def _field(item: Mapping[str, Any], name: str, task_id: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"coding item {task_id}: its {name!r} is missing or empty")
    return value


@functools.lru_cache(maxsize=2048)
def _compile(task_id: str, prompt: str, test: str, entry_point: str) -> CompiledCheck:
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError) as error:
        raise DataError(f"coding item {task_id}: its test does not parse ({error})") from None
    checks = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if not checks or not checks[-1].args.args:
        raise DataError(f"coding item {task_id}: its test defines no check(candidate) function")
    rewriter = _Rewriter(tainted_names(checks[-1], entry_point))
    checks[-1].body = [rewriter.visit(statement) for statement in checks[-1].body]
    if not rewriter.tests:
        raise DataError(f"coding item {task_id}: its check has no assert that depends on the candidate")
    tree.body = _prompt_definitions(prompt, entry_point) + tree.body
    code = compile(ast.fix_missing_locations(tree), f"<check of {task_id}>", "exec")
    return CompiledCheck(task_id=task_id, entry_point=entry_point, code=code, tests=tuple(rewriter.tests))


def compile_check(item: Mapping[str, Any]) -> CompiledCheck:
    """``item``'s ``check`` rewritten and compiled (cached); a :class:`DataError` naming the task id
    when it has no tests, its test does not parse or its ``entry_point`` is missing."""
    task_id = str(item.get("task_id", "<no task_id>"))
    entry_point = _field(item, "entry_point", task_id)
    if not entry_point.isidentifier():
        raise DataError(f"coding item {task_id}: its entry_point {entry_point[:60]!r} is not a Python name")
    prompt = item.get("prompt") if isinstance(item.get("prompt"), str) else ""
    return _compile(task_id, prompt, _field(item, "test", task_id), entry_point)


def run_check(compiled: CompiledCheck, candidate: Callable[..., Any]) -> CheckOutcome:
    """Run ``compiled``'s ``check`` with ``candidate`` (in this process: the item's code is trusted)."""
    outcome = CheckOutcome(executions=[0] * compiled.total, held=[True] * compiled.total)

    def record(index: int, value: Any, error: Optional[BaseException]) -> None:
        try:
            ok = error is None and bool(value)
        except Exception as failure:  # a truth value that raises
            ok, error = False, failure
        outcome.executions[index] += 1
        if not ok:
            outcome.held[index] = False
            if not outcome.first_failure:
                reason = f"{type(error).__name__}: {str(error)[:160]}" if error is not None else "it is false"
                outcome.first_failure = f"{compiled.tests[index]} -> {reason}"

    # the entry point's name is the candidate too (a HumanEval test may call the function by name)
    namespace: Dict[str, Any] = {"__name__": "__check__", RECORD: record, compiled.entry_point: candidate}
    try:
        exec(compiled.code, namespace)
        namespace["check"](candidate)
    except Exception as error:
        if not outcome.first_failure:
            outcome.first_failure = f"check stopped: {type(error).__name__}: {str(error)[:160]}"
    return outcome
