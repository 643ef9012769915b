"""The bytes of a round file, and where each of its records lies in them.

A round file is ``json.dumps({"iteration": ν, "num_pairs": n, "pairs": [records]}, ensure_ascii=False)``
as UTF-8 (the reference's layout, byte for byte). :func:`encode_round` builds those bytes record by
record, so the byte range and sha256 of every record are known (:class:`RecordIndex`): a replay
draw can then read and verify only the records it takes. :func:`decode_round` checks a file read
back against the replay index and the layout; :func:`read_round_file` reads one only once its
bytes have the digest the index recorded (hashed a MiB at a time), so a file planted or grown
under a round file's name is refused without being held in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from array import array
from typing import Any, Dict, List, Sequence, Tuple

from comlrl_lightning.errors import RunStateError
from comlrl_lightning.runtime.files import FileTooLargeError

ROUND_FILE_LIMIT = 2 << 30
"""The largest round file read back (2 GiB); a larger one is a :class:`FileTooLargeError`."""


class ReplayIndexError(RunStateError):
    """An indexed round file is missing, corrupt or does not match the replay index."""


class RecordIndex:
    """Where each record of a round file starts, its length in bytes, and its sha256 (compact arrays)."""

    def __init__(self, offsets: Sequence[int], lengths: Sequence[int], digests: bytes, size: int) -> None:
        self.offsets, self.lengths, self.digests = array("Q", offsets), array("Q", lengths), digests
        self.size = size  # the file's length in bytes

    def digest(self, position: int) -> bytes:
        return self.digests[32 * position : 32 * (position + 1)]


def encode_round(iteration: int, records: Sequence[Dict[str, Any]]) -> Tuple[bytes, RecordIndex]:
    """The round file's bytes, ``json.dumps({"iteration", "num_pairs", "pairs"}, ensure_ascii=False)``
    as UTF-8, built record by record so the byte range and digest of each record are known."""
    head = json.dumps({"iteration": iteration, "num_pairs": len(records), "pairs": []}, ensure_ascii=False)[:-2]
    parts, offsets, lengths, digests = [head.encode("utf-8")], [], [], bytearray()
    position = len(parts[0])
    for number, record in enumerate(records):
        if number:
            parts.append(b", ")
            position += 2
        encoded = json.dumps(record, ensure_ascii=False).encode("utf-8")
        offsets.append(position)
        lengths.append(len(encoded))
        digests += hashlib.sha256(encoded).digest()
        parts.append(encoded)
        position += len(encoded)
    parts.append(b"]}")
    return b"".join(parts), RecordIndex(offsets, lengths, bytes(digests), position + 2)


def read_round_file(path: str, sha256: str) -> bytes:
    """The bytes of the round file ``path``, read whole only once they hash to ``sha256`` (hashed a MiB
    at a time first); :class:`ReplayIndexError` for other bytes or a file that is not a regular one,
    :class:`FileTooLargeError` past :data:`ROUND_FILE_LIMIT`, ``FileNotFoundError`` when missing."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ReplayIndexError(f"Replay round file {path} is not a regular file.")
        if info.st_size > ROUND_FILE_LIMIT:
            raise FileTooLargeError(
                f"{path} (a replay round file) is {info.st_size} bytes, more than the {ROUND_FILE_LIMIT} bytes "
                "a round file holds; it is not a file this library wrote, and is not read."
            )
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
        if digest.hexdigest() != sha256:
            raise ReplayIndexError(
                f"Replay round file {path} is corrupt: its sha256 {digest.hexdigest()} differs from {sha256} "
                "recorded in the replay index."
            )
        handle.seek(0)
        return handle.read(ROUND_FILE_LIMIT + 1)


def decode_round(data: bytes, path: str, sha256: str, num_pairs: int) -> Tuple[List[Dict[str, Any]], RecordIndex]:
    """The records of the round file ``path`` read as ``data``, and their index, after checking that
    the bytes have the digest and the pair count the replay index recorded and this layout exactly."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ReplayIndexError(
            f"Replay round file {path} is corrupt: its sha256 {digest} differs from {sha256} "
            "recorded in the replay index."
        )
    try:
        payload = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ReplayIndexError(f"Replay round file {path} is not valid JSON: {error}.") from error
    pairs = payload.get("pairs") if isinstance(payload, dict) else None
    if not isinstance(pairs, list) or not all(isinstance(record, dict) for record in pairs):
        raise ReplayIndexError(f"Replay round file {path} has no list of pair records under 'pairs'.")
    if len(pairs) != num_pairs or payload.get("num_pairs") != num_pairs:
        raise ReplayIndexError(
            f"Replay round file {path} holds {len(pairs)} pairs (num_pairs {payload.get('num_pairs')}), "
            f"but the replay index expects {num_pairs}."
        )
    encoded, index = encode_round(payload.get("iteration"), pairs)
    if encoded != data:
        raise ReplayIndexError(f"Replay round file {path} is not in the round-file layout this library writes.")
    return pairs, index
