"""The test runner against hostile programs: each gets a failing verdict, the run goes on, nothing
outside its folder changes, no process outlives it, the trainer's memory stays bounded.

Every test here starts processes (the programs' interpreters), so the whole module is slow-marked;
the pure parts (the check rewrite, plain data) are tested in the everyday tier beside it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.coding import RunLimits, TestReport, active_isolation, run_tests, run_tests_batch
from comlrl_lightning.tasks.coding.run_cgroup import find_parents, remove_stale_groups
from comlrl_lightning.tasks.coding.sandbox import processes_of, remove_stale_folders, spare_uid

pytestmark = pytest.mark.slow


def item(test: str, entry_point: str = "f", prompt: str = "") -> dict:
    return {"task_id": "hostile/1", "entry_point": entry_point, "prompt": prompt, "test": test}


ADD = item("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n", "add")
RIGHT = "def add(a, b):\n    return a + b\n"


def runner_processes() -> list:
    """Live processes of this test process's runs: by the launcher's command line, and (as root) by
    the runs' spare uids (a process that exec'd something else keeps its uid)."""
    me = str(os.getpid()).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"comlrl-test-runner" in args and me in args and state not in ("Z", "X"):
            found.append(int(entry))
    if os.geteuid() == 0:
        base = spare_uid(0)  # this process's claimed block
        for uid in range(base, base + 8):
            found += processes_of(uid)
    return found


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def run_cgroups() -> list:
    """This process's runs' cgroups that are still there."""
    parents = find_parents()
    if parents is None:
        return []
    return [
        group
        for parent in (parents.memory, parents.pids)
        if parent
        for group in parent.glob(f"comlrl-test-run-{os.getpid()}-*")
    ]


@pytest.fixture
def clean():
    """After the test: no process of the runs is left, no run folder and no run cgroup. This process's
    only (a run folder is named by its trainer's pid): another trainer's runs on the machine, such as
    the other test worker's, are not this test's."""
    folders, mine = Path(tempfile.gettempdir()), f"comlrl-test-run-{os.getpid()}-*"
    before = set(folders.glob(mine))
    yield
    assert runner_processes() == []
    assert set(folders.glob(mine)) - before == set()
    assert run_cgroups() == []


def assert_goes_on():
    assert run_tests(RIGHT, ADD) == TestReport(2, 2, "finished", "")


def test_a_right_program_passes_and_a_wrong_one_fails_with_its_first_failing_test(clean):
    assert run_tests(RIGHT, ADD) == TestReport(2, 2, "finished", "")
    report = run_tests("def add(a, b):\n    return a * b\n", ADD)
    assert (report.passed, report.total, report.status) == (1, 2, "finished")
    assert report.detail.startswith("line 2: candidate(1, 2) == 3") and report.fraction == 0.5


@pytest.mark.parametrize(
    "program, status",
    [
        ("def add(a, b) return", "syntax_error"),
        ("def plus(a, b):\n    return a + b\n", "missing_entry_point"),
        ("add = 3\n", "missing_entry_point"),
        ("import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b\n", "crash"),
        ("import os\nos._exit(0)\ndef add(a, b):\n    return a + b\n", "crash"),
        ("import ctypes\nctypes.string_at(0)\n", "crash"),  # a segfault
    ],
)
def test_a_program_that_does_not_parse_lacks_its_function_or_exits_first_fails(clean, program, status):
    report = run_tests(program, ADD)
    assert (report.passed, report.total, report.status) == (0, 2, status)
    assert_goes_on()


def test_an_exit_or_os_exit_inside_a_call_fails_that_call_and_every_later_one(clean):
    exits = "import sys\ndef add(a, b):\n    if a == 2:\n        sys.exit(0)\n    return a + b\n"
    report = run_tests(exits, ADD)
    assert (report.passed, report.status) == (1, "finished") and "SystemExit" in report.detail
    dies = "import os\ndef add(a, b):\n    os._exit(0)\n"
    report = run_tests(dies, ADD)
    assert (report.passed, report.status) == (0, "crash") and "exited (code 0)" in report.detail


@pytest.mark.parametrize(
    "program",
    [
        "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Yes()\n",
        "class Three(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Three(3)\n",
        "class P:\n    def __reduce__(self):\n        return (int, (3,))\ndef add(a, b):\n    return P()\n",
    ],
    ids=["always-equal", "int-subclass", "pickle-reduce"],
)
def test_a_value_that_is_not_plain_data_fails_however_it_compares(clean, program):
    report = run_tests(program, ADD)
    assert (report.passed, report.status) == (0, "finished") and "not plain data" in report.detail


def test_walking_the_frames_finds_no_harness_and_no_verdict(clean):
    program = """
import sys, gc
def add(a, b):
    frame, seen = sys._getframe(), []
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items()):
                if isinstance(value, list) and name in ("result", "results", "outcome", "held"):
                    value[:] = ["passed"] * 100
                seen.append(name)
        frame = frame.f_back
    for thing in gc.get_objects():
        if type(thing).__name__ in ("CheckOutcome", "TestReport"):
            thing.held = [True] * 100
    return "walked"
