"""An item's trusted ``check``, rewritten so that each of its tests is counted, run in the trainer.

**What a test is** (the analysis: :mod:`.check_analysis`; the rewrite: :mod:`.check_rewrite`). One
``assert`` statement of ``check(candidate)`` whose condition depends on a *call* of the program: it calls ``candidate`` (or the entry point's name, or a name or helper
function standing for either), hands it to a function that may call it (``map(candidate, xs)``), or
reads a name computed from such a call. Names are followed through assignments, loop targets,
method calls (``results.append(candidate(x))``) and control flow: a name assigned in a branch, a
loop or a ``try`` whose path depends on a call (``ok = True`` in the ``except ValueError`` of a
``try`` that calls the candidate) depends on it too, to a fixed point. Asserts that only look at the
candidate (``assert callable(candidate)``, ``assert candidate is not None``, ``assert candidate``),
``assert True, "..."`` lines and asserts about the item's own data are not tests. Two more forms
are: ``assert False`` (any falsy constant) where reaching it depends on a call (the ``else`` of such
a ``try``), a test that passes unless it is reached; and a ``with`` block whose body calls the
candidate (``with raises(ValueError): candidate(-1)``), a test that passes when the block
completes, whatever its context manager decided.

**How a test is counted.** Each test records its outcome instead of stopping ``check``, so the
check goes on after a failure; a test passes when it ran at least once and every one of its
executions held (an assert inside a loop is one test). A statement outside the check's own ``try``
and ``with`` blocks that computes from the program and raises (``result = candidate(x)`` when the
call fails) is skipped, so the asserts after it still run (and fail where they read what it did not
assign).

**Python's semantics where the check handles exceptions.** Inside the body of the check's own
``try`` (one with ``except`` clauses), ``with`` block or nested function, nothing is skipped: an
exception of the program reaches the check's ``except`` clause or context manager as in Python,
and a failed test there raises ``AssertionError`` after it is recorded (so the rest of that block
does not run). A test whose condition raised there holds if the check's own ``except`` clause or
context manager handles that very exception, and fails if it escapes. A failed test stays failed
even where the check catches its ``AssertionError``. An exception the caller names as uncatchable
(the runner's: the program's process has stopped) and the time limit pass through every ``except``
clause and context manager of the check.

**A time limit.** The check's own time (not counting its calls of the program, which the program's
limit bounds) is limited: a trace function on the check's line events raises
:class:`CheckTimeLimit` past :data:`CHECK_TIME_LIMIT`, so a check that loops ends with every test
failed and a warning naming the item. Time spent inside one C call (``time.sleep``) is seen only
when it returns.

Besides the test source, ``check`` sees the imports, functions and classes the item's prompt
defines (HumanEval's tests call helpers such as ``poly`` or ``encode_cyclic`` from it): the
trusted ones from the item, never the program's.
"""

from __future__ import annotations

import ast
import functools
import logging
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Type, cast

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding.check_analysis import call_flow, callee_functions
from comlrl_lightning.tasks.coding.check_rewrite import ESCAPED, HANDLED, RAISED, RECORD, WATCH, Place, Rewriter

logger = logging.getLogger("comlrl_lightning.tasks.coding")

CHECK_TIME_LIMIT = 10.0
"""Seconds a check may run of its own (its calls of the program not counted)."""


class CheckTimeLimit(BaseException):
    """Raised into a check that ran past its time limit (a ``BaseException``, so the check's
    ``except Exception`` does not catch it; its bare ``except`` passes it on)."""


@dataclass(frozen=True)
class CompiledCheck:
    """One item's rewritten ``check``: the module to run, its tests' count and their source lines."""

    task_id: str
    entry_point: str
    code: Any  # a code object: the prompt's definitions, then the rewritten test source
    tests: Tuple[str, ...]
    """Each test's ``line N: condition``, in the order of the source."""
    unless_reached: FrozenSet[int] = frozenset()
    """The tests that pass unless they are reached (``assert False`` behind a call)."""

    @property
    def total(self) -> int:
        return len(self.tests)


@dataclass
class CheckOutcome:
    """What one run of a rewritten ``check`` found: per test, its executions and whether all held."""

    executions: List[int]
    held: List[bool]
    first_failure: str = ""
    unless_reached: FrozenSet[int] = frozenset()

    @property
    def passed(self) -> int:
        """Tests that held every time and ran at least once (those that pass unless reached: held)."""
        return sum(
            1
            for index, (count, ok) in enumerate(zip(self.executions, self.held))
            if ok and (count or index in self.unless_reached)
        )


