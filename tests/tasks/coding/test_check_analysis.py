"""The analysis behind what a test of a check is (check_analysis.py): which names of ``check`` depend on a
call of the candidate, followed through assignments, methods, loops, ``try`` and branches."""

from __future__ import annotations

import ast

from comlrl_lightning.tasks.coding.check_analysis import tainted_names


def test_taint_follows_assignments_methods_and_loops_to_a_fixed_point():
    source = """
def check(candidate):
    a = 1
    for i in range(3):
        c = b + 1 if i else 0
        b = candidate(i)
    d = {}
    d[1] = c
    e = [a]
"""
    check = ast.parse(source).body[0]
    assert tainted_names(check) == {"b", "c", "d"}


def test_a_name_set_in_a_try_or_a_branch_that_depends_on_a_call_is_call_dependent():
    source = """
def check(candidate):
    try:
        candidate(-1)
        ok = False
    except ValueError:
        ok = True
    if candidate(0) == 1:
        seen = 'yes'
    fixed = 3
    try:
        pass
    except ValueError:
        unrelated = 1
"""
    assert tainted_names(ast.parse(source).body[0]) == {"ok", "seen"}
