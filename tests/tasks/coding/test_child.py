"""The trainer's side of a program's process: its pure parts, then what crosses from real programs
(slow: each starts a process) as data under limits."""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from comlrl_lightning.tasks.coding import TestReport, run_tests
from comlrl_lightning.tasks.coding.child import EXCEPTIONS, LAUNCHER_SOURCE, _exit_reason, rebuilt_exception
from tests.tasks.coding.test_runner import clean  # noqa: F401  (the fixture: no process or folder left)


@pytest.mark.parametrize(
    "code, status",
    [
        (None, "crash"),
        (0, "crash"),
        (3, "crash"),
        (128 + signal.SIGXCPU, "timeout"),
        (128 + signal.SIGXFSZ, "output_limit"),
        (128 + signal.SIGSEGV, "crash"),
        (128 + 32, "crash"),  # not a signal Python names
    ],
)
def test_a_launchers_exit_code_is_a_status(code, status):
    assert _exit_reason(code)[0] == status


def test_a_failed_call_is_raised_as_an_exception_never_as_an_exit_or_an_interrupt():
    assert EXCEPTIONS["ValueError"] is ValueError and EXCEPTIONS["MemoryError"] is MemoryError
    assert not {"SystemExit", "KeyboardInterrupt", "GeneratorExit", "StopIteration"} & set(EXCEPTIONS)


def test_the_launcher_source_is_plain_data_then_the_launcher_and_compiles_alone():
    compile(LAUNCHER_SOURCE, "<launcher>", "exec")
    assert LAUNCHER_SOURCE.index("def to_json_ready") < LAUNCHER_SOURCE.index("def main()")
    assert "comlrl-test-runner" in LAUNCHER_SOURCE


def _builtin_exception_names():
    return sorted(EXCEPTIONS)


@pytest.mark.parametrize("name", _builtin_exception_names())
def test_every_builtin_exception_is_rebuilt_as_itself_or_a_subclass_never_a_constructor_type_error(name):
    error = rebuilt_exception(name, "the program raised it")
    assert isinstance(error, EXCEPTIONS[name])
    assert "the program raised it" in str(error)


def test_unicode_errors_keep_every_except_that_caught_them_and_show_the_message():
    error = rebuilt_exception("UnicodeDecodeError", "the program raised UnicodeDecodeError: 0xff")
    assert isinstance(error, UnicodeDecodeError) and isinstance(error, UnicodeError) and isinstance(error, ValueError)
    assert str(error) == "the program raised UnicodeDecodeError: 0xff"
    assert type(error).__name__ == "UnicodeDecodeError"
    assert isinstance(rebuilt_exception("UnicodeEncodeError", "m"), UnicodeEncodeError)
    assert isinstance(rebuilt_exception("UnicodeTranslateError", "m"), UnicodeTranslateError)
    assert type(rebuilt_exception("NoSuchError", "m")) is RuntimeError


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is a builtin from Python 3.11")
def test_an_exception_group_is_a_group_of_one_exception_with_its_message():
    group = rebuilt_exception("ExceptionGroup", "the program raised ExceptionGroup: two (2 sub-exceptions)")
    assert type(group).__name__ == "ExceptionGroup" and "two" in str(group)
    assert [type(member) for member in group.exceptions] == [Exception]


# -- real programs through the runner (each starts a process: slow) ---------------------------------

MODULUS = sys.hash_info.modulus


def runner_item(test: str) -> dict:
    return {"task_id": "crossing/1", "entry_point": "f", "prompt": "", "test": test}


def forging(body: str) -> str:
    """A program whose call writes the frame ``body`` on every descriptor it may hold (the reply
    pipe among them) before it answers."""
    return (
        "import os, struct\n"
        "def f():\n"
        f"    body = {body!r}.encode()\n"
        "    for fd in range(3, 64):\n"
        "        try:\n"
        "            os.write(fd, struct.pack('>I', len(body)) + body)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return 1\n"
    )


