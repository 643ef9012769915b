"""The suite's own conftest.py: a test that starts a process must be marked slow, so the everyday tier starts none."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.slow
def test_a_test_that_starts_a_process_fails_unless_it_is_marked_slow(pytester):
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(
        """
        import multiprocessing
        import os
        import subprocess
        import sys

        import pytest


        def test_starts_a_subprocess():
            subprocess.run([sys.executable, "-c", "pass"], check=True)


        @pytest.fixture
        def helper_process():
            process = multiprocessing.get_context("spawn").Process(target=print)
            process.start()
            process.join()


        def test_a_fixture_starts_one(helper_process):
            pass


        def test_forks():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)


        @pytest.mark.slow
        def test_marked_slow():
            subprocess.run([sys.executable, "-c", "pass"], check=True)


        def test_starts_nothing():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_a_fixture_starts_one started a process (a multiprocessing process): mark it @pytest.mark.slow*",
            "*test_starts_a_subprocess started a process (python*): mark it @pytest.mark.slow*",
            "*test_forks started a process (a forked process): mark it @pytest.mark.slow*",
        ]
    )
