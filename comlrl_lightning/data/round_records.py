"""The names of :mod:`comlrl_lightning.rounds.round_records` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.rounds.round_records import (
    ROUND_FILE_LIMIT,
    RecordIndex,
    ReplayIndexError,
    decode_round,
    encode_round,
    read_round_file,
)

__all__ = ["ROUND_FILE_LIMIT", "RecordIndex", "ReplayIndexError", "decode_round", "encode_round", "read_round_file"]
