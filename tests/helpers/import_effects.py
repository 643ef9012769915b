"""What importing the package changes in a process, for tests/test_package_import.py.

``python -m tests.helpers.import_effects modules``: imports ``comlrl_lightning`` and every module in it,
prints (JSON) every other module then loaded. ``python -m tests.helpers.import_effects effects NAMES``
(NAMES a JSON file of such a list): imports those first (what a third-party import does is its own
business), then the package and every module in it, and prints (JSON) what the package's imports
changed: new warning filters, environment variables set, changed or removed, and loggers given a level,
filter or handler (the root logger and any that existed before, and any new one).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
import sys
import warnings
from typing import Any, Dict, List


def import_the_package() -> List[str]:
    """Import ``comlrl_lightning`` and every module in it; their names."""
    import comlrl_lightning

    names = [info.name for info in pkgutil.walk_packages(comlrl_lightning.__path__, "comlrl_lightning.")]
    for name in names:
        importlib.import_module(name)
    return ["comlrl_lightning", *names]


def loggers() -> Dict[str, Any]:
    """Every logger's level, filters, handlers, propagation and switch (the root as ``""``)."""
    found = {"": logging.getLogger()}
    found.update({n: x for n, x in logging.Logger.manager.loggerDict.items() if isinstance(x, logging.Logger)})
    return {
        name: [x.level, [repr(f) for f in x.filters], [repr(h) for h in x.handlers], x.propagate, x.disabled]
        for name, x in found.items()
    }


def state() -> Dict[str, Any]:
    return {"filters": [repr(f) for f in warnings.filters], "env": dict(os.environ), "loggers": loggers()}


def changes(before: Dict[str, Any], after: Dict[str, Any]) -> Dict[str, Any]:
    """What differs from ``before`` to ``after`` (a logger new since, bare like ``getLogger``'s, is not a change)."""
    bare = [0, [], [], True, False]
    return {
        "filters": [f for f in after["filters"] if f not in before["filters"]],
        "env": sorted(
            k for k in before["env"].keys() | after["env"].keys() if before["env"].get(k) != after["env"].get(k)
        ),
        "loggers": sorted(
            name for name, value in after["loggers"].items() if before["loggers"].get(name, bare) != value
        ),
    }


def main(words: List[str]) -> None:
    if words[0] == "modules":
        package = set(import_the_package())
        print(json.dumps(sorted(name for name in sys.modules if name not in package and name != "__main__")))
        return
    with open(words[1], encoding="utf-8") as file:
        for name in json.load(file):
            try:
                importlib.import_module(name)
            except Exception:  # a module that cannot be imported alone; the package's import loads it if it needs it
                pass
    before = state()
    import_the_package()
    print(json.dumps(changes(before, state())))


if __name__ == "__main__":
    main(sys.argv[1:])
