"""The comlrl.utils names (comlrl_lightning/utils): each listed name imports from its module and the package,
and the docs table is generated from them (set_reward_range's own tests: tests/trainers/test_reward_utils.py)."""

from __future__ import annotations


def test_every_listed_name_imports_from_its_module_and_the_package():
    import importlib

    import comlrl_lightning.utils as utils

    for name in utils.REFERENCE_NAMES:
        module, _, attribute = name.rpartition(".")
        found = getattr(importlib.import_module(f"comlrl_lightning.utils.{module}"), attribute)
        assert getattr(utils, attribute) is found


def test_the_docs_table_is_generated_from_the_names():
    from pathlib import Path

    from comlrl_lightning.utils import markdown_table

    page = Path(__file__).parents[2] / "docs" / "coming-from-comlrl.md"
    assert markdown_table() in page.read_text(encoding="utf-8")
