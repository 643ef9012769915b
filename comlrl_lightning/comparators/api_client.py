"""HTTP transport of the API comparator: headers and key, retries with backoff, bounded concurrency.

The key is read from the environment variable named by the comparator's ``key_env`` each time headers
are built and lives only in those per-request headers: it is never an attribute of any object, so
it cannot reach ``config.yaml``, ``hparams``, checkpoints, logs or ``repr``. Error messages quote
the HTTP status and a short snippet of the response body with the key redacted (servers sometimes
echo the credential they rejected), and are raised ``from None`` so no httpx object that holds the
request headers is kept on the exception chain.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence
from urllib.parse import urlsplit

import httpx

from comlrl_lightning.comparators.api_formats import ANTHROPIC_VERSION, snippet
from comlrl_lightning.comparators.redaction import redact, remember
from comlrl_lightning.comparators.response_body import (
    ACCEPT_ENCODING,
    BodyEncodingError,
    decoded_pieces,
)
from comlrl_lightning.errors import ComlrlError, ConfigurationError
from comlrl_lightning.validation import at_least, positive

RETRY_STATUSES = frozenset({408, 429})
"""Retried besides every 5xx: request timeout and rate limit."""

_STATUS_HINTS = {
    400: "the provider rejected the request body; check the comparator's model and extra_body",
    401: "the key was rejected; check the variable {key_env} and the comparator's key_header and key_prefix",
    402: "insufficient balance: add credit to the provider account",
    403: "the key may not use this model or endpoint",
    404: "check the comparator's url and model",
}


def shown_url(url: str) -> str:
    """``url`` without userinfo, query or fragment (where keys sometimes hide), for messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