"""
    assert run_tests(program, ADD).passed == 0


def test_patching_builtins_signal_and_reloading_os_change_only_the_program(clean):
    program = """
import builtins, importlib, os, signal
builtins.bool = lambda value: True
builtins.AssertionError = Exception
builtins.isinstance = lambda *args: True
signal.alarm(0)
signal.signal(signal.SIGALRM, signal.SIG_IGN)
importlib.reload(os)
def add(a, b):
    os.kill(os.getppid(), 9) if os.getppid() > 1 else None
    return -1
"""
    report = run_tests(program, ADD)
    assert report.passed == 0 and report.status in ("finished", "crash")
    assert bool(0) is False and isinstance(1, str) is False  # this process's builtins untouched
    assert_goes_on()


@pytest.mark.parametrize(
    "body",
    [
        "while True:\n        pass",
        "import signal\n    signal.alarm(0)\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass",
        "return sum(range(10**12))",
        "import re\n    return bool(re.match(r'(a+)+$', 'a' * 64 + 'b'))",
    ],
    ids=["busy-loop", "alarm-cancelled", "c-level-sum", "catastrophic-regex"],
)
def test_a_program_that_never_returns_is_stopped_at_the_wall_clock_limit(clean, body):
    started = time.monotonic()
    report = run_tests(f"def add(a, b):\n    {body}\n", ADD, timeout=2.0)
    assert time.monotonic() - started < 6.0
    assert (report.passed, report.status) == (0, "timeout")
    assert_goes_on()


def test_a_double_forked_process_does_not_outlive_the_run(clean):
    program = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
def add(a, b):
    return a + b
"""
    assert run_tests(program, ADD).passed == 2
    # the clean fixture checks that nothing of the run is left


def test_a_fork_bomb_is_bounded_and_ended(clean):
    program = "import os\ndef add(a, b):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
    report = run_tests(program, ADD, timeout=3.0)
    assert report.passed == 0 and report.status in ("timeout", "crash")
    counting = """
import os, time
def f():
    forks = 0
    while forks < 1000:
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
        except OSError:
            return forks
        forks += 1
    return forks
"""
    bounded = f"def check(candidate):\n    assert candidate() <= {RunLimits().processes}\n"
    assert run_tests(counting, item(bounded), timeout=5.0).passed == 1  # RLIMIT_NPROC holds
    assert_goes_on()


def test_output_below_the_cap_is_drained_while_the_calls_go_on(clean):
    program = "import sys\ndef add(a, b):\n    print('o' * 200_000)\n    print('e' * 200_000, file=sys.stderr)\n    return a + b\n"
    assert run_tests(program, ADD) == TestReport(2, 2, "finished", "")  # 800 kB through 64 kB pipes


