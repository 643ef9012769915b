"""Mutation testing of the library's core: does each core module's test file fail when the code is wrong?

Run from the repository root (nothing in the shared working tree is ever changed)::

    nice -n 10 python tools/mutation.py                  # every target, at HEAD
    nice -n 10 python tools/mutation.py losses replay    # some targets
    nice -n 10 python tools/mutation.py --working-tree   # the working tree's files (uncommitted tests too)
    python tools/mutation.py --list losses               # the mutants, without running anything

The repository (``git archive HEAD``, or the working tree's tracked and untracked files) is copied
into a temporary folder; every mutant is written into that copy's file, the target's own test files
run against it (``-x -m "not slow"``, the everyday tier), and the original is written back. The
tests run in a forked child of a process that has already imported torch, so a mutant costs the
tests' own time, not an interpreter start; a child that runs past ``--timeout-factor`` times the
unmutated run is killed and counts as ``timeout`` (a mutant that hangs is caught, as killed).

A mutant is one small change of one node, made with Python's ``ast`` and written back into the
exact source text (everything else stays byte for byte):

* operators: ``+ -``, ``* /``, ``//`` to ``/``, ``**`` to ``*``, ``< <=``, ``> >=``, ``< >`` (each
  order reversed too), ``== !=``, ``is``/``is not``, ``in``/``not in``, ``and``/``or``, ``+=``/``-=``;
* ``not x`` and ``-x`` to ``x``;
* constants: ``True``/``False``, ``0``/``1``, any other number ``+ 1``;
* ``return value`` to ``return None``;
* a keyword argument of a call dropped (the callee's default takes its place).

Not mutated: docstrings, strings and f-strings (messages), annotations, decorators, what a ``raise``
raises (its condition is), ``__all__``. A target can limit mutation to some functions, classes or
module-level names (``scope``): the core of a module that also holds file handling.

A survivor is either a missing test (write it) or an equivalent mutant (the program means the same):
those are listed in :data:`EQUIVALENT` with why, and the score is ``killed / (mutants - equivalent)``.
The exit status is 1 when a target scores under ``--min-score`` (default 0.9).
"""

from __future__ import annotations

import argparse
import ast
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    """One module (or part of one) and the test files that cover it.

    ``scope``: the qualified names (``ReplayBuffer.sample``, a class, a module-level name) whose code
    is mutated; empty: the whole module.
    """

    name: str
    path: str
    tests: Tuple[str, ...]
    scope: Tuple[str, ...] = ()
    select: str = ""
    """A ``-k`` expression over the tests (empty: every test of the everyday tier)."""


TARGETS: Tuple[Target, ...] = (
    # the single-pass tests train a team against the reference's per-agent passes (seconds each): the
    # losses' math has direct tests of its own, which is what a mutant of it has to fail
    Target(
        "losses",
        "comlrl_lightning/losses.py",
        ("tests/test_rl_losses.py", "tests/test_losses.py"),
        select="not single_pass",
    ),
    Target("pairs", "comlrl_lightning/rounds/pairs.py", ("tests/rounds/test_pairs.py",)),
    Target(
        "pair_selection_against",
        "comlrl_lightning/rounds/pairing.py",
        ("tests/rounds/test_pairing.py",),
        ("select_against",),
    ),
    Target(
        "replay",
        "comlrl_lightning/rounds/replay.py",
        ("tests/rounds/test_replay.py",),
        (
            "lambda_decay_weights",
            "ReplayRule",
            "CurrentReplay",
            "NearestKReplay",
            "check_lambda",
            "LambdaDecayReplay",
            "ReplayBuffer.sample_size_for",
            "ReplayBuffer.sample",
            "_draw_positions",
        ),
    ),
    Target(
        "coding_reward",
        "comlrl_lightning/tasks/coding/reward.py",
        ("tests/tasks/coding/test_reward.py",),
        (
            "AUX_DEFINED",
            "MAIN_DEFINED",
            "PARSES",
            "TESTS",
            "CALLS_AUX",
            "NOT_A_WRAPPER",
            "IGNORES_AUX_RESULT",
            "MAX_REWARD",
            "TRAINING_SHIFT",
            "level_reward",
            "reaches_tests",
            "CodeScore",
        ),
    ),
    Target(
        "test_counting",
        "comlrl_lightning/tasks/coding/check_transform.py",
        ("tests/tasks/coding/test_check_transform.py",),
        ("CompiledCheck.total", "CheckOutcome.passed"),
    ),
    Target(
        "test_fraction",
        "comlrl_lightning/tasks/coding/runner.py",
        ("tests/tasks/coding/test_reward.py",),
        ("TestReport.fraction",),
    ),
    Target("resume_rule", "comlrl_lightning/checkpoints/resume_rule.py", ("tests/checkpoints/test_resume_rule.py",)),
)
"""The core: the losses (with group advantages and the k3 KL), pairs and pair selection, replay
sampling and its lambda weights, the coding task's reward levels and test counting, the resume rule."""

