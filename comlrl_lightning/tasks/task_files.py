"""Task files: a ``.json`` file (a JSON value) or a ``.jsonl`` file (one JSON value per line),
each also compressed (``items.jsonl.gz``, ``.bz2``, ``.xz``, ``.zst``), read under bounds.

The file is read (and decompressed) under :class:`~comlrl_lightning.tasks.file_bounds.FileBounds`,
and every way its text can fail to decode is a :class:`~comlrl_lightning.errors.DataError` naming
the file and the line: a byte that is not UTF-8, malformed JSON, lists and objects nested deeper
than Python's decoder goes (a ``RecursionError`` from :func:`json.loads`), and an integer longer
than Python converts (a ``ValueError``, 4,300 digits by default).
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from pathlib import Path
from typing import Any, List, Optional, Tuple

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.file_bounds import FileBounds, read_data_file

COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
"""Suffixes a task file may carry after ``.json`` / ``.jsonl`` (the content is recognised by its first bytes)."""

_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]|[\]}]|\n|(?<![\d.eE])(?<![eE][+-])\d++(?![.eE])')
"""What locating a decoding failure needs: strings (skipped whole), brackets, newlines, integers."""


def task_file_format(name: str) -> Optional[str]:
    """``"jsonl"`` or ``"json"`` for a task file's name (``items.jsonl``, ``items.json.gz``...);
    ``None`` for any other name (a dataset name or folder)."""
    for suffix in ("", *COMPRESSED_SUFFIXES):
        if name.endswith(f".jsonl{suffix}"):
            return "jsonl"
        if name.endswith(f".json{suffix}"):
            return "json"
    return None


def read_jsonl(path: Path, option: str, bounds: FileBounds = FileBounds()) -> List[Any]:
    """One JSON value per non-blank line (a UTF-8 byte-order mark before the first is allowed); a
    line that is not UTF-8 or not JSON is named by file and line."""
    items = []
    for number, raw in enumerate(read_data_file(path, option, bounds).split(b"\n"), start=1):
        line = _decode(raw[3:] if number == 1 and raw.startswith(codecs.BOM_UTF8) else raw, path, option, number)
        if line.strip():
            items.append(_loads(line, path, option, number))
    return items


def read_json(path: Path, option: str, bounds: FileBounds = FileBounds()) -> Any:
    """The JSON value of a file (a UTF-8 byte-order mark is allowed), errors named by file and line."""
    data = read_data_file(path, option, bounds)
    data = data[3:] if data.startswith(codecs.BOM_UTF8) else data
    lines = data.split(b"\n")
    text = "\n".join(_decode(line, path, option, number) for number, line in enumerate(lines, start=1))
    return _loads(text, path, option, None)


def _loads(text: str, path: Path, option: str, number: Optional[int]) -> Any:
    """``json.loads(text)``; ``number`` is the file's line ``text`` is (``None``: the whole file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        line = number if number is not None else error.lineno
        reason = f"not valid JSON ({error.msg}, column {error.colno})"
    except RecursionError:
        depth, deepest = deepest_nesting(text)
        line = (number or 1) + deepest - 1
        reason = (
            f"lists and objects nested {depth} deep, deeper than Python's JSON decoder reads (its recursion "
            f"limit is {sys.getrecursionlimit()}); flatten the item"
        )
    except ValueError as error:  # json.loads' int(): more digits than sys.get_int_max_str_digits()
        digits, longest = longest_integer(text)
        line = (number or 1) + longest - 1
        reason = (
            f"an integer of {digits} digits, more than Python converts ({sys.get_int_max_str_digits()}); write it "
            "as a string"
            if digits > sys.get_int_max_str_digits() > 0
            else f"cannot be decoded ({' '.join(str(error).split())[:200]})"
        )
    raise DataError(f"{option}: {path} line {line}: {reason}.")


def deepest_nesting(text: str) -> Tuple[int, int]:
    """The deepest nesting of lists and objects in the JSON ``text`` and the (1-based) line where it
    is first reached; brackets inside strings do not count."""
    depth = deepest = 0
    line = deepest_line = 1
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest, deepest_line = depth, line
        elif token in "]}":
            depth -= 1
        else:
            line += token.count("\n")
    return deepest, deepest_line


def longest_integer(text: str) -> Tuple[int, int]:
    """The digits of the longest integer in the JSON ``text`` (outside strings, not part of a
    fraction or exponent) and the (1-based) line where it is."""
    longest, longest_line, line = 0, 1, 1
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token[0].isdigit():
            if len(token) > longest:
                longest, longest_line = len(token), line
        else:
            line += token.count("\n")
    return longest, longest_line


def _decode(line: bytes, path: Path, option: str, number: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{option}: {path} line {number}: not UTF-8 (byte 0x{line[error.start]:02x} at byte {error.start + 1} "
            "of the line); save the file as UTF-8."
        ) from None


__all__ = ["COMPRESSED_SUFFIXES", "deepest_nesting", "longest_integer", "read_json", "read_jsonl", "task_file_format"]
