"""A configuration or option error of the command line in two lines: the message first, "did you mean"
for a misspelt option, and where the options are listed.

jsonargparse reports a bad option by printing the whole usage (about 50 lines: every trainer option)
and then its report, where the message sits inside a tree of the types it tried::

    Parser key "model":
      Does not validate against any of the Union subtypes
      Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
      Errors:
        - Problem with given class_path 'comlrl_lightning.MADPOModule':
            Option 'dpo_betta' is not accepted
        - Expected a <class 'NoneType'>
      Given value type: <class 'jsonargparse._util.NestedArg'>
      Given value: NestedArg(key='dpo_betta', val='0.2')

:func:`short_parse_errors` has the parser raise instead of exiting (``exit_on_error=False``, the
argparse switch jsonargparse honours), and :func:`explain` walks that tree: into the ``Parser key``
named, into the class that was tried (``class_path``, leaving out the alternative ``None``) down to
the innermost message, so the line names the full option (``model.init_args.dpo_betta``). An
unknown option is matched against the options of the class or command (:func:`closest_option`,
difflib). ``--help`` prints the full usage as before; ``COMLRL_LIGHTNING_TRACEBACK=1`` adds
jsonargparse's own report below the short one.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from comlrl_lightning.errors import TRACEBACK_VARIABLE
from comlrl_lightning.runtime.compat import parser_actions, subcommand_parsers

PARSER_KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$')
CLASS_PATH_PROBLEM = re.compile(r"^Problem with given class_path '([^']+)':\s*(.*)$")
NOT_ACCEPTED = re.compile(r"^(?:Option|Key) '([^']+)' is not accepted")
GROUP_NOT_ACCEPTED = re.compile(r"^(?:Group|Subcommand) '([^']+)' does not accept option '([^']+)'")
UNRECOGNIZED = re.compile(r"^unrecognized arguments: (.*)$")
INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
LINKED_TARGET = re.compile(r"^argument (\w+)\(([^)]*)\) --> (\S+): ")
CLASS_REPR = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")
NONE_ALTERNATIVE = "Expected a <class 'NoneType'>"
METADATA = ("Subtypes:", "Given value type:", "Given value:", "Does not validate against any of the Union subtypes")


@dataclass
class Node:
    """One line of jsonargparse's report and the lines indented below it."""

    text: str
    children: List["Node"] = field(default_factory=list)


@dataclass(frozen=True)
class Problem:
    """What went wrong, found in jsonargparse's report.

    Attributes:
        key: the full dotted option (``model.init_args.dpo_betta``); empty when none is named.
        message: the innermost message about it.
        unknown: the option does not exist (``message`` is then empty).
        owner: the class whose options ``key`` was looked up in, if any, and the dotted prefix its
            options sit under (``("comlrl_lightning.MADPOModule", "model.init_args")``).
    """

    key: str
    message: str
    unknown: bool = False
    owner: Optional[Tuple[str, str]] = None


