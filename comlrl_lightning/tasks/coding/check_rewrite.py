"""The rewrite of an item's ``check``: each test recorded, Python's semantics kept where the check
handles exceptions (:mod:`.check_transform` says what the rewritten check does, and runs it).

The rewritten statements call hooks by the names below, which the run puts in the check's namespace.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, List, Sequence, Set, cast

from comlrl_lightning.tasks.coding.check_analysis import Flow, is_try

RECORD = "__comlrl_record__"
"""The name the rewritten ``check`` calls to record one execution of a test."""
RAISED = "__comlrl_raised__"
"""... to say that a test's condition raised where the check's own handlers decide."""
HANDLED = "__comlrl_handled__"
"""... first in each of the check's ``except`` clauses: the exception being handled was handled."""
ESCAPED = "__comlrl_escaped__"
"""... when an exception escapes a block of tests that the rewrite skips."""
WATCH = "__comlrl_watch__"
"""... around each of the check's context managers, so that the run sees what each suppresses."""
VALUE = "__comlrl_value__"
ERROR = "__comlrl_error__"


def _statements(source: str) -> List[ast.stmt]:
    return ast.parse(source).body


def _call(name: str, *arguments: ast.expr) -> ast.Expr:
    return ast.Expr(ast.Call(func=ast.Name(name, ast.Load()), args=list(arguments), keywords=[]))


def _constant(value: Any) -> ast.expr:
    return ast.Constant(value)


def _assertion_error(test: ast.Assert) -> ast.stmt:
    """``raise AssertionError(message)``, as the failed ``assert`` itself would."""
    arguments = [test.msg] if test.msg is not None else []
    call = ast.Call(func=ast.Name("AssertionError", ast.Load()), args=arguments, keywords=[])
    return ast.Raise(exc=call, cause=None)


def _value_test(index: int, test: ast.Assert, guarded: bool) -> List[ast.stmt]:
    """``assert condition`` as: evaluate it, record test ``index``'s outcome (an error is a failure).
    Guarded (where the check's own handlers decide), an error is passed on to them and a failure
    raises ``AssertionError`` after it is recorded."""
    if not guarded:
        template = (
            f"try:\n    {VALUE} = (CONDITION)\nexcept Exception as {ERROR}:\n    {RECORD}({index}, False, {ERROR})\n"
            f"else:\n    {RECORD}({index}, {VALUE}, None)\n"
        )
        statements = _statements(template)
    else:
        template = (
            f"try:\n    {VALUE} = (CONDITION)\nexcept Exception as {ERROR}:\n    {RAISED}({index}, {ERROR})\n    raise\n"
            f"if not {RECORD}({index}, {VALUE}, None):\n    pass\n"
        )
        statements = _statements(template)
        cast(ast.If, statements[1]).body = [_assertion_error(test)]
    cast(ast.Assign, cast(ast.Try, statements[0]).body[0]).value = test.test
    return statements


def _reached_test(index: int, test: ast.Assert, guarded: bool) -> List[ast.stmt]:
    """``assert False`` as: record test ``index`` as failed (guarded: and raise as the assert would)."""
    record = _call(RECORD, _constant(index), _constant(False), _constant(None))
    return [record, _assertion_error(test)] if guarded else [record]


def _completion_test(index: int, block: ast.stmt, guarded: bool) -> ast.stmt:
    """``with ...: body`` as test ``index``: it holds when the block completes."""
    failed = f"    {RAISED}({index}, {ERROR})\n    raise\n" if guarded else f"    {RECORD}({index}, False, {ERROR})\n"
    template = f"try:\n    pass\nexcept Exception as {ERROR}:\n{failed}else:\n    {RECORD}({index}, True, None)\n"
    statement = cast(ast.Try, _statements(template)[0])
    statement.body = [block]
    return statement


