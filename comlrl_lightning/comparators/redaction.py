"""Keeping API keys out of every message: one redaction for every error path, in every encoding.

The API client :func:`remember` s each key it reads from the environment; :func:`redact` then
replaces any occurrence of a remembered key in a text, whether raw, JSON-escaped (``\\u0073``,
``\\/``) or URL-encoded (``%2D``), or any mix of them, by ``[redacted]``. Every
:class:`~comlrl_lightning.comparators.ComparatorApiError` message and every quoted
response snippet goes through it *before* it is cut to length, so not even a prefix of a key
straddling the cut is printed.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Pattern, Set

REDACTED = "[redacted]"

_remembered: Set[str] = set()
_lock = threading.Lock()


def remember(secret: str) -> None:
    """Redact ``secret`` from every message from now on (in this process)."""
    if secret:
        with _lock:
            _remembered.add(secret)


@functools.lru_cache(maxsize=64)
def _pattern(secret: str) -> Pattern[str]:
    characters = []
    for character in secret:
        code = ord(character)
        forms = [re.escape(character), rf"\\u{code:04x}", rf"\\{re.escape(character)}"]
        if code < 0x80:
            forms.append(f"%{code:02x}")
        characters.append("(?:" + "|".join(forms) + ")")
    return re.compile("".join(characters), re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every remembered secret, in any of its encodings, replaced by ``[redacted]``."""
    with _lock:
        secrets = sorted(_remembered, key=len, reverse=True)
    for secret in secrets:
        text = _pattern(secret).sub(REDACTED, text)
    return text


__all__ = ["REDACTED", "redact", "remember"]
