"""The trainer's side of one program's process: start it, call its entry point, end it.

:class:`ChildProcess` starts the launcher (compiled here once, passed as an argument) in a fresh
interpreter (``python -I -S -B``, an empty environment, stdin from ``/dev/null``, a new session, an
empty private folder as its working directory), sends it the program and its configuration, and then turns each call of ``candidate``
into a request on the request pipe and waits for the reply on the reply pipe, draining stdout and
stderr all the while (one thread, one selector, one deadline for the whole run). Whatever the
child sends is decoded as plain data and checked for its shape; anything else ends the run. On any
end — a reply over its size, output over its cap, the wall-clock deadline, an exit — the whole
process group is killed, and as root every process of the run's uid.
"""

from __future__ import annotations

import builtins
import marshal
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, Optional, Tuple, Type

from comlrl_lightning.runtime.text import one_line_text
from comlrl_lightning.runtime.tree_removal import remove_tree
from comlrl_lightning.tasks.coding import launcher, plain_data
from comlrl_lightning.tasks.coding.plain_data import HEADER, NotPlainData
from comlrl_lightning.tasks.coding.sandbox import RunLimits, end_processes_of, environment, readable_paths, run_folder


def _source_of(module: ModuleType) -> str:
    if module.__file__ is None:
        raise ImportError(f"{module.__name__} has no source file for the launcher")
    return Path(module.__file__).read_text(encoding="utf-8")


LAUNCHER_SOURCE = "\n".join(_source_of(module) for module in (plain_data, launcher))
"""What the fresh interpreter runs: plain_data's source, then the launcher's."""
LAUNCHER_CODE = marshal.dumps(compile(LAUNCHER_SOURCE, "<comlrl-test-runner>", "exec", dont_inherit=True)).hex()
"""That source compiled once here, for this same interpreter (a fresh interpreter spends about 6 ms
compiling it): the command's last argument, which the stub below removes from ``sys.argv`` and runs."""
LAUNCHER_STUB = "import marshal, sys; exec(marshal.loads(bytes.fromhex(sys.argv.pop())))"

STOP_STATUSES = ("syntax_error", "missing_entry_point", "memory", "crash")
"""The statuses a child may report about its own program (anything else it claims is a crash)."""

EXCEPTIONS = {
    name: value
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception) and value not in (StopIteration, StopAsyncIteration)
}
"""Builtin exceptions a failed call is raised as in the trainer, by name (so a check may expect one)."""

DETAIL_CHARS = 300


def _message_only(kind: Type[UnicodeError], placeholders: Tuple[Any, ...]) -> Type[UnicodeError]:
    """A subclass of ``kind`` (whose constructor wants the failing text and positions, which stay in
    the program's process), made from a message alone and showing it; it keeps ``kind``'s name."""

    def __init__(self: UnicodeError, message: str) -> None:
        kind.__init__(self, *placeholders, message)  # the message is the ``reason`` field

    def __str__(self: UnicodeError) -> str:
        return str(getattr(self, "reason", ""))

    namespace = {"__init__": __init__, "__str__": __str__, "__module__": __name__, "__doc__": _message_only.__doc__}
    return type(kind.__name__, (kind,), namespace)


REBUILT = {
    "UnicodeDecodeError": _message_only(UnicodeDecodeError, ("utf-8", b"", 0, 0)),
    "UnicodeEncodeError": _message_only(UnicodeEncodeError, ("utf-8", "", 0, 0)),
    "UnicodeTranslateError": _message_only(UnicodeTranslateError, ("", 0, 0)),
}
"""The builtin exceptions whose constructor takes more than a message, rebuilt from one."""


def rebuilt_exception(name: str, message: str) -> Exception:
    """The exception a failed call raises in the trainer for a program's exception named ``name``.

    A builtin exception is rebuilt as itself with ``message`` (so ``except ValueError`` in a check
    still catches it); ``UnicodeDecodeError``, ``UnicodeEncodeError`` and ``UnicodeTranslateError``
    as a subclass of theirs (:data:`REBUILT`: every ``except`` that caught the program's catches it);
    an ``ExceptionGroup`` as an ``ExceptionGroup`` holding one ``Exception`` with ``message`` (its
    members stay in the program's process: ``except ExceptionGroup`` and ``except* Exception`` catch
    it, ``except* ValueError`` does not); any other name, or a builtin that cannot be built from a
    message, as a ``RuntimeError``. Never the ``TypeError`` of a constructor called wrongly.
    """
    kind = EXCEPTIONS.get(name)
    if name in REBUILT:
        return REBUILT[name](message)
    if name == "ExceptionGroup" and kind is not None:  # a builtin from Python 3.11 on
        return kind(message, [Exception(message)])
    if kind is None:
        return RuntimeError(message)
    try:
        return kind(message)
    except Exception:  # a builtin constructor that wants more than a message
        return RuntimeError(message)