EQUIVALENT: Dict[Tuple[str, str, str], str] = {
    ("losses", "madpo_loss", "unary dropped: `-1` -> `1`"): (
        "`unsqueeze(1)` of a 1-D tensor is `unsqueeze(-1)`, and `sum(dim=1)` of the then 2-D [B, N] margins "
        "is `sum(dim=-1)`"
    ),
    ("resume_rule", "_known", "constant: `1` -> `0`"): (
        "`parts[:0]` names the empty option, which no flattened options hold (every name starts with "
        "`model.` or `data.`), so the added first check is always false"
    ),
    ("losses", "gathered_logprobs", "constant: `1024` -> `1025`"): (
        "the chunk size bounds how much float32 is alive at once, not the values (the tests run every chunk size)"
    ),
    ("losses", "gathered_logprobs", "unary dropped: `-1` -> `1`"): (
        "on a chunk's 2-D rows and 1-D targets dim 1 is dim -1 (gather, unsqueeze, squeeze); the reshape's -1 "
        "mutants are killed"
    ),
    ("losses", "k3_kl", "unary dropped: `-1` -> `1`"): "its inputs are [M, T]: `sum(dim=1)` is `sum(dim=-1)`",
    ("pair_selection_against", "select_against", "comparison: `gap > 0` -> `gap >= 0`"): (
        "the comparison is reached only for gap != 0 (the test above it)"
    ),
    ("replay", "lambda_decay_weights", "comparison: `total > 0.0` -> `total >= 0.0`"): (
        "the normaliser is 0 only for a lam outside [0, 1] (lam = -1 over an even count): for lam in [0, 1) "
        "it is 1 - lam^K > 0, and NaN fails both tests"
    ),
    ("replay", "ReplayBuffer.sample", "comparison: `total <= 0` -> `total < 0`"): (
        "a draw of 0 records makes no random call (choices with k=0, shuffle of an empty list) and returns []"
    ),
}
"""``(target, function, mutation)`` of a mutant that means the same program, and why."""


@dataclass(frozen=True)
class Mutant:
    """One change: bytes ``start:end`` of the file become ``replacement``."""

    target: str
    function: str
    line: int
    start: int
    end: int
    replacement: str
    description: str

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement.encode("utf-8") + source[self.end :]

    @property
    def equivalent(self) -> Optional[str]:
        return EQUIVALENT.get((self.target, self.function, self.description))


BINARY_SWAPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Pow: ast.Mult,
}
COMPARE_SWAPS = {
    ast.Lt: (ast.LtE, ast.Gt),
    ast.LtE: (ast.Lt, ast.GtE),
    ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt, ast.LtE),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
BOOL_SWAPS = {ast.And: ast.Or, ast.Or: ast.And}
TYPING_CALLS = ("TypeVar", "NewType", "cast")
"""Calls that only inform the type checker: not mutated."""
DISPLAY_KEYWORDS = ("repr",)
"""Keyword arguments that only change how an object prints (``field(repr=False)``): not dropped."""


def _changed_constant(value: object) -> Optional[Union[bool, int, float]]:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return {0: 1, 1: 0}.get(value, value + 1)
    if isinstance(value, float):
        return {0.0: 1.0, 1.0: 0.0}.get(value, value + 1.0)
    return None


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


