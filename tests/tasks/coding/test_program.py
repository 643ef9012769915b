"""The combination rule and what the reward reads from the program, on hand-written completions."""

from __future__ import annotations

import ast

from comlrl_lightning.tasks.coding.program import (
    combine,
    definitions,
    ignores_result,
    is_thin_wrapper,
    problem_imports,
    returns_value,
    strip_fences,
)

ITEM = {
    "entry_point": "f",
    "prompt": 'import math\nfrom typing import List\n\n\ndef f(x):\n    """from here on\n    import nothing"""\n',
}


def function(source: str):
    return ast.parse(source).body[0]


def test_fences_are_stripped_and_only_def_blocks_are_kept():
    text = "Sure! Here it is:\n```python\nimport os\nx = 1\n@staticmethod\ndef g(a):\n    return a\n\nprint(g(1))\n```\nHope it helps."
    assert "```" not in strip_fences(text)
    # prose around the code: the text does not parse, so blocks are found line by line
    assert [d.name for d in definitions(text)] == ["g"]
    assert definitions(text)[0].source == "def g(a):\n    return a"
    # code that parses: top-level functions from the syntax tree, decorators included
    parsed = definitions("import os\n\n@staticmethod\ndef g(a):\n    s = '''\ndef h():\n'''\n    return a\nx = g(2)\n")
    assert [d.name for d in parsed] == ["g"] and parsed[0].source.startswith("@staticmethod\ndef g(a):")
    assert "def h" in parsed[0].source  # a def inside a string is not a block of its own


def test_indented_blocks_in_prose_are_dedented():
    [block] = definitions("Answer:\n    def g(a):\n        return a + 1\nThat is all.")
    assert block.source == "def g(a):\n    return a + 1"


def test_problem_imports_are_the_import_lines_of_the_prompt():
    assert problem_imports(ITEM["prompt"]) == ["import math", "from typing import List"]


def test_a_return_of_a_value_is_what_counts():
    assert returns_value(definitions("def g():\n    return 1\n")[0])
    assert not returns_value(definitions("def g():\n    return\n")[0])
    assert not returns_value(definitions("def g():\n    def h():\n        return 1\n    h()\n")[0])
    assert returns_value(definitions("def g(:\n    return 1\n")[0])  # does not parse: read as text


def test_the_program_is_imports_then_aux_then_main_and_each_side_keeps_its_function():
    aux = "def aux(x):\n    return x * 2\n\ndef f(x):\n    return 0\n"
    main = "def aux(x):\n    return 0\n\ndef f(x):\n    return aux(x) + math.pi\n"
    joint = combine(aux, main, ITEM)
    assert joint.program == (
        "import math\nfrom typing import List\n\n\ndef aux(x):\n    return x * 2\n\n\ndef f(x):\n    return aux(x) + math.pi\n"
    )
    assert joint.aux_defined and joint.aux_returns and joint.main_returns and joint.parses
    assert joint.calls_aux and joint.thin_wrapper and not joint.ignores_aux_result


def test_a_program_that_does_not_parse_reads_no_collaboration():
    joint = combine("def aux(x):\n    return x\n", "def f(x):\n    y = aux(x\n    return y\n", ITEM)
    assert joint.main_returns and not joint.parses and not joint.calls_aux


def test_thin_wrappers_and_dropped_results():
    assert is_thin_wrapper(function("def f(x):\n    return aux(x)\n"))
    assert is_thin_wrapper(function("def f(x):\n    '''doc'''\n    r = aux(x)\n    return r\n"))
    assert is_thin_wrapper(function("def f(x):\n    '''only a docstring'''\n"))
    assert not is_thin_wrapper(function("def f(x):\n    r = aux(x)\n    return r + 1\n"))
    assert not is_thin_wrapper(function("def f(x):\n    r = aux(x)\n    r.sort()\n    return r\n"))
    assert ignores_result(function("def f(x):\n    for i in x:\n        aux(i)\n    return 1\n"))
    assert not ignores_result(function("def f(x):\n    return [aux(i) for i in x]\n"))
