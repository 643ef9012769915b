"""The bytes of a round file, and where each of its records lies in them.

A round file is ``json.dumps({"iteration": ν, "num_pairs": n, "pairs": [records]}, ensure_ascii=False)``
as UTF-8 (the reference's layout, byte for byte). :func:`encode_round` builds those bytes record by
record, so the byte range and sha256 of every record are known (:class:`RecordIndex`): a replay
draw can then read and verify only the records it takes.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from typing import Any, Dict, Sequence, Tuple


class RecordIndex:
    """Where each record of a round file starts, its length in bytes, and its sha256 (compact arrays)."""

    def __init__(self, offsets: Sequence[int], lengths: Sequence[int], digests: bytes) -> None:
        self.offsets, self.lengths, self.digests = array("Q", offsets), array("Q", lengths), digests

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
    return b"".join(parts), RecordIndex(offsets, lengths, bytes(digests))