class _Finder(ast.NodeVisitor):
    """Collects the mutants of one module's in-scope code."""

    def __init__(self, target: str, source: bytes, scope: Sequence[str]) -> None:
        self.target, self.source, self.scope = target, source, tuple(scope)
        self.line_starts = [0]
        for line in source.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.names: List[str] = []
        self.found: List[Mutant] = []

    # where we are --------------------------------------------------------------------------
    def _in_scope(self) -> bool:
        if not self.scope:
            return True
        name = ".".join(self.names)
        return bool(name) and any(name == s or name.startswith(s + ".") for s in self.scope)

    def _offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def _add(self, node: ast.AST, replacement: str, description: str) -> None:
        if not self._in_scope():
            return
        start = self._offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self._offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        self.found.append(
            Mutant(self.target, ".".join(self.names), node.lineno, start, end, replacement, description)  # type: ignore[attr-defined]
        )

    def _text(self, node: ast.AST) -> str:
        start = self._offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self._offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return _short(" ".join(self.source[start:end].decode("utf-8").split()))

    def _expression(self, node: ast.expr, changed: ast.expr, what: str) -> None:
        text = ast.unparse(changed)
        self._add(node, f"({text})", f"{what}: `{self._text(node)}` -> `{_short(text)}`")

    # scopes --------------------------------------------------------------------------------
    def _body(self, body: List[ast.stmt]) -> None:
        for index, statement in enumerate(body):
            if index == 0 and _is_docstring(statement):
                continue
            self.visit(statement)

    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.names.append(node.name)
        for default in [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]:
            self.visit(default)
        self._body(node.body)
        self.names.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.names.append(node.name)
        self._body(node.body)
        self.names.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.body)

    def _assigned(self, targets: Sequence[ast.expr], value: Optional[ast.expr]) -> None:
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if value is None or "__all__" in names:
            return
        pushed = not self.names and len(names) == 1  # a module-level name is a scope of its own
        if pushed:
            self.names.append(names[0])
        self.visit(value)
        for target in targets:
            if not isinstance(target, ast.Name):
                self.visit(target)
        if pushed:
            self.names.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target], node.value)

    # not mutated ---------------------------------------------------------------------------
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return

    def visit_Raise(self, node: ast.Raise) -> None:
        return

    def visit_Expr(self, node: ast.Expr) -> None:
        if not _is_docstring(node):
            self.visit(node.value)

    # mutations -----------------------------------------------------------------------------
    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = BINARY_SWAPS.get(type(node.op))
        if swap is not None:
            self._expression(node, ast.BinOp(node.left, swap(), node.right), "operator")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        swap = BINARY_SWAPS.get(type(node.op))
        if swap is not None:
            text = ast.unparse(ast.AugAssign(node.target, swap(), node.value))
            self._add(node, text, f"operator: `{self._text(node)}` -> `{_short(text)}`")
        self.visit(node.value)

    def visit_Compare(self, node: ast.Compare) -> None:
        for index, op in enumerate(node.ops):
            for swap in COMPARE_SWAPS.get(type(op), ()):
                ops = list(node.ops)
                ops[index] = swap()
                self._expression(node, ast.Compare(node.left, ops, node.comparators), "comparison")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self._expression(node, ast.BoolOp(BOOL_SWAPS[type(node.op)](), node.values), "boolean")
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, (ast.Not, ast.USub)):
            self._expression(node, node.operand, "unary dropped")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        changed = _changed_constant(node.value)
        if changed is not None:
            self._expression(node, ast.Constant(changed), "constant")

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            self._add(node, "return None", f"return: `{self._text(node)}` -> `return None`")
            self.visit(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if callee in TYPING_CALLS:
            return
        for keyword in node.keywords:
            if keyword.arg is None or keyword.arg in DISPLAY_KEYWORDS:
                continue
            kept = [k for k in node.keywords if k is not keyword]
            self._expression(node, ast.Call(node.func, node.args, kept), f"argument {keyword.arg}= dropped")
        self.visit(node.func)
        for argument in [*node.args, *[k.value for k in node.keywords if k.arg not in DISPLAY_KEYWORDS]]:
            self.visit(argument)


def find_mutants(target: str, source: bytes, scope: Sequence[str] = ()) -> List[Mutant]:
    """Every mutant of ``source`` (a module's bytes) within ``scope`` (qualified names; empty: all),
    in source order, each distinct change once."""
    finder = _Finder(target, source, scope)
    finder.visit(ast.parse(source))
    unique = {(m.start, m.end, m.replacement): m for m in finder.found}
    return sorted(unique.values(), key=lambda m: (m.start, m.end, m.replacement))


# ------------------------------------------------------------------------------------------------
# Running the tests


@dataclass
class Result:
    """What the tests said of one target's mutants."""

    target: str
    path: str
    baseline_s: float
    killed: int = 0
    timed_out: List[Dict[str, object]] = field(default_factory=list)
    survived: List[Dict[str, object]] = field(default_factory=list)
    equivalent: List[Dict[str, object]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def timeout(self) -> int:
        return len(self.timed_out)

    @property
    def total(self) -> int:
        return self.killed + self.timeout + len(self.survived) + len(self.equivalent)

    @property
    def score(self) -> float:
        """Killed (a timeout counts: the tests stopped it) over the mutants that are not equivalent."""
        counted = self.total - len(self.equivalent)
        return (self.killed + self.timeout) / counted if counted else 1.0


def run_pytest(root: Path, tests: Sequence[str], timeout: float, log: Path, select: str = "") -> Optional[int]:
    """The exit status of ``pytest -x -m "not slow" [-k select] <tests>`` run in a forked child inside
    ``root`` (its output to ``log``), or ``None`` when it ran past ``timeout`` seconds and was killed."""
    # no plugin autoload (pluggy's scan of every installed distribution costs seconds a run): only the
    # timeout plugin, for the tests that set their own limit
    args = ["-q", "-x", "-p", "no:cacheprovider", "-p", "pytest_timeout", "-m", "not slow", "-o", "addopts=", *tests]
    if select:
        args += ["-k", select]
    # what is imported already is never garbage: out of the collector's sight, pytest's full collections
    # at its end do not walk torch's objects in every child (seconds each)
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: its own process group, so a test's own children are stopped with it
        code = 3
        try:
            os.setpgid(0, 0)
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            os.chdir(root)
            descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(descriptor, 1)
            os.dup2(descriptor, 2)
            sys.stdout = sys.stderr = os.fdopen(descriptor, "w", buffering=1)
            import pytest

            code = int(pytest.main(args))
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


def run_target(
    root: Path,
    target: Target,
    timeout_factor: float = 3.0,
    progress: bool = True,
    limit: Optional[int] = None,
    only: Optional[set] = None,
) -> Result:
    """Every mutant of ``target`` run against its tests inside ``root`` (a copy of the repository,
    whose file is written for each mutant and put back after); with ``only``, those whose
    ``(function, mutation)`` it holds."""
    path = root / target.path
    original = path.read_bytes()
    log = root / f".mutation-{target.name}.log"
    started = time.monotonic()
    code = run_pytest(root, target.tests, 600.0, log, target.select)
    baseline = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"{target.name}: the tests fail without any mutant (exit {code}); see {log}")
    result = Result(target.name, target.path, round(baseline, 2))
    mutants = find_mutants(target.name, original, target.scope)
    if only is not None:
        mutants = [m for m in mutants if (m.function, m.description) in only]
    mutants = mutants[:limit]
    try:
        for number, mutant in enumerate(mutants, start=1):
            path.write_bytes(mutant.apply(original))
            seconds = max(30.0, timeout_factor * baseline)
            code = run_pytest(root, target.tests, seconds, log, target.select)
            if code is None:  # once more with twice the time: on a loaded machine a slow run is not yet a hang
                code = run_pytest(root, target.tests, 2 * seconds, log, target.select)
            entry = {"line": mutant.line, "function": mutant.function, "mutation": mutant.description}
            if code is None:
                result.timed_out.append(entry)
            elif code != 0:
                result.killed += 1
            elif mutant.equivalent is not None:
                result.equivalent.append({**entry, "why": mutant.equivalent})
            else:
                result.survived.append(entry)
            if progress:
                mark = "T" if code is None else "x" if code != 0 else "e" if mutant.equivalent else "S"
                print(mark, end="", flush=True)
                if number % 80 == 0:
                    print(f" {number}/{len(mutants)}", flush=True)
    finally:
        path.write_bytes(original)
    result.seconds = round(time.monotonic() - started, 1)
    if progress:
        print(flush=True)
    return result


# ------------------------------------------------------------------------------------------------
# The copy and the command


OWN_MODULES = ("comlrl_lightning", "tests", "conftest")
"""Top-level names of the repository's own modules: imported afresh by every child."""


def _own(name: str) -> bool:
    return name.split(".")[0] in OWN_MODULES


def warm_imports(root: Path, tests: Sequence[str]) -> None:
    """Import, once, what the test files and the package import (torch, Lightning, pytest's
    plugins: tens of seconds on a loaded machine), then forget the repository's own modules, so that
    each forked child imports the package afresh (a mutant's file among it) and nothing else."""
    import importlib
    import importlib.metadata

    import pytest  # noqa: F401

    for entry in importlib.metadata.entry_points(group="pytest11"):
        try:
            entry.load()
        except Exception:  # a plugin that cannot load here is pytest's to report in the child
            pass
    names = {"comlrl_lightning"}
    for test in [*tests, "tests/conftest.py"]:
        path = root / test
        if path.exists():
            for node in ast.walk(ast.parse(path.read_bytes())):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module)
    for name in sorted(names):
        try:
            importlib.import_module(name)
        except Exception:  # the child meets (and reports) the same error
            pass


