"""The two roles' prompts: agent 0 writes the helper ``aux``, agent 1 the problem's function.

Each formatter returns a chat conversation (a system and a user message), which the team renders
with each agent's own chat template (:mod:`comlrl_lightning.tasks.chat`). Neither agent sees the
other's answer: they write in the same turn, and the combined program is scored. Both check the
item first (:func:`~comlrl_lightning.tasks.coding.humaneval.check_problem`, the one definition of a
usable item, with the test runner's own count of tests), so a problem that cannot be scored or can
never pass stops the run when the data module builds its prompts, before any model is loaded.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from comlrl_lightning.tasks.coding.humaneval import check_problem
from comlrl_lightning.tasks.coding.program import AUX_NAME

SYSTEM = "You are an expert Python programmer. Answer with one Python code block and nothing else."

AUX_TEMPLATE = """You and a partner solve one programming problem together. You write a helper function named `aux`; your partner writes `{entry_point}` and can call `aux`. You do not see each other's code.

Problem:
```python
{prompt}
```

Write `def aux(...)`: a helper that does a useful part of the work, with parameters you choose and a return statement. Do not write `{entry_point}`, do not repeat the docstring, and explain nothing."""

MAIN_TEMPLATE = """You and a partner solve one programming problem together. Your partner writes a helper function `aux`, which you can call; you write `{entry_point}`. You do not see each other's code.

Problem:
```python
{prompt}
```

Write the complete function `{entry_point}` with the signature above and a return statement. You may call `aux(...)` where it helps; do not define `aux` yourself, do not repeat the docstring, and explain nothing."""


def _conversation(template: str, item: Mapping[str, Any]) -> List[Dict[str, str]]:
    check_problem(item)
    text = template.format(prompt=item["prompt"].strip("\n"), entry_point=item["entry_point"])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def aux_prompt(item: Mapping[str, Any]) -> List[Dict[str, str]]:
    """Agent 0's prompt for ``item``: write the helper ``aux``."""
    return _conversation(AUX_TEMPLATE, item)


def main_prompt(item: Mapping[str, Any]) -> List[Dict[str, str]]:
    """Agent 1's prompt for ``item``: write the entry-point function, which may call ``aux``."""
    return _conversation(MAIN_TEMPLATE, item)


__all__ = ["AUX_NAME", "aux_prompt", "main_prompt"]
