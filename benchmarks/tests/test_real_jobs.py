"""benchmarks/real_jobs.py: the real-model jobs' pairs and clock."""

from __future__ import annotations

import importlib
import time


class ChatTokenizer:
    """A word-level stand-in for a chat model's tokenizer: one id per character of each word."""

    eos_token_id = 2

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "<user>" + messages[0]["content"] + "<assistant>"

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [10 + ord(ch) % 50 for ch in text]}


def test_real_pairs_have_exactly_the_token_budget_ending_in_eos_and_are_the_same_every_time(bench):
    real_jobs = importlib.import_module("real_jobs")
    pairs = real_jobs.real_pairs(ChatTokenizer(), 5, 40)
    assert pairs == real_jobs.real_pairs(ChatTokenizer(), 5, 40)  # both sides build the same ids
    for pair in pairs:
        assert pair["prompts"][0].startswith("<user>Write one short sentence about ")
        for key in ("winner_ids", "loser_ids"):
            assert [len(ids) for ids in pair[key]] == [40, 40] and all(ids[-1] == 2 for ids in pair[key])
        assert pair["winner_ids"][0] != pair["loser_ids"][0]
    assert pairs[0]["prompts"][0] != pairs[1]["prompts"][0]  # topics differ by item


def test_the_cpu_clock_counts_this_process(bench):
    real_jobs = importlib.import_module("real_jobs")
    assert real_jobs.clock({}) is time.process_time and real_jobs.clock({"device": "cpu"}) is time.process_time
