"""A stored round record made trainable again: its texts re-tokenized with each agent's tokenizer."""

from __future__ import annotations

from comlrl_lightning.rounds.records import pair_from_record
from tests.rounds.test_pairing import COMPARATOR, CURRENT, _against


def test_records_become_trainable_pairs_by_retokenizing_text():
    from comlrl_lightning.team.team import Team

    team = Team(["embedded", "embedded"])
    record = _against(CURRENT, COMPARATOR, selection="all").pairs[0].to_record()
    pair = pair_from_record(record, team)
    tokenizer = team.tokenizers[0]
    assert pair.winner_ids[0] == tokenizer("aa", add_special_tokens=False)["input_ids"]
    assert pair.prompt_ids[1] == tokenizer("p1", add_special_tokens=True)["input_ids"]
    assert pair.to_record() == record
