"""Keeping API keys out of every message: one redaction for every error path, by value, in every encoding.

The API client :func:`remember` s each key it reads from the environment; :func:`redact` then
replaces, in any text, every run of :data:`MIN_RUN` or more consecutive characters of a remembered
key by ``[redacted]``: the whole key, and also a part of it (a server that echoes the key minus
its last characters). The text is read raw and decoded at once: JSON escapes (``\\u0073``,
``\\/``), URL encoding (``%2D``), the escapes of a Python bytes repr as h11 prints a header
(``\\n``, ``\\x..``; a non-ASCII character as its UTF-8 bytes), or any mix of them. Every
:class:`~comlrl_lightning.comparators.ComparatorApiError` message and every quoted response
snippet goes through it *before* it is cut to length, so no cut can leave a piece of a key that
long. :func:`contains_secret` says whether a text holds a whole key, in any of these encodings.

Stored data gets the same treatment: :func:`redact_stored` is applied to every text a remote
endpoint answers (the API comparator's completions) before anything keeps it, so a server that
echoes the key cannot put it into a round file, a checkpoint, its asset copy or a log. It reads
the whole text (no cut) and only keys of :data:`STORED_SECRET_LENGTH` characters or more (a
shorter one, such as a local server's ``x``, is no secret and would match ordinary text).
"""

from __future__ import annotations

import functools
import re
import threading
from typing import FrozenSet, List, Set, Tuple

REDACTED = "[redacted]"
MIN_RUN = 6
"""Shortest run of a key's consecutive characters that is redacted (a shorter key: the whole key)."""

STORED_SECRET_LENGTH = 8
"""Shortest remembered key redacted from stored data (and searched for in a saved config)."""

_remembered: Set[str] = set()
_lock = threading.Lock()

_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|%([0-9a-fA-F]{2})|\\(.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "b": "\b", "f": "\f"}
_SCAN_LIMIT = 1 << 16
"""Characters of a text that :func:`redact` reads; callers quote far fewer (a snippet is 300)."""


def remember(secret: str) -> None:
    """Redact ``secret`` from every message from now on (in this process)."""
    if secret:
        with _lock:
            _remembered.add(secret)


def _forms(secret: str) -> List[str]:
    """The key as characters, and as its UTF-8 bytes (what ``%..`` and ``\\x..`` escapes spell)."""
    as_bytes = secret.encode("utf-8", "surrogatepass").decode("latin-1")
    return [secret] if as_bytes == secret else [secret, as_bytes]


@functools.lru_cache(maxsize=64)
def _grams(secret: str, run: int) -> Tuple[int, FrozenSet[str]]:
    """``(k, every k-character run of every form of the key, lower-cased)`` with ``k = min(run, len)``."""
    k = min(run, len(secret))
    return k, frozenset(form[i : i + k].lower() for form in _forms(secret) for i in range(len(form) - k + 1))


def _decoded(text: str) -> Tuple[str, List[int], List[int]]:
    """``text`` with every escape decoded, and each decoded character's start and end in ``text``."""
    chars: List[str] = []
    starts: List[int] = []
    ends: List[int] = []
    position = 0
    for match in _ESCAPE.finditer(text):
        for index in range(position, match.start()):
            chars.append(text[index])
            starts.append(index)
            ends.append(index + 1)
        hexadecimal = next((group for group in match.groups()[:3] if group), None)
        other = match.group(4)
        chars.append(chr(int(hexadecimal, 16)) if hexadecimal else _SIMPLE_ESCAPES.get(other, other))
        starts.append(match.start())
        ends.append(match.end())
        position = match.end()
    for index in range(position, len(text)):
        chars.append(text[index])
        starts.append(index)
        ends.append(index + 1)
    return "".join(chars), starts, ends


def _spans(text: str, secret: str, run: int) -> List[Tuple[int, int]]:
    """Spans of ``text`` (raw and decoded readings) covered by a ``run``-character run of ``secret``."""
    k, grams = _grams(secret, run)
    spans = []
    raw = (text, range(len(text)), range(1, len(text) + 1))
    for chars, starts, ends in (raw, _decoded(text)):
        lowered = chars.lower()
        for i in range(len(lowered) - k + 1):
            if lowered[i : i + k] in grams:
                spans.append((starts[i], ends[i + k - 1]))
    return spans


def _merged(spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    merged: List[Tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact(text: str) -> str:
    """``text`` with every run of :data:`MIN_RUN` or more characters of a remembered secret, in any of
    its encodings, replaced by ``[redacted]`` (only its first 64 KiB are read and kept)."""
    with _lock:
        secrets = list(_remembered)
    if not secrets:
        return text
    return _redacted(text[:_SCAN_LIMIT], secrets)


def _redacted(text: str, secrets: List[str]) -> str:
    spans = _merged([span for secret in secrets for span in _spans(text, secret, MIN_RUN)])
    pieces, position = [], 0
    for start, end in spans:
        pieces += [text[position:start], REDACTED]
        position = end
    return "".join(pieces) + text[position:]


def redact_stored(text: str) -> str:
    """``text`` (a remote endpoint's answer, about to be stored) with every run of :data:`MIN_RUN`
    or more characters of a remembered key of :data:`STORED_SECRET_LENGTH` characters or more, in
    any of its encodings, replaced by ``[redacted]``; the whole text is read and kept."""
    with _lock:
        secrets = [secret for secret in _remembered if len(secret.strip()) >= STORED_SECRET_LENGTH]
    return _redacted(text, secrets) if secrets and text else text


def contains_secret(text: str, secret: str) -> bool:
    """Whether ``text`` holds the whole of ``secret``, raw or in any encoding :func:`redact` reads."""
    return bool(secret) and bool(_spans(str(text)[:_SCAN_LIMIT], secret, len(secret)))


__all__ = ["MIN_RUN", "REDACTED", "STORED_SECRET_LENGTH", "contains_secret", "redact", "redact_stored", "remember"]