def _skipping(statement: ast.stmt, inside: Sequence[int] = ()) -> ast.stmt:
    """``statement`` inside ``try: ... except Exception: pass``; the tests ``inside`` it fail when an
    exception escapes it (the block did not complete, as a check in Python would have stopped)."""
    failed = f"    {ESCAPED}({ERROR}, {tuple(inside)})\n" if inside else "    pass\n"
    wrapper = cast(ast.Try, _statements(f"try:\n    pass\nexcept Exception as {ERROR}:\n{failed}")[0])
    wrapper.body = [statement]
    return wrapper


@dataclass(frozen=True)
class Place:
    """Where a statement of ``check`` sits: ``guarded`` inside the body of the check's own ``try``
    (with ``except`` clauses), ``with`` or nested function, where exceptions must reach the check's
    handlers; ``behind_call`` where whether it runs depends on a call of the program."""

    guarded: bool = False
    behind_call: bool = False


class Rewriter:
    """Rewrites the statements of ``check`` (:meth:`block`), registering each test it finds in
    ``tests`` (``line N: condition``) and those that pass unless reached in ``unless_reached``."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.tests: List[str] = []
        self.unless_reached: Set[int] = set()

    def register(self, node: ast.stmt, text: str, unless_reached: bool = False) -> int:
        self.tests.append(f"line {node.lineno}: {text[:160]}")
        if unless_reached:
            self.unless_reached.add(len(self.tests) - 1)
        return len(self.tests) - 1

    def block(self, statements: List[ast.stmt], place: Place) -> List[ast.stmt]:
        return [new for statement in statements for new in self.statement(statement, place)]

    def statement(self, node: ast.stmt, place: Place) -> List[ast.stmt]:
        if isinstance(node, ast.Assert):
            return self.assertion(node, place)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node.body = self.block(node.body, Place(guarded=True))  # its caller's handlers decide
            return [node]
        governs = self.flow.governs(node)
        inner = Place(place.guarded, place.behind_call or governs)
        first = len(self.tests)
        if isinstance(node, ast.With):
            return [self.with_block(node, place, inner, governs)]
        if is_try(node):
            self.try_block(cast(ast.Try, node), place, inner)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                case.body = self.block(case.body, inner)
        else:
            for name in ("body", "orelse"):
                if isinstance(getattr(node, name, None), list):
                    setattr(node, name, self.block(getattr(node, name), inner))
        inside = range(first, len(self.tests))
        return [_skipping(node, inside) if not place.guarded and self.flow.depends(node) else node]

    def assertion(self, node: ast.Assert, place: Place) -> List[ast.stmt]:
        if self.flow.depends(node.test):
            index = self.register(node, ast.unparse(node.test))
            return [ast.copy_location(part, node) for part in _value_test(index, node, place.guarded)]
        if place.behind_call and isinstance(node.test, ast.Constant) and not node.test.value:
            index = self.register(node, ast.unparse(node.test), unless_reached=True)
            return [ast.copy_location(part, node) for part in _reached_test(index, node, place.guarded)]
        return [node]

    def with_block(self, node: ast.With, place: Place, inner: Place, governs: bool) -> ast.stmt:
        index = self.register(node, "with " + ", ".join(ast.unparse(item) for item in node.items)) if governs else -1
        for item in node.items:
            item.context_expr = _call(WATCH, item.context_expr).value
        node.body = self.block(node.body, Place(True, inner.behind_call))
        if governs:
            return ast.copy_location(_completion_test(index, node, place.guarded), node)
        return _skipping(node) if not place.guarded and self.flow.depends(node) else node

    def try_block(self, node: ast.Try, place: Place, inner: Place) -> None:
        node.body = self.block(node.body, Place(place.guarded or bool(node.handlers), inner.behind_call))
        for handler in node.handlers:
            handler.body = [ast.copy_location(_call(HANDLED), handler), *self.block(handler.body, inner)]
        node.orelse = self.block(node.orelse, inner)
        node.finalbody = self.block(node.finalbody, place)


__all__ = ["ERROR", "ESCAPED", "HANDLED", "RAISED", "RECORD", "VALUE", "WATCH", "Place", "Rewriter"]
