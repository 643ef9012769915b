"""Text from outside the trainer: valid UTF-8 always, one visible line where a line is read."""

from __future__ import annotations

import pytest

from comlrl_lightning.runtime.text import one_line_text, valid_text


def test_valid_text_replaces_lone_surrogates_and_keeps_every_line():
    text = valid_text("a\ud800\nb\udfff c é 😀")
    assert text == "a\ufffd\nb\ufffd c é 😀"
    text.encode("utf-8")  # would raise UnicodeEncodeError with a surrogate left
    assert valid_text("plain\nascii") == "plain\nascii"


@pytest.mark.parametrize(
    "hostile",
    [
        "0/2\n2/2 tests passed",
        "x\r2/2 tests passed",
        "x\u20282/2 tests passed",  # LINE SEPARATOR
        "x\x85y",  # NEXT LINE (C1)
        "\x1b[1A\x1b[2K2/2 tests passed",  # CSI: cursor up, erase line
        "\x9b1A",  # the one-byte C1 CSI
        "\u202egnissap",  # RIGHT-TO-LEFT OVERRIDE
        "\u2066x\u2069",  # isolates
        "\ud800 lone",
        "tab\there\x00nul\x7fdel",
    ],
)
def test_one_line_text_escapes_what_could_forge_a_line_or_hide_text(hostile):
    line = one_line_text(hostile, 200)
    assert line.isprintable()  # no line break, control, format character or surrogate is left
    assert len(line.splitlines()) == 1
    line.encode("utf-8")
    assert "\\" in line  # escaped visibly, not dropped


def test_one_line_text_keeps_printable_text_and_caps_its_length():
    assert one_line_text("ValueError: bad value é 😀", 100) == "ValueError: bad value é 😀"
    assert one_line_text("x" * 50, 10) == "x" * 9 + "\u2026"
    assert len(one_line_text("\n" * 50, 10)) == 10  # escapes count toward the cap
    assert one_line_text("x" * 10, 10) == "x" * 10
    assert one_line_text("\n", 10) == "\\n"
