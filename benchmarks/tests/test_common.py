"""benchmarks/common.py: the pairs both sides see, their comparison, and the clocks and shares of a measurement."""

from __future__ import annotations

import importlib

import pytest


def test_a_trl_style_padded_batch_reads_back_as_its_pairs(bench):
    """The example of TRL's ``DataCollatorForPreference`` docstring: chosen rows, then rejected rows,
    right-padded; the prompt is what is attended before the completion mask starts."""
    pairs, positions = bench.common.padded_rows(
        [[1, 2, 3, 4, 5], [7, 8, 9, 0, 0], [1, 2, 3, 6, 0], [7, 8, 10, 11, 0]],
        [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]],
        [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 1, 1, 0]],
    )
    assert pairs == [
        {"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5], "rejected_ids": [6]},
        {"prompt_ids": [7, 8], "chosen_ids": [9], "rejected_ids": [10, 11]},
    ]
    assert positions == 20  # 4 rows x 5 columns, padding included
    with pytest.raises(ValueError, match="different prompts"):
        bench.common.padded_rows([[1, 4], [2, 5]], [[1, 1], [1, 1]], [[0, 1], [0, 1]])


def test_dpo_disagreements_name_every_differing_id_and_margin(bench):
    pair = {"prompt_ids": [1, 2], "chosen_ids": [3, 0], "rejected_ids": [4, 0]}
    ours = {"pairs": [pair, pair], "margins": [12.5, -3.0]}
    assert (
        bench.common.dpo_disagreements(ours, {"pairs": [dict(pair), dict(pair)], "margins": [12.5005, -3.0002]}) == []
    )
    other = dict(pair, chosen_ids=[3, 5, 0])
    problems = bench.common.dpo_disagreements(ours, {"pairs": [pair, other], "margins": [12.5, -3.1]})
    assert problems == [
        "pair 1: chosen_ids differ: [3, 0] against [3, 5, 0]",
        "pair 1: margin -3.000000 against -3.100000",
    ]
    assert bench.common.dpo_disagreements(ours, {"pairs": [pair], "margins": [12.5]}) == ["2 pairs against 1"]


def test_median_step_seconds_skips_the_warm_up(bench):
    times = [0.0, 5.0, 6.0, 7.0, 9.0, 10.0]  # warm-up steps end at 0 and 5; then gaps 1, 1, 2, 1
    assert bench.common.median_step_seconds(times, warmup=2) == 1.0
    assert bench.common.median_step_seconds([0.0, 1.0, 3.0, 6.0], warmup=1) == 2.5
    with pytest.raises(ValueError, match="none to measure"):
        bench.common.median_step_seconds([0.0, 1.0], warmup=2)


def test_sampling_share_is_the_covered_part_of_the_window(bench):
    common = bench.common
    assert common.share_within([(0.0, 1.0), (2.0, 3.0), (4.0, 9.0)], 0.5, 4.5) == pytest.approx(2.0 / 4.0)
    intervals = []
    assert common.timed(lambda x: x + 1, intervals)(1) == 2 and len(intervals) == 1
    assert intervals[0][0] <= intervals[0][1]


class LetterTokenizer:
    """One id per character (a-z, space, newline, then EOS): enough of a tokenizer for ``pair_ids``."""

    alphabet = "abcdefghijklmnopqrstuvwxyz \n:"
    eos_token_id = len(alphabet)
    all_special_ids = [len(alphabet)]

    def __len__(self):
        return len(self.alphabet) + 1

    def decode(self, ids):
        return "".join(self.alphabet[i] for i in ids if i < len(self.alphabet))

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [self.alphabet.index(ch) for ch in text]}


def test_pairs_on_the_coding_layout_share_a_long_prompt_four_at_a_time(bench):
    common, tokenizer = bench.common, LetterTokenizer()
    plain = common.pair_ids(tokenizer, 6, (2, 4))
    assert len({p["prompts"][0] for p in plain}) == 6  # one prompt per pair, as before
    laid_out = common.pair_ids(tokenizer, 6, (2, 4), context_words=30, pairs_per_prompt=4)
    prompts = [p["prompts"][0] for p in laid_out]
    assert len(laid_out) == 6 and prompts[0] == prompts[3] != prompts[4] == prompts[5]
    assert len(laid_out[0]["prompt_ids"][0]) >= 30 + len(plain[0]["prompt_ids"][0])
    assert all(p["winner_ids"][a][-1] == tokenizer.eos_token_id for p in laid_out for a in (0, 1))


@pytest.mark.slow
@pytest.mark.real_model
def test_word_completions_tokenize_back_to_their_ids_with_a_real_bpe_tokenizer(bench, real_model):
    """TRL tokenizes the pairs' text, ours takes their ids: with SmolLM2's BPE tokenizer random ids
    come back as other ids, random whole words as the same ones (so ``dpo_check`` can compare)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(real_model)
    random_ids = bench.common.pair_ids(tokenizer, 8, (32, 48))
    words = bench.common.pair_ids(tokenizer, 8, (32, 48), words=True)

    def round_trips(pairs):
        return [
            tokenizer(tokenizer.decode(ids[:-1]), add_special_tokens=False)["input_ids"] == ids[:-1]
            for pair in pairs
            for key in ("winner_ids", "loser_ids")
            for ids in pair[key]
        ]

    assert not all(round_trips(random_ids))
    assert all(round_trips(words)) and len(round_trips(words)) == 32
    assert all(ids[-1] == tokenizer.eos_token_id and 33 <= len(ids) <= 49 for p in words for ids in p["winner_ids"])


def test_time_steps_uses_the_clock_given(bench):
    common = importlib.import_module("common")
    ticks = iter(range(100))
    result = common.time_steps(lambda batch: None, [1, 2], 2, 2, 0.0, windows=2, warmup=1, clock=lambda: next(ticks))
    assert result["seconds"] == 1 and result["pairs_per_s"] == 2.0
