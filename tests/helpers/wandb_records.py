"""Read a W&B offline run back from its ``run-*.wandb`` file: the run config and the history rows.

The file is W&B's record log (LevelDB's log format: a 7-byte header, then 32 KiB blocks of
``crc32 (4) | length (2) | type (1) | data`` chunks, a record split over FULL / FIRST / MIDDLE /
LAST chunks); each record is a ``wandb_internal_pb2.Record`` protobuf.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

HEADER = 7
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def settled(path: Path, timeout: float = 30.0) -> Path:
    """``path`` once W&B's service has written it out: ``wandb.finish()`` can return before the
    service closes the file, so wait until it holds records and its size stays put for half a second."""
    deadline, last = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        size = Path(path).stat().st_size
        if size > HEADER and size == last:
            return Path(path)
        last = size
        time.sleep(0.5)
    raise AssertionError(f"{path} was not written out within {timeout} s")


def records(path: Path) -> Iterator[bytes]:
    """The raw records of a ``.wandb`` file, in order."""
    data = settled(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B record log"
    position, pending = HEADER, b""
    while position + HEADER <= len(data):
        room = BLOCK - position % BLOCK
        if room < HEADER:  # the rest of a block too small for a chunk header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + HEADER])
        chunk = data[position + HEADER : position + HEADER + length]
        position += HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_run(path: Path) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """``(config, history)`` of a run file: every config key's last value, and each history row
    (``_step`` included) with its values decoded from JSON."""
    from wandb.proto import wandb_internal_pb2

    config: Dict[str, Any] = {}
    history: List[Dict[str, Any]] = []
    for raw in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config.update({_key(item): json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            config.update({_key(item): json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            history.append({_key(item): json.loads(item.value_json) for item in record.history.item})
    config = {key: value.get("value", value) if isinstance(value, dict) else value for key, value in config.items()}
    return config, history


def run_files(folder: Path) -> List[Path]:
    """The ``run-*.wandb`` files under ``folder`` (a ``wandb`` dir), newest last."""
    return sorted(Path(folder).rglob("run-*.wandb"), key=lambda path: path.stat().st_mtime)


__all__ = ["read_run", "records", "run_files", "settled"]
