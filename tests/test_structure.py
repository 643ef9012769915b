"""The package's shape, checked: layers import downwards only, no import cycle, every module documented,
no private name used outside its owner; modules over ~400 lines and functions over ~60 are reported
as advice (a warning in the test summary), not a failure: a split by count is no better than one job
kept whole."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "comlrl_lightning"

LAYERS = {
    "errors": -1,  # the error family: every layer, validation included, raises from it
    "validation": 0,
    "losses": 0,
    "runtime": 1,
    "defaults": 2,
    "team": 3,
    "generation": 4,
    "joint_reward": 4,  # the learned reward model of MARLHF
    "critics": 5,  # the critics of MAAC / IAC (their value models share the reward model's helpers)
    "tasks": 5,  # the task definition: items, prompts, the oracle, turns, the centralized form
    "contracts": 5,  # the written contracts between the parts (their types only imported for checking)
    "checkpoints": 6,  # the save and resume paths (the resume rule fixes the held-out option of tasks)
    "rounds": 7,  # the round pipeline and its run state: sampled, scored, paired, stored, replayed
    "comparators": 8,  # the other side of a round (the history comparator reads the round's snapshots)
    "modules": 9,
    "datamodules": 9,
    "callbacks": 10,
    "built-in tasks": 10,  # tasks/<name>/, chosen by import path: nothing in the package imports them
    "trainers": 11,
    "export": 11,  # comlrl-lightning export: a checkpoint's team as Hugging Face folders
    "environment_report": 11,  # comlrl-lightning env
    "utils": 12,  # the reference's comlrl.utils names for seed-API scripts, re-exported from trainers
    "data": 12,  # the old names of the task definition, the round pipeline and the contracts
    "models": 12,  # the old names of the reward model and the critics
    "cli": 13,
    "__main__": 14,
    "__init__": 14,
}
"""Each top-level part of the package and its layer: a module may import its own part and lower layers."""

BUILT_IN_TASKS = {path.parent.name for path in PACKAGE.glob("tasks/*/__init__.py")}
"""The built-in tasks: the subpackages of ``tasks/`` (the task definition is ``tasks/`` itself)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "tasks" and parts[2] in BUILT_IN_TASKS:
        return "built-in tasks"
    return "__init__" if len(parts) == 1 else parts[1]


def is_moved_name(path: Path) -> bool:
    """Whether ``path`` only keeps an old import path: a docstring, then imports from one module of
    the package (``from <new home> import ...``), then at most ``__all__``. It belongs to no layer
    (it re-exports a module from wherever that module now lives) and nothing in the package imports it."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    imports = [node for node in body[1:] if isinstance(node, ast.ImportFrom)]
    rest = [node for node in body[1:] if not isinstance(node, ast.ImportFrom)]
    return (
        path.name != "__init__.py"
        and len({node.module for node in imports}) == 1
        and all(isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__" for node in rest)
        and bool(body)
        and isinstance(body[0], ast.Expr)
        and "before" in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")
    )


def imports_of(path: Path, type_only: bool = False) -> Set[str]:
    """Package modules ``path`` imports at module level or inside functions; those of ``TYPE_CHECKING``
    blocks too when ``type_only``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_checking = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_checking and not type_only:
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
TYPED_GRAPH = {name: imports_of(path, type_only=True) for name, path in MODULES.items()}
"""With the imports of ``TYPE_CHECKING`` blocks: a circle of type-only imports is still a circle of
modules that cannot be read (or type-checked) one without the other."""


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
    if is_moved_name(MODULES[module]):
        upward = []  # an old import path: it re-exports the module's new home, wherever that lies
    assert not upward, f"{module} imports from its own layer or above: {upward}"


MOVED_NAMES = sorted(name for name, path in MODULES.items() if is_moved_name(path))


def test_nothing_in_the_package_imports_an_old_path():
    importers = [
        name for name, targets in GRAPH.items() if set(targets) & set(MOVED_NAMES) and name != "comlrl_lightning"
    ]
    assert not importers, f"an old import path is for configs, checkpoints and scripts only: {importers}"


def test_nothing_in_the_package_imports_a_task():
    importers = [
        name
        for name, targets in GRAPH.items()
        if part_of(name) != "built-in tasks" and any(part_of(t) == "built-in tasks" for t in targets)
    ]
    assert not importers, f"a task is chosen by import path, never imported by the package: {importers}"


