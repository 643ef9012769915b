"""Which names of an item's ``check`` depend on a call of the program: the analysis behind what a test is.

The program itself is a *callee*: ``candidate`` (the check's first parameter), the entry point's
name, a name assigned from either, and a function (of the check, its test source or the item's
prompt) that reads one. A value depends on a call when it is computed by calling a callee, by
handing one to a function that may call it (``map(candidate, xs)``, not ``callable(candidate)``),
or from a name that depends on a call: followed through assignments, loop targets, method calls
(``results.append(candidate(x))``) and control flow (a name assigned in a branch, loop, ``try`` or
``with`` whose path depends on a call), to a fixed point. :mod:`.check_transform` counts an
``assert`` as a test when its condition depends on a call.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, NamedTuple, Sequence, Set, Tuple, Union, cast

FunctionNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]

INSPECTING = frozenset(
    {
        "callable", "isinstance", "issubclass", "id", "type", "hasattr", "getattr", "repr", "str", "hash", "dir",
        "vars", "bool", "print", "format", "len", "signature", "getsource", "getdoc", "getfullargspec",
        "isfunction", "ismethod", "isbuiltin", "isroutine", "iscoroutinefunction", "isgeneratorfunction",
    }
)  # fmt: skip
"""Functions that look at a value without calling it: ``callable(candidate)`` is no call of the candidate."""


def stored_names(node: ast.AST) -> Set[str]:
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


def read_names(node: ast.AST) -> Set[str]:
    return {part.id for part in ast.walk(node) if isinstance(part, ast.Name) and isinstance(part.ctx, ast.Load)}


def _headers(statement: ast.stmt) -> List[ast.AST]:
    """The parts of a statement that run as one step: a simple statement, or a compound one's header."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [ast.Tuple(elts=[statement.target, statement.iter], ctx=ast.Load())]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return list(statement.items)
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, ast.Match):
        return [statement.subject]
    if isinstance(statement, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    if sys.version_info >= (3, 11) and isinstance(statement, ast.TryStar):
        return []
    return [statement]


def is_try(node: ast.AST) -> bool:
    return isinstance(node, ast.Try) or (sys.version_info >= (3, 11) and isinstance(node, ast.TryStar))


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


class _Facts(NamedTuple):
    """What one walk of a node finds: the names it reads, and per call the names its function
    reads and the bare names it is handed as arguments by a function that does not merely inspect them."""

    reads: FrozenSet[str]
    called: Tuple[FrozenSet[str], ...]
    handed: Tuple[FrozenSet[str], ...]


def _facts(node: ast.AST) -> _Facts:
    reads, called, handed = set(), [], []
    for part in ast.walk(node):
        if isinstance(part, ast.Name) and isinstance(part.ctx, ast.Load):
            reads.add(part.id)
        elif isinstance(part, ast.Call):
            called.append(frozenset(read_names(part.func)))
            arguments = [a.value if isinstance(a, ast.Starred) else a for a in part.args]
            arguments += [keyword.value for keyword in part.keywords]
            if _called_name(part) not in INSPECTING:
                handed.append(frozenset(a.id for a in arguments if isinstance(a, ast.Name)))
    return _Facts(frozenset(reads), tuple(called), tuple(handed))


@dataclass
class Flow:
    """What the analysis knows: ``callees`` hold the program itself (``candidate``, the entry point's
    name, aliases, helpers that call it), ``tainted`` names hold values that depend on a call of it."""

    callees: Set[str]
    tainted: Set[str] = field(default_factory=set)
    known: Dict[int, Tuple[ast.AST, _Facts]] = field(default_factory=dict)
    """Each node's facts, walked once (by ``id``, the node kept beside them so that its id is not reused)."""

    def facts(self, node: ast.AST) -> _Facts:
        if id(node) not in self.known:
            self.known[id(node)] = (node, _facts(node))
        return self.known[id(node)][1]

    def calls(self, node: ast.AST) -> bool:
        """Whether ``node`` holds a call of the program: a call of a callee, or a call handed a
        callee as an argument by a function that does not merely inspect it (``map(candidate, xs)``)."""
        facts = self.facts(node)
        return any(names & self.callees for names in facts.called + facts.handed)

    def depends(self, node: ast.AST) -> bool:
        """Whether ``node``'s value (or effect) depends on a call of the program."""
        return bool(self.facts(node).reads & self.tainted) or self.calls(node)

    def governs(self, statement: ast.stmt) -> bool:
        """Whether which parts of a compound ``statement`` run depends on a call of the program."""
        if isinstance(statement, (ast.If, ast.While)):
            return self.depends(statement.test)
        if isinstance(statement, (ast.For, ast.AsyncFor)):
            return self.depends(statement.iter)
        if isinstance(statement, ast.Match):
            return self.depends(statement.subject)
        if isinstance(statement, (ast.With, ast.AsyncWith)) or is_try(statement):
            items = list(statement.items) if isinstance(statement, (ast.With, ast.AsyncWith)) else []
            return any(self.depends(part) for part in items + list(cast(Any, statement).body))
        return False


def governed(statement: ast.stmt) -> List[ast.AST]:
    """The parts of a compound statement whose running its header (or a ``try``'s body) decides."""
    if is_try(statement):
        node = cast(ast.Try, statement)
        return [*node.body, *node.handlers, *node.orelse]  # not the finally: it always runs
    if isinstance(statement, ast.Match):
        return list(statement.cases)
    return [*getattr(statement, "body", []), *getattr(statement, "orelse", [])]


def callee_functions(functions: Sequence[FunctionNode], callees: Set[str]) -> Set[str]:
    """``callees`` and the names of ``functions`` that read one of them (to a fixed point): a helper
    of the test or the prompt that calls the entry point stands for the program."""
    found = set(callees)
    changed = True
    while changed:
        new = {function.name for function in functions if read_names(function) & found} - found
        found |= new
        changed = bool(new)
    return found


def call_flow(check: ast.FunctionDef, callees: Set[str]) -> Flow:
    """The callees and call-dependent names of ``check``, to a fixed point (loops included)."""
    flow = Flow(callees=set(callees) | {check.args.args[0].arg})
    statements = [node for node in ast.walk(check) if isinstance(node, ast.stmt) and node is not check]
    steps = [part for node in statements for part in _headers(node)]
    compounds = [node for node in statements if governed(node)]
    nested = [node for node in statements if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    stored = [stored_names(step) for step in steps]
    governed_stores = [{name for part in governed(compound) for name in stored_names(part)} for compound in compounds]
    size = -1
    while size != len(flow.callees) + len(flow.tainted):
        size = len(flow.callees) + len(flow.tainted)
        for step, names in zip(steps, stored):
            if flow.facts(step).reads & flow.callees:
                flow.callees |= names
            if flow.depends(step):
                flow.tainted |= names
        for compound, names in zip(compounds, governed_stores):
            if flow.governs(compound):
                flow.tainted |= names
        flow.callees |= {function.name for function in nested if flow.facts(function).reads & flow.callees}
    return flow


def tainted_names(check: ast.FunctionDef, entry_point: str = "") -> Set[str]:
    """The names of ``check`` whose values depend on a call of the program (its first parameter, or
    the entry point's name): see the module's docstring."""
    return call_flow(check, {entry_point} if entry_point else set()).tainted


__all__ = ["Flow", "call_flow", "callee_functions", "tainted_names"]
