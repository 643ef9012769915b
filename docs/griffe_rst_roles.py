"""A griffe extension for the docs build: the reST bits of this codebase's docstrings as Markdown.

The docstrings are Google style ("Args:" sections) but name other objects with Sphinx roles
(``:class:`~comlrl_lightning.team.Team```) and end a line with ``::`` before a literal block.
Rendered as Markdown those would show the role's markup; this turns each role into inline code
(the last dotted component for ``~`` targets, the text of ``text <target>`` forms) and a
trailing ``::`` into ``:``. Only the rendered text changes, never the code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|obj|exc|const|ref|term):`([^`]+)`")
SECTION_TITLE = re.compile(r"^\s*[A-Z][A-Za-z ]*:$")


def _role(match: re.Match) -> str:
    target = match.group(1).strip()
    titled = re.fullmatch(r"(.+?)\s*<([^>]+)>", target)
    if titled:
        return f"`{titled.group(1)}`"
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _literal_marker(line: str) -> str:
    if not line.rstrip().endswith("::"):
        return line
    stripped = line.rstrip()
    shortened = stripped[:-1]
    if stripped.strip() == "::":
        return ""
    # "Example::" must not become a Google section title ("Example:")
    return shortened + " " if SECTION_TITLE.match(shortened) else shortened


def markdown_docstring(text: str) -> str:
    """``text`` with Sphinx roles as inline code and reST ``::`` literal markers as ``:``."""
    text = ROLE.sub(_role, text)
    return "\n".join(_literal_marker(line) for line in text.split("\n"))


class RstRoles(griffe.Extension):
    """Rewrite every docstring once, as it is loaded (before it is parsed)."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and docstring.value:
            docstring.value = markdown_docstring(docstring.value)
