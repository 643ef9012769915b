"""The trainer's side of a program's process, in its pure parts (no process started)."""

from __future__ import annotations

import signal

import pytest

from comlrl_lightning.tasks.coding.child import EXCEPTIONS, LAUNCHER_SOURCE, _exit_reason


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
