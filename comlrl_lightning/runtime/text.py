"""Text from outside the trainer made safe to keep: valid Unicode always, one line where a line is read.

A string decoded from JSON may hold lone surrogates (``"\\ud800"`` as an escape), which no file,
tokenizer or logger can encode as UTF-8; a message a program controls may hold newlines, terminal
escapes (ESC, CSI, other C0 and C1 controls) and bidirectional overrides that would forge lines or
hide text where a person or a model reads it. :func:`valid_text` keeps a text's lines and replaces
only what cannot be encoded; :func:`one_line_text` makes a short, visible, single line of it.
"""

from __future__ import annotations

import re

LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A surrogate code point: in a Python string always a lone one (UTF-8 cannot encode it)."""

REPLACEMENT = "\ufffd"
ELLIPSIS = "\u2026"


def valid_text(value: str) -> str:
    """``value`` with each lone surrogate replaced by U+FFFD, so it encodes as UTF-8; otherwise
    unchanged (newlines and every other character kept). Linear in the length of ``value``."""
    if value.isascii():
        return value
    return LONE_SURROGATE.sub(REPLACEMENT, value)


def _escaped(character: str) -> str:
    # repr escapes exactly the characters str.isprintable() rejects: \n, \x1b, \u202e, \ud800, ...
    return repr(character)[1:-1]


def one_line_text(value: str, limit: int) -> str:
    """``value`` as one line of at most ``limit`` characters, safe to show verbatim.

    Every character that is not printable (``str.isprintable``: line breaks, tabs, C0 and C1
    controls such as ESC, format characters such as the bidirectional overrides, lone surrogates,
    unassigned and private-use code points, spaces other than the ASCII one) is written as its
    Python escape (``\\n``, ``\\x1b``, ``\\u202e``, ``\\ud800``), so nothing can start a line, move
    the cursor or reorder what is shown. A longer result is cut to ``limit - 1`` characters and
    ``…``. Reads at most ``limit`` characters of ``value``: the cost is bounded by ``limit``.
    """
    head = value[: limit + 1]
    if not head.isprintable():
        head = "".join(character if character.isprintable() else _escaped(character) for character in head)
    if len(head) > limit:
        return head[: max(limit - 1, 0)] + ELLIPSIS
    return head


__all__ = ["LONE_SURROGATE", "one_line_text", "valid_text"]
