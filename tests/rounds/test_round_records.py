"""A round file's bytes (round_records.py): the reference's layout, and the record index that points
each record's bytes out of them."""

from __future__ import annotations

import hashlib
import json

from comlrl_lightning.rounds.round_records import encode_round


def test_round_bytes_are_the_reference_layout_and_the_record_index_points_into_them():
    records = [{"prompts": ["é ü", "x"], "winner_reward": 0.5, "raw_rewards": [1.0, None]}, {"k": 1}, {"k": "\n"}]
    data, index = encode_round(7, records)
    assert data == json.dumps({"iteration": 7, "num_pairs": 3, "pairs": records}, ensure_ascii=False).encode("utf-8")
    for position, record in enumerate(records):
        piece = data[index.offsets[position] : index.offsets[position] + index.lengths[position]]
        assert json.loads(piece) == record and hashlib.sha256(piece).digest() == index.digest(position)