class ComparatorApiError(ComlrlError, RuntimeError):
    """A comparator API request failed (after its retries, when the failure is retryable)."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(redact(message))  # every error path: status, shape and parse errors alike
        self.status = status


@dataclass
class RequestStats:
    """Counters of one collection round (thread-safe through the client's lock)."""

    requests: int = 0
    retries: int = 0


@dataclass(frozen=True)
class HttpOptions:
    """How an API comparator's requests are sent: its ``http`` option.

    Args:
        timeout: seconds per HTTP operation (connect, each read, write); a request that times out is retried.
        deadline: seconds one attempt may take in all, however slowly its bytes arrive
            (``None``: 4 x ``timeout``); an attempt past it is retried like a timeout.
        max_response_bytes: largest decoded answer read (a larger one is an error, not retried);
            ``concurrency`` answers are read at once, so at most their product is held.
        concurrency: requests in flight at once, across items and candidates.
        max_retries: retries per request on connection errors, timeouts, 408, 429 and 5xx.
    """

    timeout: float = 120.0
    deadline: Optional[float] = None
    max_response_bytes: int = 4 * 2**20
    concurrency: int = 8
    max_retries: int = 4

    def __post_init__(self) -> None:
        positive("timeout", self.timeout)
        positive("deadline", self.deadline, allow_none=True)
        at_least("max_response_bytes", self.max_response_bytes, 1)
        at_least("concurrency", self.concurrency, 1)
        at_least("max_retries", self.max_retries, 0)


class ApiClient:
    """POSTs JSON bodies to one endpoint with retries, and many of them concurrently.

    Args:
        url: the endpoint.
        timeout: seconds per HTTP operation (connect, each read, write); a hung server is a timeout.
        headers: extra headers, never the credential.
        key_env: name of the environment variable holding the key (``None``: no key is sent).
        key_header, key_prefix: the key is sent as ``key_header: "<prefix> <key>"`` (empty prefix: bare key).
        anthropic: Anthropic conventions: ``anthropic-version`` header unless given, and the default
            ``Authorization: Bearer`` becomes ``x-api-key: <key>``.
        max_retries: retries after the first attempt, on connection errors, timeouts, 408, 429 and 5xx.
        concurrency: requests in flight at once.
        backoff_base, backoff_cap: exponential backoff ``min(cap, base * 2**attempt)``, scaled by a
            random factor in [0.5, 1] (jitter, so parallel requests do not retry in lockstep).
        retry_after_cap: longest wait honoured from a ``Retry-After`` header, in seconds.
        deadline: seconds one attempt may take in all, however its bytes trickle in (``None``: 4 x
            ``timeout``); an attempt past it is retried like a timeout.
        max_response_bytes: largest (decoded) answer read; a larger one (e.g. a decompression bomb)
            is an error, not retried, and never held in memory whole.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 120.0,
        headers: Optional[Mapping[str, str]] = None,
        key_env: Optional[str] = None,
        key_header: str = "Authorization",
        key_prefix: str = "Bearer",
        anthropic: bool = False,
        max_retries: int = 4,
        concurrency: int = 8,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        retry_after_cap: float = 60.0,
        deadline: Optional[float] = None,
        max_response_bytes: int = 4 * 2**20,
    ) -> None:
        self.url, self.timeout = url, float(timeout)
        self.static_headers = dict(headers or {})
        self.key_env, self.key_header, self.key_prefix = key_env, key_header, key_prefix
        self.anthropic = anthropic
        self.max_retries, self.concurrency = int(max_retries), int(concurrency)
        self.backoff_base, self.backoff_cap, self.retry_after_cap = backoff_base, backoff_cap, retry_after_cap
        self.deadline = float(deadline) if deadline is not None else 4 * self.timeout
        self.max_response_bytes = int(max_response_bytes)
        self.stats = RequestStats()
        self._lock = threading.Lock()
        self._jitter = random.Random()  # timing only: never affects what is collected

    def __repr__(self) -> str:
        return f"ApiClient(url={self.shown_url!r}, key_env={self.key_env!r})"

    @property
    def shown_url(self) -> str:
        """The URL without userinfo, query or fragment (where keys sometimes hide) for messages."""
        return shown_url(self.url)

    # ------------------------------------------------------------------------------------------
    # Key and headers

    def _key(self) -> Optional[str]:
        if not self.key_env:
            return None
        raw = os.environ.get(self.key_env, "")
        key = raw.strip()  # a trailing newline from a key file is not part of the key
        if not key:
            raise ComparatorApiError(
                f"key_env names {self.key_env}, but that environment variable is not set or empty."
            )
        remember(raw)
        remember(key)
        check_sendable(key, self.key_env)
        return key

    def check_key(self) -> Optional[str]:
        """Fail before any sampling when the key variable is missing or cannot be sent; the key."""
        return self._key()

    def _headers(self, key: Optional[str]) -> Dict[str, str]:
        # only codings the body reader decodes with a bound (no brotli or zstd decoded whole by httpx)
        headers = {"Content-Type": "application/json", "Accept-Encoding": ACCEPT_ENCODING, **self.static_headers}
        if self.anthropic and not any(name.lower() == "anthropic-version" for name in headers):
            headers["anthropic-version"] = ANTHROPIC_VERSION
        if key is not None:
            name, prefix = self.key_header, (self.key_prefix or "").strip()
            if self.anthropic and name.lower() == "authorization":
                name = "x-api-key"
                prefix = "" if prefix.lower() == "bearer" else prefix
            headers[name] = f"{prefix} {key}" if prefix else key
        return headers

    # ------------------------------------------------------------------------------------------
    # One request

    def _delay(self, attempt: int, response: Optional[httpx.Response]) -> float:
        if response is not None:
            retry_after = _retry_after_seconds(response.headers)
            if retry_after is not None:
                return min(max(retry_after, 0.0), self.retry_after_cap)
        return min(self.backoff_cap, self.backoff_base * 2**attempt) * self._jitter.uniform(0.5, 1.0)

    def post(self, http: httpx.Client, body: Mapping[str, Any], stop: Optional[threading.Event] = None) -> Any:
        """POST ``body`` and return the parsed JSON, retrying what is worth retrying.

        ``stop`` (set when a sibling request failed) ends the retries early.
        """
        stop = stop or threading.Event()
        content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        last_problem = ""
        for attempt in range(self.max_retries + 1):
            if stop.is_set():
                raise _Cancelled("Comparator API request cancelled after another request failed.")
            key = self._key()  # read at request time: a rotated key is picked up at once
            with self._lock:
                self.stats.requests += 1
                self.stats.retries += attempt > 0
            response = None
            try:
                with http.stream("POST", self.url, content=content, headers=self._headers(key)) as response:
                    data = self._read(response, time.monotonic() + self.deadline, stop)
            except httpx.TimeoutException:
                last_problem, response = f"no response within timeout={self.timeout:g}s", None
            except _DeadlineExceeded:
                last_problem, response = f"no complete response within deadline={self.deadline:g}s", None
            except httpx.TransportError as error:
                last_problem, response = f"connection error ({type(error).__name__}: {redact(str(error))})", None
            if response is not None:
                status, text = response.status_code, data.decode("utf-8", errors="replace")
                if status < 300:
                    return self._json(data, text, status)
                shown = snippet(text)  # redacted before it is cut
                # OpenAI reports an empty account as 429 insufficient_quota: waiting will not help
                no_quota = status == 429 and "insufficient_quota" in text
                if no_quota or (status not in RETRY_STATUSES and status < 500):
                    raise ComparatorApiError(
                        f"Comparator API request to {self.shown_url} failed with HTTP {status} "
                        f"({self._hint(status, no_quota, response)}). "
                        f"Provider response: {shown}",
                        status,
                    ) from None
                last_problem = f"HTTP {status}: {shown}"
            if attempt < self.max_retries:
                stop.wait(self._delay(attempt, response))
        raise ComparatorApiError(
            f"Comparator API request to {self.shown_url} failed after {self.max_retries + 1} attempts; "
            f"last: {last_problem}",
            response.status_code if response is not None else None,
        ) from None

    def _hint(self, status: int, no_quota: bool, response: httpx.Response) -> str:
        if no_quota:
            return "insufficient quota: add credit to the provider account; not retried"
        if 300 <= status < 400:
            return f"redirected to {response.headers.get('location', '?')}: set the comparator's url to the final URL"
        where = self.key_env or "named by key_env (none is set: no key was sent)"
        return _STATUS_HINTS.get(status, "not retried").format(key_env=where)

    def _read(self, response: httpx.Response, deadline: float, stop: threading.Event) -> bytes:
        """The decoded body, at most ``max_response_bytes`` of it, before ``deadline`` (monotonic time).

        Decoded here, piece by bounded piece (:mod:`.response_body`), never by httpx a whole
        network chunk at a time: a decompression bomb never takes more memory than the cap. A
        sibling request's failure (``stop``) ends the read at once: its answer is not needed.
        """
        data = bytearray()
        try:
            for piece in decoded_pieces(response.iter_raw(), response.headers.get("content-encoding")):
                data += piece
                if len(data) > self.max_response_bytes:
                    raise ComparatorApiError(
                        f"Comparator API at {self.shown_url} answered with more than max_response_bytes="
                        f"{self.max_response_bytes} bytes (decoded); not read further and not retried.",
                        response.status_code,
                    )
                if time.monotonic() > deadline:
                    raise _DeadlineExceeded()
                if stop.is_set():
                    raise _Cancelled("Comparator API request cancelled after another request failed.")
        except BodyEncodingError as error:
            raise ComparatorApiError(
                f"Comparator API at {self.shown_url} answered with a body that cannot be read: {error}; not retried.",
                response.status_code,
            ) from None
        return bytes(data)

    def _json(self, data: bytes, text: str, status: int) -> Any:
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as error:  # a 200 000-deep nesting is a RecursionError
            kind = "a too deeply nested JSON" if isinstance(error, RecursionError) else "a non-JSON"
            raise ComparatorApiError(
                f"Comparator API at {self.shown_url} returned {kind} response (HTTP {status}): {snippet(text)}",
                status,
            ) from None

    # ------------------------------------------------------------------------------------------
    # Many requests

    def post_all(self, bodies: Sequence[Mapping[str, Any]]) -> List[Any]:
        """POST every body with at most ``concurrency`` in flight; results in the bodies' order.

        The first failure cancels the requests not started yet and is raised.
        """
        if not bodies:
            return []
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        with httpx.Client(timeout=httpx.Timeout(self.timeout), limits=limits) as http:
            if self.concurrency == 1 or len(bodies) == 1:
                return [self.post(http, body) for body in bodies]
            stop = threading.Event()
            pool = ThreadPoolExecutor(
                max_workers=min(self.concurrency, len(bodies)), thread_name_prefix="comparator-api"
            )
            try:
                futures = [pool.submit(self.post, http, body, stop) for body in bodies]
                wait(futures, return_when=FIRST_EXCEPTION)
                errors = [e for e in (f.exception() for f in futures if f.done()) if e is not None]
                if errors:  # the failure itself, not a sibling cancelled because of it
                    raise next((e for e in errors if not isinstance(e, _Cancelled)), errors[0])
                return [future.result() for future in futures]
            finally:
                # On failure: stop retries and queued requests; requests in flight end within the timeout.
                stop.set()
                pool.shutdown(wait=False, cancel_futures=True)


def check_sendable(key: str, key_env: str) -> None:
    """A key an HTTP header can carry (printable ASCII), else an error naming ``key_env`` and the
    position and kind of the first bad character, never the key."""
    for position, character in enumerate(key, start=1):
        if not " " <= character <= "~":
            kind = (
                "a line break"
                if character in "\r\n"
                else ("a control character" if ord(character) < 128 else "a non-ASCII character")
            )
            raise ConfigurationError(
                f"the key in {key_env} has {kind} at character {position}, which an HTTP header cannot carry; "
                "check the variable (surrounding whitespace, such as a key file's final newline, is removed; "
                "anything inside the key is not)."
            )


class _Cancelled(ComparatorApiError):
    """A request given up because a sibling request failed (that failure is the one reported)."""


class _DeadlineExceeded(Exception):
    """An attempt that outlived its total deadline (retried like a timeout)."""


def _retry_after_seconds(headers: httpx.Headers) -> Optional[float]:
    """``retry-after-ms`` (OpenAI), else ``Retry-After`` as seconds or an HTTP date."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return float(milliseconds) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()
