"""Bounds on data files: a compressed file is counted as a stream and refused, by name, past the size
or ratio bound; stored files by their size; damaged and unsupported archives are named."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zipfile

import pytest

from comlrl_lightning.errors import DataError, MissingPathError
from comlrl_lightning.tasks.file_bounds import (
    FileBounds,
    check_data_files,
    compression_of,
    human_size,
    local_files_under,
    read_data_file,
)

ROWS = b"".join(b'{"prompt": "row %d"}\n' % i for i in range(2000))


def gzip_bomb(path, expanded: int):
    """A gzip file of zeros that expands to ``expanded`` bytes (about 1,000:1)."""
    with gzip.open(path, "wb", compresslevel=9) as handle:
        for _ in range(expanded // (1 << 20)):
            handle.write(bytes(1 << 20))
    return path


def assert_one_line(error, *parts):
    message = str(error.value)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, message


@pytest.mark.parametrize(
    "opener, kind",
    [(gzip.open, "gzip"), (bz2.open, "bz2"), (lzma.open, "xz"), (open, None)],
    ids=["gzip", "bz2", "xz", "plain"],
)
def test_compressed_files_are_read_whole_and_recognised_by_their_first_bytes(tmp_path, opener, kind):
    path = tmp_path / "rows.data"  # the name says nothing: the first bytes do
    with opener(path, "wb") as handle:
        handle.write(ROWS)
    assert compression_of(path) == kind
    assert read_data_file(path, "train_dataset") == ROWS
    assert check_data_files([path], "train_dataset", FileBounds()) == len(ROWS)


def test_a_zip_archive_counts_every_member(tmp_path):
    path = tmp_path / "rows.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a.jsonl", ROWS)
        archive.writestr("b.jsonl", ROWS)
    assert compression_of(path) == "zip"
    assert check_data_files([path], "train_dataset", FileBounds()) == 2 * len(ROWS)
    with pytest.raises(DataError) as error:
        check_data_files([path], "train_dataset", FileBounds(max_bytes=len(ROWS) + 10))
    assert_one_line(error, str(path), "expands past", "max_bytes")


def test_a_gzip_bomb_is_refused_by_its_ratio_before_it_is_decompressed_whole(tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.jsonl.gz", 8 << 20)  # 8 MiB of zeros in a few KiB
    assert bomb.stat().st_size < 100_000
    bounds = FileBounds(max_ratio=100, ratio_after=1 << 20)
    with pytest.raises(DataError) as error:
        check_data_files([bomb], "train_dataset.data_files", bounds)
    assert_one_line(error, "train_dataset.data_files", str(bomb), "100:1", "max_ratio", "over 2.0 MiB")
    # the same file under a bound that lets its ratio pass is refused by its expanded size instead
    with pytest.raises(DataError) as error:
        read_data_file(bomb, "train_dataset", FileBounds(max_bytes=3 << 20, max_ratio=10_000))
    assert_one_line(error, str(bomb), "expands past 3.0 MiB", "max_bytes")
    assert check_data_files([bomb], "x", FileBounds(max_ratio=10_000)) == 8 << 20  # both bounds open: it counts


def test_the_ratio_bound_leaves_small_files_alone(tmp_path):
    bomb = gzip_bomb(tmp_path / "zeros.gz", 2 << 20)  # 1,000:1, but only 2 MiB once expanded
    assert check_data_files([bomb], "x", FileBounds()) == 2 << 20


def test_the_size_bound_holds_for_a_source_s_files_together_and_for_a_stored_file(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(ROWS)
    second.write_bytes(ROWS)
    assert check_data_files([first, second], "x", FileBounds(max_bytes=2 * len(ROWS))) == 2 * len(ROWS)
    with pytest.raises(DataError) as error:
        check_data_files([first, second], "x", FileBounds(max_bytes=2 * len(ROWS) - 1))
    assert_one_line(error, str(second), f"is {human_size(len(ROWS))}, more than")
    sparse = tmp_path / "sparse.jsonl"
    with open(sparse, "wb") as handle:
        handle.truncate(5 << 30)  # 5 GiB that takes no disk: refused by its size, never read
    with pytest.raises(DataError) as error:
        read_data_file(sparse, "train_dataset")
    assert_one_line(error, str(sparse), "is 5.0 GiB, more than 4.0 GiB", "max_bytes")


def test_damaged_and_unsupported_compressed_files_are_named(tmp_path):
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(ROWS)[:200])
    with pytest.raises(DataError) as error:
        read_data_file(cut, "train_dataset")
    assert_one_line(error, str(cut), "cannot be decompressed as gzip")
    archive = tmp_path / "rows.7z"
    archive.write_bytes(b"7z\xbc\xaf\x27\x1c" + bytes(64))
    with pytest.raises(DataError) as error:
        check_data_files([archive], "x", FileBounds())
    assert_one_line(error, str(archive), "7z archive", "extract it first")


def test_a_missing_file_and_a_folder_are_named(tmp_path):
    with pytest.raises(MissingPathError, match="does not exist"):
        read_data_file(tmp_path / "absent.jsonl", "train_dataset")
    with pytest.raises(DataError, match="is a folder"):
        read_data_file(tmp_path, "train_dataset")


def test_the_files_of_a_folder_are_those_datasets_reads(tmp_path):
    for name in ["train.jsonl", "sub/test.jsonl", ".git/pack", "__pycache__/x.pyc", ".hidden.jsonl"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"{}")
    os.symlink(tmp_path / "sub", tmp_path / "linked")  # a linked folder is not walked into
    assert local_files_under(tmp_path) == [tmp_path / "train.jsonl", tmp_path / "sub" / "test.jsonl"]