def import_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """The first import cycle of ``graph`` (its modules in order, the first repeated last), ``None`` without one."""

    # package __init__ modules re-export their own submodules; an edge into one's own package __init__ is not a cycle
    def edges(name):
        return [t for t in graph[name] if t in graph and not name.startswith(t + ".")]

    state: Dict[str, int] = {}
    stack = []

    def visit(name):
        state[name] = 1
        stack.append(name)
        for target in edges(name):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[name] = 2
        return None

    for name in graph:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_no_import_cycle_counting_type_only_imports():
    cycle = import_cycle(TYPED_GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_type_only_circle_is_found(tmp_path):
    # the circle of a data-state callback typed by the data module that registers it
    graph = {"a.data_state": set(), "a.preference": {"a.data_state"}}
    assert import_cycle(graph) is None
    graph["a.data_state"] = {"a.preference"}  # under TYPE_CHECKING: counted all the same
    assert import_cycle(graph) == ["a.data_state", "a.preference", "a.data_state"]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from comlrl_lightning.errors import X\n"
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    assert imports_of(path) == set() and imports_of(path, type_only=True) == {"comlrl_lightning.errors"}


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


# ----------------------------------------------------------------------------------------------
# Sizes: advice, not a rule. A module doing one job may run past the mark and a function that reads
# top to bottom may be longer than a screen; both are listed (pytest's warnings summary) for a reader
# to judge, since the splits hard limits forced (mixins typed through a Protocol, a 36-line module)
# read worse than what they replaced.

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
"""A function counts from its ``def`` line to its last line (decorators excluded, nested functions included)."""


class SizeAdvice(UserWarning):
    """A module or function past its size mark: shown in the test summary, never a failure."""


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def long_functions(source: str, name: str) -> List[str]:
    """``name:line function (n lines)`` for every function of ``source`` over the limit."""
    return [
        f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def long_modules(sources: Dict[str, str]) -> List[str]:
    """``name (n lines)`` for every module of ``sources`` (name to text) over the mark."""
    return [
        f"{name} ({len(source.splitlines())} lines)"
        for name, source in sources.items()
        if len(source.splitlines()) > MAX_MODULE_LINES
    ]


def size_advice(sources: Dict[str, str]) -> List[str]:
    """One line per module and function of ``sources`` past its mark, each warned as :class:`SizeAdvice`."""
    found = [f"module over {MAX_MODULE_LINES} lines: {entry}" for entry in long_modules(sources)]
    found += [
        f"function over {MAX_FUNCTION_LINES} lines: {entry}"
        for name, source in sources.items()
        for entry in long_functions(source, name)
    ]
    for entry in found:
        warnings.warn(entry, SizeAdvice, stacklevel=2)
    return found


def checked_modules() -> Dict[str, str]:
    return {relative(path): path.read_text(encoding="utf-8") for path in MODULES.values()}


def test_sizes_past_their_mark_are_advice_not_failures():
    size_advice(checked_modules())  # warns, never fails: the lines show in pytest's warnings summary


def test_size_advice_names_a_long_module_and_a_long_function_as_warnings():
    long_body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    sources = {"big.py": "x = 1\n" * (MAX_MODULE_LINES + 1), "small.py": f"def over():\n{long_body}"}
    with pytest.warns(SizeAdvice) as caught:
        found = size_advice(sources)
    assert found == [
        f"module over {MAX_MODULE_LINES} lines: big.py ({MAX_MODULE_LINES + 1} lines)",
        f"function over {MAX_FUNCTION_LINES} lines: small.py:1 over ({MAX_FUNCTION_LINES + 1} lines)",
    ]
    assert [str(w.message) for w in caught] == found
    assert size_advice({"fits.py": "x = 1\n"}) == []


def test_a_function_counts_from_its_def_to_its_last_line():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    source = f"@decorated\ndef fits():\n{body}\n\ndef over():\n{body}    return x0\n"
    assert long_functions(source, "sample.py") == [f"sample.py:{MAX_FUNCTION_LINES + 4} over (61 lines)"]


# ----------------------------------------------------------------------------------------------
# Private names stay with their owner

COMPAT = "comlrl_lightning/runtime/compat.py"
"""The one module that may touch Lightning's, transformers' and torch's private parts."""

LOOP_INTERNALS = {"fit_loop", "epoch_loop"}
"""Lightning's loops are internal API, however their attributes are spelled."""

PUBLIC_UNDERSCORE_NAMES = {"_replace", "_asdict", "_fields", "_make", "_exit"}
"""namedtuple's public methods (underscored only so they cannot clash with a field), and ``os._exit``
(documented API: a forked process ends without running its parent's cleanup)."""


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORE_NAMES


def own_attributes(tree: ast.AST) -> Set[str]:
    """Attribute names a module defines itself: assigned on ``self``/``cls`` or in a class body."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(statement.name)
                for target in getattr(statement, "targets", [getattr(statement, "target", None)]):
                    if isinstance(target, ast.Name):
                        names.add(target.id)
    return names


class Reach(NamedTuple):
    """One use of a private name outside its owner: where, the name touched, and how."""

    where: str
    name: str
    how: str

    def __str__(self) -> str:
        return f"{self.where} {self.how}"


def private_reach_through(source: str, module: str) -> List[Reach]:
    """Every use in ``source`` (the module ``module``) of a private name it does not own.

    The rule: no import of a ``_name`` or from a ``_module``; ``x._name`` only where this module
    defines ``_name`` itself (on ``self``/``cls`` or in a class body), so another module's privates
    and a library's (``strategy._save_distributed_checkpoint``, a LightningModule's ``self._trainer``)
    are out; the same through ``getattr``/``hasattr``/``setattr``/``delattr`` with a literal name or
    through ``obj.__dict__``; and no attribute of Lightning's loops (``trainer.fit_loop``).
    """
    tree = ast.parse(source)
    own = own_attributes(tree)
    found: List[Reach] = []
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom):
            if any(is_private(part) for part in (node.module or "").split(".")):
                found.append(Reach(where, node.module, f"imports from the private module {node.module}"))
            found += [
                Reach(where, a.name, f"imports {a.name} from {node.module}") for a in node.names if is_private(a.name)
            ]
        elif isinstance(node, ast.Import):
            found += [
                Reach(where, a.name, f"imports the private module {a.name}")
                for a in node.names
                if any(is_private(part) for part in a.name.split("."))
            ]
        elif isinstance(node, ast.Attribute):
            if node.attr in LOOP_INTERNALS:
                found.append(Reach(where, node.attr, f"reads Lightning's loop internals: {ast.unparse(node)}"))
            elif node.attr == "__dict__" or (is_private(node.attr) and node.attr not in own):
                found.append(Reach(where, node.attr, f"reaches into {ast.unparse(node)}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
            and node.args[1].value not in own
        ):
            literal = node.args[1].value
            found.append(Reach(where, literal, f"reaches into {literal} through {node.func.id}()"))
    return found


def test_no_module_reaches_into_private_names_it_does_not_own():
    found = [
        reach
        for name, source in checked_modules().items()
        if name != COMPAT
        for reach in private_reach_through(source, name)
    ]
    assert not found, "go through comlrl_lightning.runtime.compat or a public name: " + "; ".join(map(str, found))


def test_the_private_rule_catches_each_way_in_and_allows_what_a_module_owns():
    source = """
from lightning.pytorch.utilities._pytree import tree_map
from comlrl_lightning.team.packed_scoring import _gather
import torch._dynamo


class Mine(Base):
    _cache = None

    def __init__(self):
        self._count = 0

    def step(self, strategy, other, trainer):
        self._count += other._count + len(self._cache or ()) + self._trainer.global_step
        getattr(strategy, "_save_distributed_checkpoint", False)
        return trainer.fit_loop.epoch_loop, other.__dict__, other._replace(x=1), type(self).__name__
"""
    assert {(r.where, r.name) for r in private_reach_through(source, "m.py")} == {
        ("m.py:2", "lightning.pytorch.utilities._pytree"),
        ("m.py:3", "_gather"),
        ("m.py:4", "torch._dynamo"),
        ("m.py:14", "_trainer"),
        ("m.py:15", "_save_distributed_checkpoint"),
        ("m.py:16", "fit_loop"),
        ("m.py:16", "epoch_loop"),
        ("m.py:16", "__dict__"),
    }


# ----------------------------------------------------------------------------------------------
# Constructors: at most 15 parameters, counting what reaches a parent through **kwargs

MAX_CONSTRUCTOR_PARAMETERS = 15
SEED_API = {
    "MADPOConfig",
    "MARLHFConfig",
    "_IterativeFields",
    "MADPOIterConfig",
    "MARLHFIterConfig",
    "_PreferenceTrainer",
    "MADPOTrainer",
    "MADPOIterTrainer",
    "MARLHFTrainer",
    "MARLHFIterTrainer",
}
"""The seed's (CoMLRL's) Python API keeps the reference's config fields and trainer arguments one to
one, so code written for the reference runs unchanged; everything it builds is held to the limit."""


def _classes() -> Dict[str, tuple]:
    """Every class of the package: its node and file (class names are unique across the package)."""
    found: Dict[str, tuple] = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                assert node.name not in found, f"two classes named {node.name}: the parameter count needs one"
                found[node.name] = (node, path)
    return found


CLASSES = _classes()


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(decorator) for decorator in node.decorator_list)


def _init(node: ast.ClassDef):
    return next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)


def _forwards_kwargs_to_parent(init: ast.FunctionDef) -> bool:
    """``super().__init__(..., **kwargs)`` in ``init``: the parent's parameters are this constructor's too."""
    for call in ast.walk(init):
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "super().__init__":
            if any(
                keyword.arg is None and ast.unparse(keyword.value) == init.args.kwarg.arg for keyword in call.keywords
            ):
                return True
    return False


def effective_parameters(name: str) -> list:
    """The parameters a user can give class ``name``'s constructor: its own (dataclass fields
    included) and, where it forwards ``**kwargs`` to its parent's, the parent's."""
    node, _ = CLASSES[name]
    parents = [ast.unparse(base) for base in node.bases if ast.unparse(base) in CLASSES]
    init = _init(node)
    if init is None and _is_dataclass(node):
        inherited = [p for parent in parents if _is_dataclass(CLASSES[parent][0]) for p in effective_parameters(parent)]
        own = [
            n.target.id
            for n in node.body
            if isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and "ClassVar" not in ast.unparse(n.annotation)
        ]
        return list(dict.fromkeys(inherited + own))
    if init is None:
        return effective_parameters(parents[0]) if parents else []
    arguments = init.args
    own = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs if a.arg != "self"]
    if arguments.kwarg is not None and parents and _forwards_kwargs_to_parent(init):
        return list(dict.fromkeys(own + effective_parameters(parents[0])))
    return own


@pytest.mark.parametrize("name", sorted(set(CLASSES) - SEED_API))
def test_no_constructor_takes_more_than_15_parameters(name):
    parameters = effective_parameters(name)
    assert len(parameters) <= MAX_CONSTRUCTOR_PARAMETERS, (
        f"{name} takes {len(parameters)} parameters (own and its parent's through **kwargs): {parameters}; "
        "group the ones that form a unit into an options object"
    )


def test_only_the_seed_apis_classes_are_exempt_and_each_of_them_exists():
    assert SEED_API <= set(CLASSES)
    assert {str(CLASSES[name][1].relative_to(PACKAGE)) for name in SEED_API} == {
        "trainers/configs.py",
        "trainers/preference.py",
    }


def test_the_parameter_count_follows_kwargs_to_the_parent():
    # a negative control: the count sees what reaches TeamModule through MARLHF's and MAGRPO's **kwargs
    marlhf = effective_parameters("MARLHFModule")
    assert {"reward_model", "critic", "team", "sampling", "seed"} <= set(marlhf)
    assert len(marlhf) == len(set(marlhf)) > len(effective_parameters("MAGRPOModule"))


# ---------------------------------------------------------------------------------------------
# Passive Lightning parts: no private Lightning method overridden, the Trainer left as given


def lightning_private_overrides(cls: type) -> List[str]:
    """The private methods ``cls`` defines itself that a Lightning class among its bases defines too."""
    found = []
    for name, value in vars(cls).items():
        if not is_private(name) or not (callable(value) or isinstance(value, (property, staticmethod, classmethod))):
            continue
        for base in cls.__mro__[1:]:
            if base.__module__.split(".")[0] in ("lightning", "pytorch_lightning") and name in vars(base):
                found.append(f"{cls.__module__}.{cls.__qualname__}.{name} (of {base.__module__}.{base.__qualname__})")
                break
    return found


def package_classes() -> List[type]:
    import importlib
    import inspect

    classes = []
    for name in sorted(MODULES):
        module = importlib.import_module(name)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == name]
    return classes


def test_no_class_of_the_package_overrides_a_private_method_of_a_lightning_class():
    overrides = [found for cls in package_classes() for found in lightning_private_overrides(cls)]
    assert overrides == [], "private Lightning methods overridden (find a public hook)"


def test_the_private_override_check_finds_one():
    # a negative control: what cli.py did before (LightningCLI's private _parse_ckpt_path), and a
    # private method Lightning's classes do not have, which is the class's own business
    from lightning.pytorch.cli import LightningCLI

    class ParsesCheckpoints(LightningCLI):
        def _parse_ckpt_path(self) -> None: ...

        def _own_helper(self) -> None: ...

        def before_fit(self) -> None: ...

    assert [found.rsplit(" (", 1)[0].rsplit(".", 1)[1] for found in lightning_private_overrides(ParsesCheckpoints)] == [
        "_parse_ckpt_path"
    ]


PART_HOOKS = (
    "setup",
    "configure_model",
    "on_fit_start",
    "on_train_start",
    "train_dataloader",
    "val_dataloader",
    "on_validation_end",
    "on_save_checkpoint",
    "on_train_end",
    "teardown",
)
"""The hooks of the modules and data modules Lightning calls in a run; none may change the Trainer."""


def trainer_state(trainer) -> Dict[str, object]:
    """What a part could change on ``trainer``: its settings, its strategy's (the checkpoint IO, a
    replaced method) and its callback list (read without properties, which may fill in defaults)."""

    def plain(obj) -> Dict[str, object]:
        return {k: v if isinstance(v, (bool, int, float, str, type(None))) else id(v) for k, v in vars(obj).items()}

    return {
        "trainer": plain(trainer),
        "strategy": plain(trainer.strategy),
        "callbacks": [id(callback) for callback in trainer.callbacks],
    }


def watch_hooks(part, changes: List[str]) -> None:
    """Wrap ``part``'s hooks: each call notes what it changed on the part's Trainer."""
    for hook in PART_HOOKS:
        original = getattr(part, hook, None)
        if original is None:
            continue

        def watched(*args, _original=original, _hook=hook, **kwargs):
            trainer = part.trainer
            before = trainer_state(trainer)
            result = _original(*args, **kwargs)
            after = trainer_state(trainer)
            for section in before:
                if before[section] != after[section]:
                    if isinstance(before[section], dict):
                        keys = {k for k in before[section].keys() | after[section].keys()}
                        diff = sorted(k for k in keys if before[section].get(k) != after[section].get(k))
                    else:
                        diff = section
                    changes.append(f"{type(part).__name__}.{_hook} changed {section}: {diff}")
            return result

        setattr(part, hook, watched)


@pytest.mark.parametrize("iterative", [False, True], ids=["single-shot", "iterative"])
def test_modules_and_data_modules_leave_the_trainer_as_given(iterative, tmp_path):
    from lightning.pytorch import Trainer

    from comlrl_lightning import (
        GenerationSettings,
        IterativePreferenceDataModule,
        MADPOModule,
        PreferenceDataModule,
        TaskOptions,
        TeamOptions,
    )

    sampling = GenerationSettings(max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None)
    module = MADPOModule(team=TeamOptions(agent_model="embedded"), sampling=sampling, agent_learning_rate=3e-3)
    sizes = dict(
        task=TaskOptions(train_dataset="embedded", eval_dataset="embedded"),
        preference_num_candidates=2,
        preference_pairs_per_sample=1,
        train_batch_size=8,
        eval_num_samples=2,
        eval_batch_size=2,
    )
    data = (
        IterativePreferenceDataModule(num_iterations=2, num_train_epochs=1, **sizes)
        if iterative
        else PreferenceDataModule(num_train_epochs=1, **sizes)
    )
    changes: List[str] = []
    watch_hooks(module, changes)
    watch_hooks(data, changes)
    trainer = Trainer(
        max_epochs=data.total_epochs,
        limit_train_batches=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, data)
    assert trainer.global_step == data.total_epochs  # the hooks ran: one update per epoch
    assert not changes, changes