def _imports(module: object) -> Iterator[str]:
    """The absolute names ``module``'s source imports (in functions too), as modules and as
    ``module.name`` (one of them is a module)."""
    name, path = getattr(module, "__name__", ""), getattr(module, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return
    package = name if hasattr(module, "__path__") else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(Path(path).read_bytes())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            stem = ".".join([*base, *([node.module] if node.module else [])])
            yield stem
            yield from (f"{stem}.{alias.name}" for alias in node.names)


def forget_dependents(module_name: str) -> List[str]:
    """Remove from ``sys.modules`` the module ``module_name``, every own module that imports it
    (through any chain) and the tests, so a forked child imports exactly those afresh: the ones
    that may hold the mutated module's objects. Returns the names removed."""
    own = {name: module for name, module in sys.modules.items() if _own(name)}
    importers: Dict[str, set] = {}
    for name, module in own.items():
        for imported in _imports(module):
            importers.setdefault(imported, set()).add(name)
    stale, todo = set(), [module_name]
    while todo:
        name = todo.pop()
        if name in stale:
            continue
        stale.add(name)
        todo.extend(importers.get(name, ()))
    stale |= {name for name in own if name.split(".")[0] in ("tests", "conftest") or "test_" in name}
    stale |= {name for name in own if name.rpartition(".")[0] == module_name}  # a package's own modules
    removed = sorted(name for name in stale if name in sys.modules)
    for name in removed:
        del sys.modules[name]
    return removed


def copy_repository(destination: Path, working_tree: bool) -> None:
    """The repository's files into ``destination``: HEAD's (``git archive``), or the working tree's
    tracked and untracked, not ignored, files."""
    if not working_tree:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, check=True)
        return
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    for name in sorted(set(listed.decode("utf-8").split("\0")) - {""}):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def summary(results: Sequence[Result]) -> Iterator[str]:
    """The report's lines: per target its score, then each survivor."""
    for result in results:
        yield (
            f"{result.target} ({result.path}): {result.killed + result.timeout}/{result.total - len(result.equivalent)} "
            f"killed = {100 * result.score:.1f}% (timeout {result.timeout}, survived {len(result.survived)}, "
            f"equivalent {len(result.equivalent)}; tests {result.baseline_s:.1f} s unmutated, {result.seconds:.0f} s in all)"
        )
        for entry in result.survived:
            yield f"  SURVIVED {result.path}:{entry['line']} in {entry['function']}: {entry['mutation']}"
        for entry in result.timed_out:
            yield f"  TIMEOUT {result.path}:{entry['line']} in {entry['function']}: {entry['mutation']}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help=f"targets (default: all): {', '.join(t.name for t in TARGETS)}")
    parser.add_argument("--working-tree", action="store_true", help="copy the working tree's files, not HEAD's")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--limit", type=int, default=None, help="at most this many mutants per target")
    parser.add_argument("--timeout-factor", type=float, default=3.0, help="a mutant's time limit, x the unmutated run")
    parser.add_argument("--min-score", type=float, default=0.9, help="exit 1 when a target scores below this")
    parser.add_argument("--report", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--survivors-of", type=Path, default=None, help="run only the survivors and timeouts of this --report"
    )
    options = parser.parse_args(argv)
    known = {target.name: target for target in TARGETS}
    unknown = [name for name in options.targets if name not in known]
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(known)}")
    chosen = [known[name] for name in options.targets] or list(TARGETS)
    if options.list:
        for target in chosen:
            source = (REPO / target.path).read_bytes()
            for mutant in find_mutants(target.name, source, target.scope):
                print(f"{target.path}:{mutant.line} {mutant.function}: {mutant.description}")
        return 0
    sys.dont_write_bytecode = True  # a mutant's module must never be read from a stale .pyc
    os.environ.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    results: List[Result] = []
    with tempfile.TemporaryDirectory(prefix="comlrl-mutation-") as folder:
        root = Path(folder)
        copy_repository(root, options.working_tree)
        sys.path.insert(0, str(root))  # the copy's package, not the editable install's
        for target in chosen:
            warm_imports(root, target.tests)
            module = target.path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            fresh = forget_dependents(module)
            print(
                f"{target.name}: {target.path} against {' '.join(target.tests)} ({len(fresh)} modules imported per mutant)",
                flush=True,
            )
            only = None
            if options.survivors_of is not None:
                earlier = [r for r in json.loads(options.survivors_of.read_text()) if r["target"] == target.name]
                only = {(e["function"], e["mutation"]) for r in earlier for e in r["survived"] + r["timed_out"]}
            results.append(run_target(root, target, options.timeout_factor, limit=options.limit, only=only))
            for line in summary(results[-1:]):  # each target's as soon as it is done
                print(line, flush=True)
            if options.report is not None:
                report = [{**asdict(r), "score": r.score} for r in results]
                options.report.write_text(json.dumps(report, indent=1) + "\n")
    print("summary:")
    for line in summary(results):
        print(line)
    return 0 if all(result.score >= options.min_score for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
