"""Real HTTP servers on 127.0.0.1 that speak the providers' wire formats, with scripted faults.

``FakeProvider(fmt)`` answers POSTs the way OpenAI chat completions, Anthropic messages, OpenAI
responses or a generic service would (response shapes copied from the providers' documented
answers), records every request (path, headers, JSON body), and can be told to misbehave for the
next requests (:meth:`FakeProvider.fail_next`) or for all of them (``always``). Completion texts
are a deterministic function of the prompt and the candidate index, so two runs against the
server collect the same candidates.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

PATHS = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "openai_responses": "/v1/responses",
    "generic": "/generate",
}
LETTERS = "aeioubcdfgklmnrst"


def fake_text(prompt: str, index: int) -> str:
    """A short deterministic completion (vowels and consonants, so the toy reward varies)."""
    digest = hashlib.sha256(f"{prompt}|{index}".encode()).digest()
    return "".join(LETTERS[b % len(LETTERS)] for b in digest[: 1 + digest[-1] % 6])


@dataclass
class Fault:
    """One scripted answer instead of the normal one."""

    status: int = 200
    body: Optional[bytes] = None  # raw body (default: a JSON error object)
    payload: Any = None  # a JSON answer with status 200
    headers: Dict[str, str] = field(default_factory=dict)
    hang: bool = False  # never answer (the client must time out)
    drip: float = 0.0  # seconds between single bytes of the answer (a slow-loris server)
    gzip: bool = False  # send the body gzip-compressed with Content-Encoding: gzip (e.g. a decompression bomb)


@dataclass
class Recorded:
    path: str
    headers: Dict[str, str]  # lower-case names
    body: Any


class FakeProvider:
    """A threaded HTTP server speaking ``fmt``; use as a context manager.

    Args:
        fmt: ``openai``, ``anthropic``, ``openai_responses`` or ``generic``.
        text: completion text of ``(prompt, candidate index)``.
        max_choices: OpenAI chat returns at most this many choices whatever ``n`` asks (``None``: n).
        generic_shape: builds the generic answer from the list of texts.
    """

    def __init__(
        self,
        fmt: str,
        text: Callable[[str, int], str] = fake_text,
        max_choices: Optional[int] = None,
        generic_shape: Callable[[List[str]], Any] = lambda texts: {"completions": texts},
    ) -> None:
        self.fmt, self.text, self.max_choices, self.generic_shape = fmt, text, max_choices, generic_shape
        self.requests: List[Recorded] = []
        self.faults: deque = deque()
        self.always: Optional[Fault] = None
        self.lock = threading.Lock()
        self.released = threading.Event()
        self._counters: Dict[str, int] = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                status, payload, headers, hang, drip = provider.handle(
                    Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if hang:
                    provider.released.wait(10)
                    self.close_connection = True
                    return
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    if not drip:
                        self.wfile.write(payload)
                    for index in range(len(payload) if drip else 0):
                        if provider.released.wait(drip):
                            break
                        self.wfile.write(payload[index : index + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up, as it should
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{PATHS[self.fmt]}"

    def __enter__(self) -> "FakeProvider":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, *faults: Fault) -> None:
        with self.lock:
            self.faults.extend(faults)

    def bodies(self) -> List[Any]:
        return [r.body for r in self.requests]

    # ------------------------------------------------------------------------------------------

    def handle(self, request: Recorded) -> tuple:
        with self.lock:
            self.requests.append(request)
            fault = self.faults.popleft() if self.faults else self.always
        if fault is not None:
            if fault.hang:
                return 0, b"", {}, True, 0.0
            status, headers = (200 if fault.payload is not None else fault.status), dict(fault.headers)
            body = json.dumps(fault.payload).encode() if fault.payload is not None else fault.body
            if body is None:
                body = json.dumps({"error": {"message": f"scripted HTTP {fault.status}", "type": "test"}}).encode()
            if fault.gzip:
                body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
            return status, body, headers, False, fault.drip
        return 200, json.dumps(self.answer(request.body)).encode(), {}, False, 0.0

    def _next_index(self, prompt: str) -> int:
        # one-candidate formats repeat identical requests: number them per prompt
        with self.lock:
            index = self._counters.get(prompt, 0)
            self._counters[prompt] = index + 1
        return index

    def answer(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """The provider's normal answer, in its documented shape."""
        created = int(time.time())
        if self.fmt == "openai":
            prompt = body["messages"][-1]["content"]
            n = body.get("n", 1) if self.max_choices is None else min(body.get("n", 1), self.max_choices)
            return {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": created,
                "model": body.get("model"),
                "choices": [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": self.text(prompt, i), "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                    for i in range(n)
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5 * n, "total_tokens": 10 + 5 * n},
                "system_fingerprint": "fp_test",
            }
        if self.fmt == "anthropic":
            prompt = body["messages"][-1]["content"]
            return {
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [
                    {"type": "thinking", "thinking": "let me think", "signature": "sig"},
                    {"type": "text", "text": self.text(prompt, self._next_index(prompt))},
                    {"type": "text", "text": "a second block that is ignored"},
                ],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        if self.fmt == "openai_responses":
            prompt = body["input"]
            return {
                "id": "resp_test",
                "object": "response",
                "created_at": created,
                "status": "completed",
                "model": body.get("model"),
                "output": [
                    {"type": "reasoning", "id": "rs_test", "summary": []},
                    {
                        "type": "message",
                        "id": "msg_test",
                        "status": "completed",
                        "role": "assistant",
                        "content": [
                            {
                                "type": "output_text",
                                "text": self.text(prompt, self._next_index(prompt)),
                                "annotations": [],
                            }
                        ],
                    },
                ],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            }
        texts = [self.text(body["prompt"], i) for i in range(body["num_return_sequences"])]
        return self.generic_shape(texts)