def test_floods_and_memory_bombs_fail_and_the_trainers_memory_stays_bounded(clean):
    before = rss_bytes()
    flood = run_tests("def add(a, b):\n    while True:\n        print('x' * 65536)\n", ADD)
    assert (flood.passed, flood.status) == (0, "output_limit")
    huge_reply = run_tests("def add(a, b):\n    return 'x' * 50_000_000\n", ADD)
    assert (huge_reply.passed, huge_reply.status) == (0, "output_limit")
    bomb = run_tests("def add(a, b):\n    return len(bytearray(8 * 1024**3))\n", ADD)
    assert (bomb.passed, bomb.status) == (0, "memory")
    top_bomb = run_tests("x = [0] * 2**31\ndef add(a, b):\n    return a + b\n", ADD)
    assert (top_bomb.passed, top_bomb.status) == (0, "memory")
    big_file = run_tests("def add(a, b):\n    open('big', 'wb').write(bytes(64 << 20))\n", ADD)
    assert big_file.passed == 0 and "File too large" in big_file.detail  # RLIMIT_FSIZE (Python ignores SIGXFSZ)
    assert rss_bytes() - before < 64 << 20
    assert_goes_on()


def test_the_program_sees_none_of_the_trainers_environment(clean, monkeypatch):
    monkeypatch.setenv("COMLRL_TEST_SECRET_TOKEN", "hf_secret")
    check = "def check(candidate):\n    assert 'hf_secret' in candidate()\n    assert 'COMLRL_TEST_SECRET_TOKEN' in candidate()\n"
    leak = "import os\ndef f():\n    return ' '.join(f'{k}={v}' for k, v in os.environ.items())\n"
    assert run_tests(leak, item(check)).passed == 0
    only_ours = "def check(candidate):\n    assert set(candidate()) <= {'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS', 'NUMEXPR_NUM_THREADS', 'LC_CTYPE'}\n"
    assert run_tests("import os\ndef f():\n    return sorted(os.environ)\n", item(only_ours)).passed == 1