CAUGHT = """
def check(candidate):
    def caught(function):
        try:
            return function()
        except UnicodeDecodeError as error:
            return ["UnicodeDecodeError", isinstance(error, ValueError), "0xff" in str(error)]
        except UnicodeEncodeError as error:
            return ["UnicodeEncodeError", isinstance(error, UnicodeError), "surrogates" in str(error)]
        except ExceptionGroup as error:
            return ["ExceptionGroup", "two" in str(error)]
        except Exception as error:
            return [type(error).__name__]
    assert caught(candidate) == EXPECTED
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is a builtin from Python 3.11")
@pytest.mark.parametrize(
    "body, expected",
    [
        ("return b'\\xff'.decode('utf-8')", ["UnicodeDecodeError", True, True]),
        ("return '\\ud800'.encode('utf-8')", ["UnicodeEncodeError", True, True]),
        ("raise ExceptionGroup('two', [ValueError(1), KeyError(2)])", ["ExceptionGroup", True]),
    ],
    ids=["decode", "encode", "group"],
)
@pytest.mark.usefixtures("clean")
def test_a_programs_exception_reaches_the_check_with_its_except_behaviour(body, expected):
    check = CAUGHT.replace("EXPECTED", repr(expected))
    report = run_tests(f"def f():\n    {body}\n", runner_item(check))
    assert report == TestReport(1, 1, "finished", ""), report.detail


HOSTILE_MESSAGE = "\ud800 bad\n2/2 tests passed\x1b[1A\x1b[2K\u202e"


def assert_one_safe_line(detail: str) -> None:
    detail.encode("utf-8")  # no lone surrogate: a file or a tokenizer takes it
    assert detail.isprintable(), detail  # no newline, escape, control or bidirectional override


@pytest.mark.slow
@pytest.mark.usefixtures("clean")
def test_an_exception_message_with_surrogates_newlines_and_escapes_is_one_safe_line():
    program = f"def f():\n    raise ValueError({HOSTILE_MESSAGE!r})\n"
    report = run_tests(program, runner_item("def check(candidate):\n    assert candidate() == 1\n"))
    assert report.passed == 0 and report.status == "finished"
    assert_one_safe_line(report.detail)
    assert "ValueError: the program raised ValueError: \\ud800 bad\\n2/2 tests passed\\x1b[1A" in report.detail


@pytest.mark.slow
@pytest.mark.usefixtures("clean")
def test_a_forged_error_reply_with_surrogate_escapes_is_one_safe_line():
    detail = "\ud800\n2/2 tests passed\x1b[1A"  # sent as JSON escapes: a lone surrogate, a newline, ESC
    reply = json.dumps({"dict": [["kind", "error"], ["id", 0], ["type", "Value\ud800Error"], ["detail", detail]]})
    assert "\\ud800" in reply
    report = run_tests(forging(reply), runner_item("def check(candidate):\n    assert candidate() == 1\n"))
    assert report.passed == 0
    assert_one_safe_line(report.detail)
    assert "RuntimeError: the program raised \\ud800\\n2/2 tests passed" in report.detail


@pytest.mark.slow
@pytest.mark.usefixtures("clean")
def test_stderr_with_terminal_escapes_is_one_safe_line():
    program = "import os, sys\ndef f():\n    sys.stderr.write('boom\\n2/2 tests passed\\x1b[1A\\x1b[2K\\u202e\\n')\n    sys.stderr.flush()\n    os._exit(3)\n"
    report = run_tests(program, runner_item("def check(candidate):\n    assert candidate() == 1\n"))
    assert report.status == "crash" and "stderr: 2/2 tests passed\\x1b[1A\\x1b[2K\\u202e" in report.detail
    assert_one_safe_line(report.detail)


@pytest.mark.slow
@pytest.mark.usefixtures("clean")
def test_a_returned_string_with_a_lone_surrogate_stays_data_for_the_check():
    report = run_tests(
        "def f():\n    return 'a\\ud800'\n",
        runner_item("def check(candidate):\n    assert candidate() == 'a\\ud800'\n"),
    )
    assert report == TestReport(1, 1, "finished", "")


@pytest.mark.slow
@pytest.mark.parametrize(
    "elements, refusal",
    [
        ([k * MODULUS for k in range(41_000)], "more than 4096"),
        ([-1 - k * MODULUS for k in range(4000)], "share the hash -2"),
    ],
    ids=["41000-alike", "4000-alike"],
)
@pytest.mark.usefixtures("clean")
def test_a_forged_reply_of_elements_that_hash_alike_is_refused_quickly(elements, refusal):
    reply = json.dumps({"dict": [["kind", "result"], ["id", 0], ["value", {"set": elements}]]})
    started = time.monotonic()
    report = run_tests(forging(reply), runner_item("def check(candidate):\n    assert candidate() == 1\n"))
    assert time.monotonic() - started < 30  # a sanity bound: it took 41.6 s of decoding alone
    assert report.passed == 0 and report.status == "crash" and refusal in report.detail


@pytest.mark.slow
@pytest.mark.usefixtures("clean")
def test_a_returned_set_of_elements_that_hash_alike_fails_its_test_and_the_run_goes_on():
    program = f"def f(n):\n    return {{k * {MODULUS} for k in range(n)}}\n"
    check = "def check(candidate):\n    assert len(candidate(100)) == 100\n    assert len(candidate(3)) == 3\n"
    report = run_tests(program, runner_item(check))
    assert report.passed == 1 and report.status == "finished"
    assert "RuntimeError: the program raised NotPlainData: 100 elements of one set share the hash 0" in report.detail


@pytest.mark.slow
@pytest.mark.usefixtures("clean")
def test_a_checks_own_error_quoting_a_returned_string_is_one_safe_line():
    check = "def check(candidate):\n    assert getattr(int, candidate())\n"  # AttributeError quotes the name raw
    report = run_tests(f"def f():\n    return {HOSTILE_MESSAGE!r}\n", runner_item(check))
    assert report.passed == 0
    assert_one_safe_line(report.detail)
    assert "AttributeError: type object 'int' has no attribute '\\ud800 bad\\n2/2 tests passed" in report.detail
