"""The mutation tool (tools/mutation.py) on a toy module: what it mutates, and that it tells a mutant
the toy test catches from one it misses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools.mutation import Target, find_mutants, run_target

TOY = "def add(a, b):\n    return a + b\n\n\ndef double(a):\n    return a * 2\n"
TOY_TEST = "from toy import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def test_mutants_change_one_node_and_leave_the_rest_of_the_source_as_it_was() -> None:
    source = '''def f(a: int, b: int = 1) -> bool:
    """Docstring: never mutated."""
    message = f"{a + b}"  # f-strings are messages: never mutated
    return a < b and not g(a, key=0)
'''.encode()
    mutants = find_mutants("toy", source)
    changes = {m.description.split(":")[0] + ": " + m.replacement for m in mutants}
    assert changes == {
        "constant: (0)",  # the default 1
        "return: return None",
        "boolean: (a < b or not g(a, key=0))",
        "comparison: (a <= b)",
        "comparison: (a > b)",
        "unary dropped: (g(a, key=0))",
        "argument key= dropped: (g(a))",
        "constant: (1)",  # key=0
    }
    for mutant in mutants:
        mutated = mutant.apply(source)
        ast.parse(mutated)  # every mutant is valid Python
        assert mutated.startswith(source[: mutant.start]) and mutated.endswith(source[mutant.end :])


@pytest.mark.slow  # forks a child per mutant (half a second): the everyday tier starts no process
def test_the_toy_tests_kill_the_mutants_of_the_code_they_check_and_miss_the_others(tmp_path: Path) -> None:
    (tmp_path / "toy.py").write_text(TOY)
    (tmp_path / "test_toy.py").write_text(TOY_TEST)
    target = Target("toy", "toy.py", ("test_toy.py",))
    flipped, doubled_by_three = "operator: `a + b` -> `a - b`", "constant: `2` -> `3`"
    assert {(m.function, m.description) for m in find_mutants("toy", TOY.encode())} >= {
        ("add", flipped),
        ("double", doubled_by_three),
    }
    # two of the five mutants (three pytest runs, the unmutated one first): test_add fails on `a - b`;
    # double has no test, so its `* 3` survives
    result = run_target(tmp_path, target, progress=False, only={("add", flipped), ("double", doubled_by_three)})
    assert (result.killed, result.timeout) == (1, 0)
    assert result.survived == [{"line": 6, "function": "double", "mutation": "constant: `2` -> `3`"}]
    assert result.score == 1 / 2
    assert (tmp_path / "toy.py").read_text() == TOY  # the original is back


def test_every_target_names_a_module_with_code_its_tests_and_scopes_that_exist() -> None:
    """A module that moved (leaving a shim of re-exports behind) or a test file renamed would leave the
    command mutating nothing or running nothing: each target's module has mutants in every name of its
    scope, and each of its test files exists."""
    from tools.mutation import REPO, TARGETS

    for target in TARGETS:
        source = (REPO / target.path).read_bytes()
        assert find_mutants(target.name, source, target.scope), f"{target.name}: {target.path} has no mutants"
        for name in target.scope:
            assert find_mutants(target.name, source, (name,)), f"{target.name}: nothing named {name} to mutate"
        assert all((REPO / test).is_file() for test in target.tests), f"{target.name}: {target.tests}"