def task_name(item: Mapping[str, Any]) -> str:
    """The item's ``task_id`` as errors name it."""
    task_id = item.get("task_id")
    return str(task_id) if task_id is not None else "an item without task_id"


def _prompt_definitions(prompt: str, entry_point: str) -> List[ast.stmt]:
    """The imports, functions and classes of the item's prompt (not its entry point); none when the
    prompt is not Python (a natural-language prompt)."""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return []
    kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node for node in tree.body if isinstance(node, kept) and getattr(node, "name", None) != entry_point]


def _parse_error(task_id: str, error: Exception) -> DataError:
    where = f"line {error.lineno}: " if isinstance(error, SyntaxError) and error.lineno else ""
    return DataError(f"{task_id}: its test does not parse ({where}{getattr(error, 'msg', error)}).")


@functools.lru_cache(maxsize=2048)
def _compile(task_id: str, prompt: str, test: str, entry_point: str) -> CompiledCheck:
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError) as error:
        raise _parse_error(task_id, error) from None
    checks = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if not checks or not checks[-1].args.args:
        raise DataError(f"{task_id}: its test defines no check(candidate) function.")
    check = checks[-1]
    definitions = _prompt_definitions(prompt, entry_point)
    helpers = [
        node
        for node in definitions + tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not check
    ]
    rewriter = Rewriter(call_flow(check, callee_functions(helpers, {entry_point})))
    check.body = rewriter.block(check.body, Place())
    if not rewriter.tests:
        raise DataError(
            f"{task_id}: check(candidate) has no test (an assert whose outcome depends on a call of the candidate)."
        )
    tree.body = definitions + tree.body
    code = compile(ast.fix_missing_locations(tree), f"<check of {task_id}>", "exec")
    return CompiledCheck(task_id, entry_point, code, tuple(rewriter.tests), frozenset(rewriter.unless_reached))


def compile_check(item: Mapping[str, Any]) -> CompiledCheck:
    """``item``'s ``check`` rewritten and compiled (cached); a :class:`DataError` naming the task id
    when its ``entry_point`` is not a Python name, its ``test`` is missing or does not parse, or it
    has no test (the module's docstring says what a test is)."""
    task_id = task_name(item)
    entry_point = item.get("entry_point")
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise DataError(f"{task_id}: entry_point must name the function the tests call (got {entry_point!r:.60}).")
    test = item.get("test")
    if not isinstance(test, str) or not test.strip():
        raise DataError(f"{task_id}: no test (Python source defining check(candidate)).")
    prompt = item.get("prompt")
    return _compile(task_id, prompt if isinstance(prompt, str) else "", test, entry_point)


# ----------------------------------------------------------------------------------------------
# The run


class _Recorder:
    """Each test's executions and outcome while the rewritten check runs, and the hooks it calls."""

    def __init__(self, compiled: CompiledCheck, uncatchable: Tuple[Type[BaseException], ...]) -> None:
        self.tests = compiled.tests
        self.uncatchable = uncatchable
        self.outcome = CheckOutcome([0] * compiled.total, [True] * compiled.total, "", compiled.unless_reached)
        self.pending: List[Tuple[int, BaseException]] = []
        """Tests whose condition raised where the check's own handlers decide, with what it raised."""

    def record(self, index: int, value: Any, error: Optional[BaseException]) -> bool:
        """One execution of test ``index``: held when ``value`` is true and nothing was raised."""
        try:
            ok = error is None and bool(value)
        except Exception as failure:  # a truth value that raises
            ok, error = False, failure
        self.outcome.executions[index] += 1
        if not ok:
            self.fail(index, f"{type(error).__name__}: {str(error)[:160]}" if error is not None else "it is false")
        return ok

    def fail(self, index: int, reason: str) -> None:
        self.outcome.held[index] = False
        if not self.outcome.first_failure:
            self.outcome.first_failure = f"{self.tests[index]} -> {reason}"

    def raised(self, index: int, error: BaseException) -> None:
        self.pending.append((index, error))

    def handled(self) -> None:
        """First in each of the check's ``except`` clauses: the exception it handles was handled."""
        self.resolve(cast(BaseException, sys.exc_info()[1]))

    def resolve(self, error: BaseException) -> None:
        """The check's own code handled ``error``: a test whose condition raised it held (one
        execution); an uncatchable error is raised on, so that no handler of the check runs."""
        if isinstance(error, self.uncatchable):
            raise error
        for index, _ in [entry for entry in self.pending if entry[1] is error]:
            self.outcome.executions[index] += 1
        self.pending = [entry for entry in self.pending if entry[1] is not error]

    def escaped(self, error: BaseException, tests: Sequence[int]) -> None:
        """``error`` escaped a block holding ``tests``, which the rewrite skips: each of them fails once."""
        self.pending = [entry for entry in self.pending if entry[1] is not error]
        for index in tests:
            self.record(index, False, error)

    def watch(self, manager: Any) -> "_Watched":
        return _Watched(manager, self)

    def finish(self) -> CheckOutcome:
        """The outcome, once the check has ended: a test whose exception nothing handled failed."""
        for index, error in self.pending:
            self.record(index, False, error)
        self.pending = []
        return self.outcome