def report_tree(report: str) -> List[Node]:
    """jsonargparse's report as a tree by indentation (blank lines dropped; a ``- `` item's own text
    starts after the dash)."""
    roots: List[Node] = []
    stack: List[Tuple[int, Node]] = []
    for line in report.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        node = Node(line.strip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((indent, node))
    return roots


def _item(text: str) -> str:
    return text[2:].strip() if text.startswith("- ") else text


def _join(path: Sequence[str]) -> str:
    return ".".join(part for part in path if part)


def _chosen_alternative(alternatives: List[Node]) -> Optional[Node]:
    """Of a union's tried types, the one worth reporting: a class that was tried before anything
    else, never the ``None`` alternative (a user rarely means ``null``)."""
    tried = [node for node in alternatives if _item(node.text) != NONE_ALTERNATIVE]
    classes = [node for node in tried if CLASS_PATH_PROBLEM.match(_item(node.text))]
    chosen = classes or tried
    return chosen[0] if chosen else None


def explain(nodes: List[Node], path: Sequence[str] = (), owner: Optional[Tuple[str, str]] = None) -> Problem:
    """The :class:`Problem` that ``nodes`` (a report's tree, :func:`report_tree`) describe, the option
    ``path`` (dotted parts) leading to them."""
    errors = next((node for node in nodes if node.text == "Errors:"), None)
    if errors is not None:  # a union: its tried types are the children of "Errors:"
        chosen = _chosen_alternative(errors.children)
        if chosen is not None:
            return explain([chosen], path, owner)
    for node in nodes:
        text = _item(node.text)
        if text.startswith(METADATA) or text == NONE_ALTERNATIVE:
            continue
        key = PARSER_KEY.match(text)
        if key:
            inner = [Node(key.group(2), node.children)] if key.group(2) else node.children
            return explain(inner, [*path, key.group(1)], owner)
        tried = CLASS_PATH_PROBLEM.match(text)
        if tried:
            inner = [Node(tried.group(2), node.children)] if tried.group(2) else node.children
            prefix = [*path, "init_args"]
            return explain(inner, prefix, (tried.group(1), _join(prefix)))
        return _leaf(text, node.children, path, owner)
    return Problem(_join(path), "")


def _leaf(text: str, children: List[Node], path: Sequence[str], owner: Optional[Tuple[str, str]]) -> Problem:
    """The innermost message: an unknown option, or a message about the option at ``path``."""
    unknown = NOT_ACCEPTED.match(text)
    if unknown:
        return Problem(_join([*path, unknown.group(1)]), "", True, owner)
    grouped = GROUP_NOT_ACCEPTED.match(text)
    if grouped:
        return Problem(_join([*path, grouped.group(1), grouped.group(2)]), "", True, owner)
    unrecognized = UNRECOGNIZED.match(text)
    if unrecognized:
        words = [word for word in unrecognized.group(1).split() if word.startswith("--")]
        if words:
            return Problem(_join([*path, words[0][2:].partition("=")[0]]), "", True, owner)
    linked = LINKED_TARGET.match(text)
    if linked:
        function, source, target = linked.groups()
        return Problem(target, f"computed from {source} (by {function}): set that instead")
    lines = [text, *(_item(child.text) for child in children if not _item(child.text).startswith(METADATA))]
    return Problem(_join(path), CLASS_REPR.sub(r"\1", " ".join(lines)), False, owner)


def closest_option(unknown: str, known: Sequence[str]) -> Optional[str]:
    """The known option ``unknown`` most likely misspells, or ``None``: of the options with as many
    dotted parts, the closest (difflib, ratio at least 0.6) once the leading parts each shares with
    ``unknown`` are left out of both, so a long shared prefix alone suggests nothing."""
    parts = unknown.split(".")
    best: Optional[str] = None
    best_ratio = 0.6
    for option in known:
        theirs = option.split(".")
        if len(theirs) != len(parts) or option == unknown:
            continue
        shared = next((i for i, (a, b) in enumerate(zip(parts, theirs)) if a != b), len(parts))
        ratio = difflib.SequenceMatcher(None, ".".join(parts[shared:]), ".".join(theirs[shared:])).ratio()
        if ratio >= best_ratio:
            best, best_ratio = option, ratio
    return best


def class_options(class_path: str) -> List[str]:
    """The dotted options of the class at ``class_path`` as jsonargparse reads them (nested
    dataclass fields included: ``sampling.top_k``); empty if it cannot be imported."""
    from jsonargparse import ArgumentParser

    module, _, name = class_path.rpartition(".")
    try:
        owner = getattr(importlib.import_module(module), name)
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(owner, fail_untyped=False, sub_configs=True)
    except Exception:  # a class jsonargparse cannot read: no suggestion, the error stands
        return []
    return parser_options(parser)


def parser_options(parser: Any) -> List[str]:
    """The dotted long options of an argparse ``parser`` (no ``--``; ``--help``/``--config`` left out)."""
    options = []
    for action in parser_actions(parser):
        for option in action.option_strings:
            name = option[2:]
            if (
                option.startswith("--")
                and name not in ("help", "config", "print_config")
                and not name.endswith(".help")
            ):
                options.append(name)
    return options


def _without_init_args(key: str) -> str:
    return ".".join(part for part in key.split(".") if part != "init_args")


def as_given(key: str, args: Sequence[str]) -> Optional[str]:
    """``--<option>`` as the command line ``args`` spell ``key`` (with or without ``init_args``), or
    ``None`` if they do not give it (it came from a config file)."""
    wanted = _without_init_args(key)
    for word in args:
        if isinstance(word, str) and word.startswith("--"):
            given = word[2:].partition("=")[0]
            if _without_init_args(given) == wanted:
                return given
    return None


def _spelled_like(option: str, given: Optional[str]) -> str:
    """``option`` (a full dotted key) written the way the command line wrote the option it is about
    (``given``; ``None``: a config file gave it): as a flag, without ``init_args`` if that was left out."""
    if given is None:
        return option
    if "init_args" not in given.split("."):
        option = _without_init_args(option)
    return f"--{option}"


def problem_lines(problem: Problem, known: Sequence[str], args: Sequence[str], prog: str) -> List[str]:
    """The short report: ``error: <option>: <message>`` (or ``no such option; did you mean ...?``)
    and a line saying where the options are listed."""
    given = as_given(problem.key, args) if problem.key else None
    shown = _spelled_like(problem.key, given)
    if problem.unknown:
        suggestion = closest_option(problem.key, known)
        message = "no such option"
        if suggestion is not None:
            message += f"; did you mean {_spelled_like(suggestion, given)}?"
        first = f"error: {shown}: {message}"
    else:
        first = f"error: {shown}: {problem.message}" if problem.key else f"error: {problem.message}"
    where = f"{prog} --help lists the options"
    if problem.owner is not None:
        part, name = problem.owner[1].rpartition(".init_args")[0], problem.owner[0].rpartition(".")[2]
        where = f"{prog} --{part}.help {problem.owner[0]} lists {name}'s options, {prog} --help the others"
    return [first, where]


def short_report(report: str, parser: Any, args: Sequence[str]) -> List[str]:
    """:func:`problem_lines` for jsonargparse's ``report`` of a failed parse of ``args`` by ``parser``
    (the command's; the subcommand's options are the ones offered)."""
    invalid = INVALID_CHOICE.search(report)
    prog = parser.prog.replace(" [options]", "")
    if invalid:  # a misspelt subcommand or choice
        choices = re.findall(r"'([^']*)'", invalid.group(2))
        close = difflib.get_close_matches(invalid.group(1), choices, n=1, cutoff=0.6)
        message = f"error: {invalid.group(1)!r} is not one of {', '.join(choices)}"
        return [message + (f"; did you mean {close[0]!r}?" if close else ""), f"{prog} --help lists them"]
    command = subcommand_parser(parser, args)
    problem = explain(report_tree(report))
    known = parser_options(command)
    if problem.owner is not None:
        options = class_options(problem.owner[0])
        known = [f"{problem.owner[1]}.{option}" for option in options]
        if not options:  # a class that cannot be imported has no options to point to
            problem = dataclasses.replace(problem, owner=None)
    return problem_lines(problem, known, args, command.prog.replace(" [options]", ""))


def subcommand_parser(parser: Any, args: Sequence[str]) -> Any:
    """The parser of the subcommand ``args`` name (the first word that is one), else ``parser``."""
    commands = subcommand_parsers(parser)
    return next((commands[word] for word in args if isinstance(word, str) and word in commands), parser)


def _parsers(parser: Any) -> List[Any]:
    return [parser, *subcommand_parsers(parser).values()]


@contextlib.contextmanager
def short_parse_errors(parser: Any, args: Optional[Sequence[str]]) -> Iterator[None]:
    """Within the block, a failed parse by ``parser`` (or its subcommands' parsers) of ``args``
    (``None``: ``sys.argv[1:]``) prints :func:`short_report` on stderr and exits with status 2,
    argparse's status for a usage error; ``COMLRL_LIGHTNING_TRACEBACK=1`` prints jsonargparse's own
    report below it."""
    words = [str(word) for word in (sys.argv[1:] if args is None else args)] if not isinstance(args, dict) else []
    parsers = _parsers(parser)
    before = [one.exit_on_error for one in parsers]
    for one in parsers:
        one.exit_on_error = False
    try:
        yield
    except argparse.ArgumentError as error:
        report = str(error)
        print("\n".join(short_report(report, parser, words)), file=sys.stderr)
        if os.environ.get(TRACEBACK_VARIABLE, "").strip() not in ("", "0"):
            print(report, file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        for one, exits in zip(parsers, before):
            one.exit_on_error = exits


__all__ = [
    "Node",
    "Problem",
    "class_options",
    "closest_option",
    "explain",
    "problem_lines",
    "report_tree",
    "short_parse_errors",
    "short_report",
]