class ChildStopped(Exception):
    """The program's process has ended (or was ended): every further call fails with this."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def _text(value: Any, limit: int = DETAIL_CHARS) -> str:
    """A text field of the child's message as one safe line (:func:`one_line_text`), else ``""``."""
    return one_line_text(value, limit) if isinstance(value, str) else ""


def _exit_reason(code: Optional[int]) -> Tuple[str, str]:
    """A launcher's exit code (the program's, 128 + a signal's number) as a status and detail."""
    if code is None:
        return "crash", "the program closed its reply pipe"
    signals: Dict[int, Tuple[str, str]] = {
        signal.SIGXCPU: ("timeout", "CPU time limit"),
        signal.SIGXFSZ: ("output_limit", "file size limit"),
    }
    if code > 128 and code - 128 in signals:
        return signals[code - 128]
    if code > 128:
        try:
            return "crash", f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            return "crash", f"killed by signal {code - 128}"
    return "crash", f"the program exited (code {code})"


class ChildProcess:
    """One program in its own process, ``candidate`` for its entry point (see the module docstring)."""

    def __init__(self, program: str, entry_point: str, timeout: float, limits: RunLimits, isolation: Dict) -> None:
        self.program, self.entry_point, self.timeout, self.limits = program, entry_point, timeout, limits
        self.uid: Optional[int] = isolation["uid"]
        self.layers: Dict[str, bool] = dict(isolation["layers"])
        self.required: Dict[str, bool] = dict(isolation["required"])
        self.deadline = time.monotonic() + timeout
        self.stopped: Optional[ChildStopped] = None
        self.reported_layers: Dict[str, bool] = {}
        self.memory_error = False
        self.output = 0
        self.stderr_tail = b""
        self.buffer = b""
        self.calls = 0
        self.process: Optional[subprocess.Popen] = None
        self.root = run_folder()

    # -- start ----------------------------------------------------------------------------------

    def _config(self, work: Path) -> Dict[str, Any]:
        paths = readable_paths(self.limits.packages)
        return {
            "program": self.program,
            "entry_point": self.entry_point,
            "limits": self.limits.resource_limits(self.timeout),
            "uid": self.uid,
            "work": [str(work)],
            "packages_dir": str(self.root / "packages"),
            "path": list(paths["path"]),
            "reads": list(paths["reads"]),
            "listings": list(paths["listings"]) + [str(self.root / "packages")],
            "files": list(paths["files"]),
            "devices": list(paths["devices"]),
            "packages": [list(pair) for pair in paths["packages"]],
            "layers": self.layers,
            "required": self.required,
        }

    def start(self) -> None:
        """Start the launcher and send it its configuration; then wait until the program is ready."""
        work = self.root / "work"
        work.mkdir(mode=0o700)
        if self.uid is not None:
            os.chmod(self.root, 0o711)
            os.chown(work, self.uid, self.uid)
        request_read, self.requests = os.pipe()
        self.replies, reply_write = os.pipe()
        command = [sys.executable, "-I", "-S", "-B", "-c", LAUNCHER_STUB, "comlrl-test-runner", str(os.getpid())]
        try:
            self.process = subprocess.Popen(
                [*command, str(request_read), str(reply_write), LAUNCHER_CODE],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(request_read, reply_write),
                cwd=work,
                env=environment(),
                start_new_session=True,
            )
        finally:
            os.close(request_read)
            os.close(reply_write)
        os.set_blocking(self.requests, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.replies, selectors.EVENT_READ, "reply")
        stdout, stderr = self.process.stdout, self.process.stderr
        assert stdout is not None and stderr is not None  # both are pipes (PIPE above)
        self.selector.register(stdout, selectors.EVENT_READ, "output")
        self.selector.register(stderr, selectors.EVENT_READ, "stderr")
        self._send(plain_data.frame(self._config(work)))
        self._ready()

    def _ready(self) -> None:
        message = self._receive()
        kind = message.get("kind")
        if kind == "ready" and isinstance(message.get("layers"), dict):
            layers = message["layers"]
            self.reported_layers = {str(k)[:40]: v is True for k, v in list(layers.items())[:16]}
            return
        if kind == "stopped":
            reported = message.get("status")
            status = reported if isinstance(reported, str) and reported in STOP_STATUSES else "crash"
            self._stop(status, _text(message.get("detail")) or status)
        if kind == "setup_error":
            self._stop("crash", "the runner's setup failed: " + _text(message.get("detail")))
        self._stop("crash", "protocol violation: an unexpected first message")

    # -- calls ----------------------------------------------------------------------------------

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Call the program's entry point with plain-data arguments; its plain-data return value."""
        if self.stopped is not None:
            raise self.stopped
        try:
            request = plain_data.frame([self.calls, list(args), kwargs])
        except NotPlainData as error:
            raise TypeError(f"an argument for the program is not plain data: {error}") from None
        self._send(request)
        message = self._receive()
        if message.get("id") != self.calls or message.get("kind") not in ("result", "error"):
            self._stop("crash", "protocol violation: a reply that does not answer the call")
        self.calls += 1
        if message["kind"] == "result":
            return message.get("value")
        name, detail = _text(message.get("type"), 60), _text(message.get("detail"))
        if name == "MemoryError":
            self.memory_error = True
        raise rebuilt_exception(name, f"the program raised {detail or name}")

    __call__ = call

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.requests, view) :]
            except BlockingIOError:
                self.selector.register(self.requests, selectors.EVENT_WRITE, "request")
                try:
                    self._wait()
                finally:
                    self.selector.unregister(self.requests)
            except BrokenPipeError:
                self._finish_after_exit()

    def _receive(self) -> Dict[str, Any]:
        """The next message (a dict) from the reply pipe, draining output until it is complete."""
        while True:
            if len(self.buffer) >= HEADER.size:
                size = HEADER.unpack(self.buffer[: HEADER.size])[0]
                if size > self.limits.message_bytes:
                    self._stop("output_limit", f"a reply of {size} bytes (over {self.limits.message_bytes})")
                if len(self.buffer) >= HEADER.size + size:
                    body = self.buffer[HEADER.size : HEADER.size + size]
                    self.buffer = self.buffer[HEADER.size + size :]
                    try:
                        message = plain_data.decode(body)
                    except NotPlainData as error:
                        self._stop("crash", f"protocol violation: {error}")
                    if not isinstance(message, dict):
                        self._stop("crash", "protocol violation: a message that is not a dict")
                    return message
            self._wait()

    def _wait(self) -> None:
        """Wait for the child once: read what arrived (reply bytes, output), or stop at the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._stop("timeout", f"over the {self.timeout:g} s wall-clock limit")
        for key, _ in self.selector.select(left):
            if key.data == "request":
                continue
            data = os.read(key.fd, 1 << 16)
            if key.data == "reply":
                if not data:
                    self._finish_after_exit()
                self.buffer += data
                continue
            if not data:
                self.selector.unregister(key.fileobj)
                continue
            self.output += len(data)
            if key.data == "stderr":
                self.stderr_tail = (self.stderr_tail + data)[-DETAIL_CHARS:]
            if self.output > self.limits.output_bytes:
                self._stop("output_limit", f"over {self.limits.output_bytes} bytes of output")

    # -- the end --------------------------------------------------------------------------------

    def _finish_after_exit(self) -> None:
        assert self.process is not None  # the launcher exited: it was started
        code = None
        try:
            code = self.process.wait(timeout=max(0.0, min(1.0, self.deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pass
        status, detail = _exit_reason(code)
        self._read_stderr_left()
        tail = self.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        self._stop(status, detail + (f"; stderr: {tail[-1][:160]}" if tail else ""))

    def _read_stderr_left(self) -> None:
        """Read what the stderr pipe already holds, without waiting for more (bounded by the output limit).

        Why: one wait can see the reply pipe's end before the stderr bytes the program wrote just before it
        exited (the selector lists ready pipes in its own order), and the detail quotes the last line."""
        assert self.process is not None and self.process.stderr is not None
        fd = self.process.stderr.fileno()
        with selectors.DefaultSelector() as ready:
            ready.register(fd, selectors.EVENT_READ)
            while self.output <= self.limits.output_bytes and ready.select(0):
                data = os.read(fd, 1 << 16)
                if not data:
                    return
                self.output += len(data)
                self.stderr_tail = (self.stderr_tail + data)[-DETAIL_CHARS:]

    def _stop(self, status: str, detail: str) -> None:
        self.stopped = ChildStopped(status, one_line_text(detail, DETAIL_CHARS))
        self._kill()
        raise self.stopped

    def _kill(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.uid is not None:
            end_processes_of(self.uid)

    def close(self) -> None:
        """End every process of the run, reap the launcher, close the pipes, remove the folder.

        A run still going is first asked to end (its request pipe closed: the program's process
        exits, the launcher reaps it and exits), then killed all the same."""
        if self.process is not None and self.stopped is None:
            os.close(self.requests)
            self.requests = -1
            try:
                self.process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        if self.process is not None:
            self.process.wait()
            self.selector.close()
            for pipe in (self.process.stdout, self.process.stderr):
                if pipe is not None:  # both are pipes (start)
                    pipe.close()
            for fd in (self.requests, self.replies):
                if fd >= 0:
                    os.close(fd)
        remove_tree(self.root)  # whatever the program left (deep, read-only, links): never raises