class _Watched:
    """One of the check's context managers, watched: when it suppresses an exception, the check
    handled it (:meth:`_Recorder.resolve`); it never suppresses an uncatchable one."""

    def __init__(self, manager: Any, recorder: _Recorder) -> None:
        self.manager, self.recorder = manager, recorder

    def __enter__(self) -> Any:
        return type(self.manager).__enter__(self.manager)

    def __exit__(self, kind: Any, error: Optional[BaseException], traceback: Any) -> bool:
        suppressed = bool(type(self.manager).__exit__(self.manager, kind, error, traceback))
        if error is None or not suppressed:
            return suppressed
        if isinstance(error, self.recorder.uncatchable):
            return False
        self.recorder.resolve(error)
        return True


class _Deadline:
    """The check's own time, measured on its line events (a trace function in the calling thread
    that traces only frames of the check's code); the program's calls are not counted."""

    def __init__(self, seconds: float, filename: str) -> None:
        self.seconds, self.filename = seconds, filename
        self.started = time.monotonic()
        self.outside = 0.0

    def spent(self) -> float:
        return time.monotonic() - self.started - self.outside

    def trace(self, frame: FrameType, event: str, argument: Any) -> Optional[Callable[..., Any]]:
        return self.line if frame.f_code.co_filename == self.filename else None

    def line(self, frame: FrameType, event: str, argument: Any) -> Optional[Callable[..., Any]]:
        if event == "line" and self.spent() > self.seconds:
            raise CheckTimeLimit(f"the check ran past its {self.seconds:g} s time limit")
        return self.line

    def excluding(self, candidate: Callable[..., Any]) -> Callable[..., Any]:
        """``candidate``, its calls' time not counted."""

        def call(*arguments: Any, **keywords: Any) -> Any:
            started = time.monotonic()
            try:
                return candidate(*arguments, **keywords)
            finally:
                self.outside += time.monotonic() - started

        return call


def run_check(
    compiled: CompiledCheck,
    candidate: Callable[..., Any],
    time_limit: float = CHECK_TIME_LIMIT,
    uncatchable: Tuple[Type[BaseException], ...] = (),
) -> CheckOutcome:
    """Run ``compiled``'s ``check`` with ``candidate`` (in this process: the item's code is trusted).

    Args:
        compiled: the item's rewritten check (:func:`compile_check`).
        candidate: the program's entry point (the runner's: a call into the program's process).
        time_limit: seconds the check may run of its own, its calls of ``candidate`` not counted;
            past it every test fails and a warning names the item.
        uncatchable: exceptions the check's own ``except`` clauses and context managers never
            catch (the runner's: the program's process has stopped).
    """
    recorder = _Recorder(compiled, tuple(uncatchable) + (CheckTimeLimit,))
    deadline = _Deadline(time_limit, compiled.code.co_filename)
    timed = deadline.excluding(candidate)
    # the entry point's name is the candidate too (a HumanEval test may call the function by name)
    namespace: Dict[str, Any] = {
        "__name__": "__check__",
        RECORD: recorder.record,
        RAISED: recorder.raised,
        HANDLED: recorder.handled,
        ESCAPED: recorder.escaped,
        WATCH: recorder.watch,
        compiled.entry_point: timed,
    }
    previous = sys.gettrace()
    sys.settrace(deadline.trace)
    try:
        exec(compiled.code, namespace)
        namespace["check"](timed)
    except CheckTimeLimit:
        outcome = recorder.finish()
        outcome.held = [False] * compiled.total
        outcome.first_failure = f"check of {compiled.task_id} stopped: it ran past its {time_limit:g} s time limit"
        logger.warning(
            "coding item %s: its check ran past its %g s time limit (its own time, not the program's): its tests fail",
            compiled.task_id,
            time_limit,
        )
        return outcome
    except Exception as error:
        if not recorder.outcome.first_failure:
            recorder.outcome.first_failure = f"check stopped: {type(error).__name__}: {str(error)[:160]}"
    finally:
        sys.settrace(previous)
    return recorder.finish()
