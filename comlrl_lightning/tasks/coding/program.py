"""The combination rule: two completions become one program, and what the reward reads from it.

A completion's markdown fences are stripped and only its ``def`` blocks are kept: when the text
parses, its top-level function definitions (decorators included) as the syntax tree gives them;
when it does not (prose around the code, a syntax error), the blocks that start at a ``def`` line
and run while lines are blank or indented deeper. The program is the problem's import lines (from
its prompt), then agent 0's definitions, then agent 1's. Agent 0 owns ``aux`` and agent 1 the entry
point: a definition of the other's function is dropped (in the reference (CoMLRL) agent 1 could
define its own ``aux`` and earn the collaboration bonus alone).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, replace
from typing import Any, List, Mapping, NamedTuple, Optional, Union

FENCE = re.compile(r"^[ \t]*```[^\n]*$", re.MULTILINE)
DEF_LINE = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[ \t]*\(")
RETURN_WITH_VALUE = re.compile(r"\breturn[ \t]+[^\s#]")
FunctionNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]
AUX_NAME = "aux"
"""The helper's name: agent 0 writes it, the main function may call it."""


class Definition(NamedTuple):
    """One ``def`` block of a completion: the function's name and its source."""

    name: str
    source: str


def strip_fences(text: str) -> str:
    """``text`` without markdown fence lines (```` ```python ````, ```` ``` ````), newlines normalised."""
    return FENCE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def definitions(text: str) -> List[Definition]:
    """The ``def`` blocks of a completion, in order (see the module's docstring)."""
    code = strip_fences(text)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return _definitions_by_lines(code)
    lines = code.split("\n")
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
            found.append(Definition(node.name, "\n".join(lines[start - 1 : node.end_lineno])))
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _definitions_by_lines(code: str) -> List[Definition]:
    lines, found, index = code.split("\n"), [], 0
    while index < len(lines):
        match = DEF_LINE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, block = len(match.group(1)), [lines[index]]
        index += 1
        while index < len(lines) and (not lines[index].strip() or _indent(lines[index]) > indent):
            block.append(lines[index])
            index += 1
        found.append(Definition(match.group(2), textwrap.dedent("\n".join(block)).rstrip()))
    return found


def _own_nodes(function: FunctionNode):
    """The nodes of ``function``'s body, not descending into nested functions, lambdas or classes."""
    stack: List[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def returns_value(definition: Definition) -> bool:
    """Whether the function returns a value: a ``return <expression>`` of its own (a block that does
    not parse on its own: a ``return`` followed by an expression anywhere in its text)."""
    try:
        node = ast.parse(definition.source).body[0]
    except (SyntaxError, ValueError, IndexError):
        return RETURN_WITH_VALUE.search(definition.source) is not None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    return any(isinstance(child, ast.Return) and child.value is not None for child in _own_nodes(node))


def problem_imports(prompt: str) -> List[str]:
    """The import lines of a problem's prompt, each once, in order (a line counts when it parses as one
    ``import`` or ``from ... import`` statement)."""
    found: List[str] = []
    for line in prompt.splitlines():
        text = line.strip()
        if not text.startswith(("import ", "from ")) or text in found:
            continue
        try:
            body = ast.parse(text).body
        except SyntaxError:
            continue
        if len(body) == 1 and isinstance(body[0], (ast.Import, ast.ImportFrom)):
            found.append(text)
    return found


def calls(node: ast.AST, name: str) -> bool:
    """Whether ``node`` contains a call of the plain name ``name``."""
    return any(
        isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == name
        for child in ast.walk(node)
    )


def is_thin_wrapper(function: FunctionNode, name: str = AUX_NAME) -> bool:
    """Whether ``function`` (its docstring aside) only hands the work to ``name``: an empty body,
    one ``return`` of an expression that calls it, or ``x = name(...)`` then ``return x``."""
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return True
    if len(body) == 1:
        return isinstance(body[0], ast.Return) and body[0].value is not None and calls(body[0].value, name)
    if len(body) != 2:
        return False
    assign, result = body
    if not isinstance(assign, ast.Assign) or not isinstance(result, ast.Return):
        return False
    target = assign.targets[0] if len(assign.targets) == 1 else None
    call = assign.value
    return (
        isinstance(target, ast.Name)
        and isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == name
        and isinstance(result.value, ast.Name)
        and result.value.id == target.id
    )


def ignores_result(function: FunctionNode, name: str = AUX_NAME) -> bool:
    """Whether ``function`` calls ``name`` as a statement of its own, dropping the value it returns."""
    return any(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == name
        for node in _own_nodes(function)
    )


@dataclass(frozen=True)
class JointProgram:
    """Two completions combined (:func:`combine`), with what the reward's levels read.

    Attributes:
        program: the problem's imports, agent 0's definitions, agent 1's definitions.
        aux_defined / aux_returns: agent 0 defined ``aux`` / with a ``return`` of a value.
        main_defined / main_returns: agent 1 defined the entry point / with a ``return`` of a value.
        parses: the whole program parses.
        calls_aux, thin_wrapper, ignores_aux_result: of the entry point in the parsed program
            (``False`` when it does not parse): it calls ``aux``; it is only a thin wrapper around
            it (:func:`is_thin_wrapper`); it calls ``aux`` and drops the value (:func:`ignores_result`).
    """

    program: str
    aux_defined: bool
    aux_returns: bool
    main_defined: bool
    main_returns: bool
    parses: bool
    calls_aux: bool = False
    thin_wrapper: bool = False
    ignores_aux_result: bool = False


def _last(found: List[Definition], name: str) -> Optional[Definition]:
    named = [definition for definition in found if definition.name == name]
    return named[-1] if named else None  # Python binds the last definition of a name


def combine(aux_completion: str, main_completion: str, item: Mapping[str, Any]) -> JointProgram:
    """Agent 0's and agent 1's completions for ``item`` as one program (see the module's docstring)."""
    entry_point = item["entry_point"]
    helper = [d for d in definitions(aux_completion) if d.name != entry_point]
    main = [d for d in definitions(main_completion) if d.name != AUX_NAME]
    parts = ["\n".join(problem_imports(item.get("prompt", "")))] + [d.source for d in helper + main]
    program = "\n\n\n".join(part for part in parts if part.strip()) + "\n"
    aux_definition, main_definition = _last(helper, AUX_NAME), _last(main, entry_point)
    joint = JointProgram(
        program=program,
        aux_defined=aux_definition is not None,
        aux_returns=aux_definition is not None and returns_value(aux_definition),
        main_defined=main_definition is not None,
        main_returns=main_definition is not None and returns_value(main_definition),
        parses=False,
    )
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError):
        return joint
    functions = [
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point
    ]
    if not functions:
        return replace(joint, parses=True)
    function = functions[-1]
    return replace(
        joint,
        parses=True,
        calls_aux=calls(function, AUX_NAME),
        thin_wrapper=is_thin_wrapper(function),
        ignores_aux_result=ignores_result(function),
    )


__all__ = [
    "Definition",
    "JointProgram",
    "combine",
    "definitions",
    "ignores_result",
    "is_thin_wrapper",
    "problem_imports",
    "returns_value",
    "strip_fences",
]
