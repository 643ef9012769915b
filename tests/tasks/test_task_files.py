"""Task files: compressed .json/.jsonl load; lines nested too deep or with too long an integer are
named by file and line, never a raw RecursionError or ValueError."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest

from comlrl_lightning.errors import DataError
from comlrl_lightning.tasks.file_bounds import FileBounds
from comlrl_lightning.tasks.task import load_items
from comlrl_lightning.tasks.task_files import (
    deepest_nesting,
    longest_integer,
    read_json,
    read_jsonl,
    task_file_format,
)
from tests.helpers.unloaded_fit import fit_without_a_model

ITEMS = [{"prompt": "ab"}, {"prompt": "cd", "n": 3}]
JSONL = "".join(json.dumps(item) + "\n" for item in ITEMS).encode()


@pytest.mark.parametrize(
    "name, kind",
    [("a.jsonl", "jsonl"), ("a.jsonl.gz", "jsonl"), ("a.json.xz", "json"), ("a.json", "json"), ("a.json.zst", "json")]
    + [("gsm8k", None), ("a.jsonl.tar", None), ("data/", None), ("a.gz", None)],
)
def test_task_file_names(name, kind):
    assert task_file_format(name) == kind


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_a_compressed_task_file_loads_as_the_plain_one(tmp_path, suffix, compress):
    jsonl = tmp_path / f"items.jsonl{suffix}"
    jsonl.write_bytes(compress(JSONL))
    plain = tmp_path / f"items.json{suffix}"
    plain.write_bytes(compress(json.dumps({"items": ITEMS}).encode()))
    assert load_items(str(jsonl)) == ITEMS
    assert load_items(str(plain)) == ITEMS


def test_a_task_file_is_read_under_the_bounds(tmp_path):
    path = tmp_path / "items.jsonl.gz"
    path.write_bytes(gzip.compress(JSONL))
    with pytest.raises(DataError, match=rf"{path} expands past .*max_bytes"):
        read_jsonl(path, "train_dataset", FileBounds(max_bytes=len(JSONL) - 1))


def deep(depth: int) -> str:
    return '{"prompt": ' + "[" * depth + "]" * depth + "}"


def test_a_line_nested_too_deep_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(ITEMS[0]) + "\n\n" + deep(100_000) + "\n")
    with pytest.raises(DataError) as error:
        load_items(str(path))
    message = str(error.value)
    assert message.startswith(f"train_dataset: {path} line 3: lists and objects nested 100001 deep"), message
    assert "\n" not in message and error.value.__cause__ is None


def test_an_integer_too_long_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(ITEMS[0]) + '\n{"prompt": "a", "n": ' + "9" * 5000 + "}\n")
    with pytest.raises(DataError) as error:
        load_items(str(path))
    assert str(error.value) == (
        f"train_dataset: {path} line 2: an integer of 5000 digits, more than Python converts (4300); "
        "write it as a string."
    )


def test_in_a_json_file_the_line_is_found_after_the_failure(tmp_path):
    path = tmp_path / "items.json"
    path.write_text('[\n{"prompt": "[[[[ in a string"},\n' + deep(5000) + "\n]")
    with pytest.raises(DataError, match=rf"^eval_dataset: {path} line 3: lists and objects nested 5002 deep"):
        read_json(path, "eval_dataset")
    path.write_text('[\n{"prompt": "' + "1" * 6000 + '", "x": 1.' + "5" * 6000 + '},\n{"n": -' + "7" * 4400 + "}]")
    with pytest.raises(DataError, match=rf"^eval_dataset: {path} line 3: an integer of 4400 digits"):
        read_json(path, "eval_dataset")


def test_the_locating_scans_skip_strings_and_fractions():
    assert deepest_nesting('{"a": "[[[[[", "b": [[1]]}\n[]') == (3, 1)
    assert deepest_nesting('[\n"\\"[["\n,[[\n[1]]]]') == (4, 4)
    assert longest_integer('{"a": "123456789", "b": 12.345678, "c": 1e123456}\n{"d": 1234}') == (4, 2)


def test_a_malformed_jsonl_line_is_named_with_file_and_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"prompt": "ab"}\n\n{"prompt": "cd"\n')
    with pytest.raises(ValueError, match=rf"train_dataset: {path} line 3: not valid JSON"):
        fit_without_a_model(tmp_path, train_dataset=str(path), reward_func=lambda a, b: [0.0])
