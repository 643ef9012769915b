"""The package's shape, checked: layers import downwards only, no import cycle, every module documented."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "comlrl_lightning"

LAYERS = {
    "errors": -1,  # the error family: every layer, options included, raises from it
    "options": 0,
    "losses": 0,
    "runtime": 1,
    "defaults": 2,
    "team": 3,
    "generation": 4,
    "models": 4,
    "data": 5,
    "comparators": 6,
    "modules": 7,
    "datamodules": 7,
    "callbacks": 8,
    "trainers": 9,
    "cli": 10,
    "__main__": 11,
    "__init__": 11,
}
"""Each top-level part of the package and its layer: a module may import its own part and lower layers."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def imports_of(path: Path) -> Set[str]:
    """Package modules ``path`` imports at module level or inside functions (``TYPE_CHECKING`` blocks excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_checking = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("comlrl_lightning"):
            assert node.level == 0, f"{path}: relative import (use absolute comlrl_lightning imports)"
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("comlrl_lightning"))
    return found


MODULES: Dict[str, Path] = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def test_every_part_of_the_package_has_a_layer():
    assert {part_of(name) for name in MODULES} <= set(LAYERS), "a new subpackage needs a layer in LAYERS"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layers_import_downwards_only(module):
    mine = part_of(module)
    upward = [
        target
        for target in GRAPH[module]
        if part_of(target) != mine and LAYERS[part_of(target)] >= LAYERS[mine] and mine not in ("__init__", "__main__")
    ]
    assert not upward, f"{module} imports from its own layer or above: {upward}"


def test_no_import_cycle():
    # package __init__ modules re-export their own submodules; an edge into one's own package __init__ is not a cycle
    def edges(name):
        return [t for t in GRAPH[name] if t in MODULES and not name.startswith(t + ".")]

    state: Dict[str, int] = {}
    stack = []

    def visit(name):
        state[name] = 1
        stack.append(name)
        for target in edges(name):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(target) :] + [target]))
            if target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in MODULES:
        if name not in state:
            visit(name)


def test_every_subpackage_says_what_lives_there_and_what_it_may_import():
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "Imports:" in doc, f"{init}: say what the package may import"


def test_the_architecture_page_lists_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = [path for path in MODULES.values() if path.name != "__init__.py" or path.parent == PACKAGE]
    missing = [str(path.relative_to(ROOT)) for path in modules if f"`{path.relative_to(ROOT)}`" not in page]
    missing += [
        f"{init.parent.name}/" for init in PACKAGE.glob("*/__init__.py") if f"  {init.parent.name}/ " not in page
    ]
    assert not missing, f"docs/architecture.md does not list: {missing}"