def test_nothing_outside_the_programs_folder_changes(clean, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    tmp_path.chmod(0o755)
    open_file, owned_file = shared / "world-writable.txt", tmp_path / "owned.txt"
    open_file.write_text("before")
    open_file.chmod(0o666)
    owned_file.write_text("before")
    program = f"""
import os
def f():
    done = []
    for path in ({str(open_file)!r}, {str(owned_file)!r}, {str(shared / "new.txt")!r}, "/tmp/comlrl-escape.txt"):
        try:
            with open(path, "w") as handle:
                handle.write("after")
            done.append(path)
        except OSError:
            pass
    with open("mine.txt", "w") as handle:  # its own folder is writable
        handle.write("mine")
    return done
"""
    check = "def check(candidate):\n    assert candidate() != []\n"
    layers = active_isolation()
    report = run_tests(program, item(check))
    assert owned_file.read_text() == "before" or not (layers["spare_uid"] or layers["landlock"])
    if not layers["landlock"]:
        pytest.skip("no Landlock on this machine: a world-writable file outside the folder is writable")
    assert report.passed == 0 and report.status == "finished"
    assert open_file.read_text() == "before" and not (shared / "new.txt").exists()
    assert not Path("/tmp/comlrl-escape.txt").exists()


def test_no_network_not_even_loopback(clean):
    layers = active_isolation()
    if not (layers["network_namespace"] or layers["landlock_network"]):
        pytest.skip("no network layer on this machine (neither a network namespace nor Landlock's)")
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port, connected = server.getsockname()[1], []

    def accept():
        try:
            connection, _ = server.accept()
            connected.append(True)
            connection.sendall(b"42")
            connection.close()
        except OSError:
            pass

    listener = threading.Thread(target=accept)
    listener.start()
    program = f"import socket\ndef f():\n    return socket.create_connection(('127.0.0.1', {port}), timeout=1).recv(2).decode()\n"
    report = run_tests(program, item("def check(candidate):\n    assert candidate() == '42'\n"))
    listener.join()
    server.close()
    assert report.passed == 0 and connected == []


def test_forged_messages_on_every_descriptor_are_not_a_verdict(clean):
    program = """
import json, os, struct, sys
for fd in range(1, 300):
    for message in ({"dict": [["kind", "ready"], ["layers", {"dict": []}]]}, {"dict": [["kind", "result"], ["id", 0], ["value", 3]]}):
        body = json.dumps(message).encode()
        try:
            os.write(fd, struct.pack(">I", len(body)) + body)
        except OSError:
            pass
def add(a, b):
    return 0
"""
    report = run_tests(program, ADD)
    assert report.passed <= 1  # at most the forged answer to the first call, which is the right one to give
    assert report.status in ("finished", "crash")
    assert_goes_on()


def test_one_programs_timeout_never_holds_up_the_others(clean):
    programs = ["def add(a, b):\n    while True:\n        pass\n"] + [RIGHT] * 6
    started = time.monotonic()
    reports = run_tests_batch(programs, [ADD] * len(programs), timeout=3.0, workers=2)
    assert time.monotonic() - started < 3.0 + 5.0
    assert [r.status for r in reports] == ["timeout"] + ["finished"] * 6
    assert [r.passed for r in reports] == [0] + [2] * 6


def test_the_layers_found_here_are_reported_and_numpy_imports_under_the_limits(clean):
    layers = active_isolation()
    assert set(layers) >= {"spare_uid", "user_namespace", "network_namespace", "pid_namespace", "landlock"}
    program = "import numpy as np\ndef add(a, b):\n    return int(np.add(a, b))\n"
    assert run_tests(program, ADD).passed == 2


def test_a_bad_item_or_argument_is_an_error_before_any_process_starts():
    with pytest.raises(DataError, match="hostile/1"):
        run_tests(RIGHT, item("def check(candidate):\n    assert True\n"))
    with pytest.raises(DataError, match="hostile/1"):
        run_tests_batch([RIGHT, RIGHT], [ADD, item("def check(:")])
    with pytest.raises(TypeError, match="must be a str"):
        run_tests(b"def add(a, b): pass", ADD)
    with pytest.raises(ValueError, match="2 programs for 1 items"):
        run_tests_batch([RIGHT, RIGHT], [ADD])
    with pytest.raises(ValueError, match="address_space_bytes"):
        RunLimits(address_space_bytes=0)


def test_when_the_trainer_dies_its_runs_die_with_it(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(
        "from comlrl_lightning.tasks.coding import run_tests\n"
        "item = {'task_id': 't', 'entry_point': 'f', 'test': 'def check(c):\\n    assert c() == 1\\n'}\n"
        "print('started', flush=True)\n"
        "run_tests('import os, time\\nif os.fork() == 0:\\n    time.sleep(120)\\ndef f():\\n    time.sleep(120)\\n', item, timeout=120)\n"
    )
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    assert trainer.stdout.readline().strip() == b"started"
    marker = str(trainer.pid).encode()

    def launched():
        found = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if b"comlrl-test-runner" in args and marker in args and state != "Z":
                found.append(entry)
        return found

    deadline = time.monotonic() + 60.0  # the trainer first detects the layers with a probe
    while len(launched()) < 3 and time.monotonic() < deadline:  # the launcher, the program, its fork
        time.sleep(0.1)
    assert len(launched()) >= 3, "the trainer's run did not start"
    trainer.kill()
    trainer.wait()
    deadline = time.monotonic() + 5.0
    while launched() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert launched() == []
    left = list(Path(tempfile.gettempdir()).glob(f"comlrl-test-run-{trainer.pid}-*"))
    assert left and set(remove_stale_folders()) >= set(left)  # a killed trainer leaves its folder: the next removes it
    assert not any(folder.exists() for folder in left)
    parents = find_parents()  # and its run's cgroup, where there is one
    if parents is not None:
        groups = [
            folder
            for parent in (parents.memory, parents.pids)
            if parent
            for folder in parent.glob(f"comlrl-test-run-{trainer.pid}-*")
        ]
        assert groups and set(remove_stale_groups(parents)) >= set(groups)
        assert not any(folder.exists() for folder in groups)


DEEP_TREE = """
def total(xs):
    import os

    os.symlink("/etc/passwd", "to-passwd")  # removed as a link, never followed
    for _ in range(1500):
        os.mkdir("d")
        os.chdir("d")
    os.mkdir("closed")
    os.chmod("closed", 0o000)
    os.chmod(".", 0o500)
    return sum(xs)
"""


def test_a_deep_read_only_tree_a_program_leaves_is_removed_and_the_reward_does_not_raise(clean):
    from comlrl_lightning.tasks.coding import CooperativeCodeReward

    item = {
        "task_id": "hostile/deep",
        "prompt": "def total(xs):\n",
        "entry_point": "total",
        "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n",
    }
    passwd = Path("/etc/passwd").stat()
    reward = CooperativeCodeReward(timeout=30.0)([""], [f"```python\n{DEEP_TREE}\n```"], batch_items=[item])
    assert reward == [0.6 + 0.5 + 1.0]  # the entry point, parses, every test
    assert Path("/etc/passwd").stat().st_mtime == passwd.st_mtime
    # the clean fixture checks that the run's folder is gone


def test_the_memory_layer_is_the_machines_cgroup_or_one_process(clean):
    assert active_isolation()["memory_cgroup"] == (find_parents() is not None)


FORKS_TOUCHING = """
import os, time
def f(children, megabytes):
    ready, pids = [], []
    for _ in range(children):
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            block = b"x" * (megabytes << 20)
            os.write(write, b"1")
            time.sleep(60)
        os.close(write)
        ready.append(read)
        pids.append(pid)
    reported = [len(os.read(fd, 1)) for fd in ready]  # each child has written its byte or died
    alive = [os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in pids]
    return sum(r and a for r, a in zip(reported, alive))  # the children holding their memory now
"""


def test_a_runs_processes_together_stay_within_its_memory(clean):
    """Three processes of 150 MB each against a run limit of 256 MiB: with the cgroup at most one
    holds its memory (the others are killed), without it no process may start at all. Counted once
    every child has allocated or died: a child that allocated before another was killed may be
    killed for the next one, so how many ever allocated is no measure (under load it reached 2)."""
    check = "def check(candidate):\n    assert candidate(3, 150) <= 1\n"
    report = run_tests(FORKS_TOUCHING, item(check), timeout=20.0, limits=RunLimits(memory_bytes=256 << 20))
    assert (report.passed, report.status) == (1, "finished")
    assert_goes_on()


def test_memfd_pages_past_the_runs_memory_are_a_memory_stop(clean):
    if not active_isolation()["memory_cgroup"]:
        pytest.skip("no writable cgroup on this machine: memfd pages are bounded by file size x open files")
    fills = "import os\ndef add(a, b):\n    while True:\n        fd = os.memfd_create('m')\n        os.write(fd, b'x' * (15 << 20))\n"
    report = run_tests(fills, ADD, limits=RunLimits(memory_bytes=128 << 20))
    assert (report.passed, report.status) == (0, "memory") and "128 MiB" in report.detail
    assert_goes_on()


def test_without_the_cgroup_a_program_may_start_no_process(clean):
    from comlrl_lightning.tasks.coding.runner import _layers_off_for_measurement

    check = "def check(candidate):\n    assert candidate(1, 1) == 1\n"
    with _layers_off_for_measurement("memory_cgroup"):
        report = run_tests(FORKS_TOUCHING, item(check))
    assert (report.passed, report.status) == (0, "finished")  # its one fork failed
    assert run_tests(FORKS_TOUCHING, item(check)).passed == int(active_isolation()["memory_cgroup"])
