"""The joint reward model: joint text, truncation, last-non-pad pooling, and that it learns."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from comlrl_lightning.joint_reward import (
    JointRewardModel,
    RewardScorer,
    encode_joint,
    joint_text,
)
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.team.loading import load_tokenizer


def test_joint_text_is_the_reference_layout():
    assert joint_text(["p1", "p2"], ["c1", "c2"]) == (
        "Joint multi-agent response\n\nAgent 1 prompt:\np1\n\nAgent 1 response:\nc1\n\n"
        "Agent 2 prompt:\np2\n\nAgent 2 response:\nc2"
    )
    assert joint_text(["p1"], ["c1", "c2"]).endswith("Agent 2 prompt:\n\n\nAgent 2 response:\nc2")


def test_encode_joint_matches_the_text_and_truncates_prompts_before_responses():
    tokenizer = load_tokenizer("embedded")
    prompts, completions = ["a long prompt here", "short"], ["answer one", "two"]
    full = encode_joint(tokenizer, prompts, completions, None)
    # (the embedded character vocabulary has no capitals: "J" and "A" are <unk> on both sides)
    assert full == tokenizer(joint_text(prompts, completions))["input_ids"]
    cut = encode_joint(tokenizer, prompts, completions, len(full) - 10)
    assert len(cut) == len(full) - 10
    text = tokenizer.decode(cut)
    assert "answer one" in text and "two" in text  # responses intact
    assert "gent 1 prompt:\nmpt here" in text and "prompt:\nshort" in text  # the longest prompt lost its start
    tiny = tokenizer.decode(encode_joint(tokenizer, prompts, completions, len(full) - 23 - 3))
    assert "gent 1 prompt:\n\n\n" in tiny and "gent 2 prompt:\n\n\n" in tiny  # prompts emptied first
    assert "response:\nanswer \n" in tiny and "response:\ntwo" in tiny  # then the longest response loses its end


_BPE_CORPUS = [
    "Joint multi-agent response",
    "Agent 1 prompt:\nWrite a haiku about the sea.",
    "Agent 2 response:\nWaves fold over stone,\nsalt wind.",
    "- item one\n- item two",
    "the sea, the stone",
] * 3
_PROMPTS = ["Write a haiku about the sea and the stone.", " - item one"]
_COMPLETIONS = ["Waves fold over stone,\nsalt wind.", "\n- item two"]


def _bpe_tokenizer(kind: str):
    """A small BPE tokenizer trained here: ``bytelevel`` (GPT-2 style) or ``metaspace`` (Llama/SentencePiece style,
    which marks each word start and so adds a piece at the start of every separately tokenized segment)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bytelevel":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer, backend.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<eos>"],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        backend = Tokenizer(models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer, backend.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>", "<unk>"], show_progress=False)
    backend.train_from_iterator(_BPE_CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<eos>")


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace"])
def test_encode_joint_tokenizes_the_joint_text_whole_like_the_reference(kind):
    tokenizer = _bpe_tokenizer(kind)
    whole = tokenizer(joint_text(_PROMPTS, _COMPLETIONS))["input_ids"]
    assert encode_joint(tokenizer, _PROMPTS, _COMPLETIONS, None) == whole
    assert encode_joint(tokenizer, _PROMPTS, _COMPLETIONS, len(whole)) == whole  # a budget that fits cuts nothing


def test_encode_joint_truncation_keeps_whole_text_tokens_and_cuts_prompts_first():
    tokenizer = _bpe_tokenizer("bytelevel")  # decodes exactly, so the kept text can be read back
    whole = tokenizer(joint_text(_PROMPTS, _COMPLETIONS))["input_ids"]
    cut = encode_joint(tokenizer, _PROMPTS, _COMPLETIONS, len(whole) - 3)
    assert len(cut) == len(whole) - 3
    start = next(i for i, (a, b) in enumerate(zip(cut, whole)) if a != b)
    assert cut == whole[:start] + whole[start + 3 :]  # three whole-text tokens gone, the rest untouched
    kept_prompt = tokenizer.decode(cut).split("Agent 1 prompt:\n")[1].split("\n\nAgent 1 response")[0]
    assert _PROMPTS[0].endswith(kept_prompt) and len(kept_prompt) < len(_PROMPTS[0])  # the longest lost its start
    assert tokenizer.decode(cut) == joint_text([kept_prompt, _PROMPTS[1]], _COMPLETIONS)
    # a budget below the prompts' tokens: every prompt empty, then the longest response loses its end
    prompt_free = tokenizer(joint_text(["", ""], _COMPLETIONS))["input_ids"]
    tiny = tokenizer.decode(encode_joint(tokenizer, _PROMPTS, _COMPLETIONS, len(prompt_free) - 2))
    assert "Agent 1 prompt:\n\n\nAgent 1 response:\nWaves fold" in tiny and "Agent 2 prompt:\n\n\n" in tiny
    assert tiny.endswith("Agent 2 response:\n\n- item two") and "salt wind." not in tiny


def test_last_non_padding_token_pooling_with_left_and_right_padding():
    tokenizer = load_tokenizer("embedded")
    model = JointRewardModel("embedded").eval()
    ids = tokenizer("vowels and lengths", add_special_tokens=False)["input_ids"]
    pad = tokenizer.pad_token_id
    alone = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))
    right = model(torch.tensor([ids + [pad] * 4]), torch.tensor([[1] * len(ids) + [0] * 4]))
    left = model(torch.tensor([[pad] * 4 + ids]), torch.tensor([[0] * 4 + [1] * len(ids)]))
    torch.testing.assert_close(right, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(left, alone, atol=1e-5, rtol=1e-5)


def _synthetic_pairs(count, seed):
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        vowels = "".join(rng.choice("aeiou") for _ in range(rng.randint(4, 10)))
        consonants = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randint(4, 10)))
        pairs.append(
            PreferencePair(
                prompts=["topic: x\nwriter:", "topic: x\nmatcher:"],
                winner_completions=[vowels, "ok"],
                loser_completions=[consonants, "ok"],
                winner_reward=1.0,
                loser_reward=0.0,
                candidate_reward_mean=0.5,
            )
        )
    return pairs


@pytest.mark.slow  # trains long for the everyday tier
def test_reward_model_learns_a_held_out_synthetic_preference():
    torch.manual_seed(0)
    scorer = RewardScorer.from_source("embedded")
    optimizer = torch.optim.AdamW(scorer.model.parameters(), lr=3e-3)
    train, held_out = _synthetic_pairs(96, seed=1), _synthetic_pairs(64, seed=2)
    for _ in range(3):
        for start in range(0, len(train), 16):
            loss, _, _ = scorer.pair_loss(train[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        _, chosen, rejected = scorer.pair_loss(held_out)
    accuracy = (chosen > rejected).float().mean().item()
    assert accuracy >= 0.9, accuracy


@pytest.mark.parametrize("micro_batch_size", [None, 3])
def test_one_step_lowers_the_bradley_terry_loss_and_raises_the_winners_margin(micro_batch_size):
    """After one AdamW step on the scorer's accumulated Bradley-Terry gradient, the batch's mean
    ``-log sigmoid(s_w - s_l)`` is lower and its mean margin ``s_w - s_l`` higher, with the scores
    taken one joint text at a time and the loss written out here. The margin catches what the loss
    alone does not: an update that prefers the losers (winners and losers swapped in the loss) also
    lowers this batch's mean loss at this step size, by spreading the margins."""
    from comlrl_lightning.modules.optim import adamw

    torch.manual_seed(0)
    scorer = RewardScorer.from_source("embedded")
    scorer.model.eval()  # no dropout: the before and after scores see the same network
    pairs = _synthetic_pairs(7, seed=4)

    @torch.no_grad()
    def margins():
        def score(prompts, completions):
            return scorer.model(**scorer.batch([prompts], [completions]))[0]

        return torch.stack(
            [score(p.prompts, p.winner_completions) - score(p.prompts, p.loser_completions) for p in pairs]
        )

    before = margins()
    optimizer = adamw([p for p in scorer.model.parameters() if p.requires_grad], lr=1e-4)
    optimizer.zero_grad(set_to_none=True)
    scorer.accumulate_pair_loss(pairs, micro_batch_size)
    optimizer.step()
    after = margins()
    loss_before, loss_after = -F.logsigmoid(before).mean(), -F.logsigmoid(after).mean()
    # measured: the loss falls from 0.933 to 0.730, the mean margin rises from -0.220 to 0.006
    # (swapped: 0.923 and -0.319; the sign of the loss flipped: 1.212 and -0.475)
    assert loss_after < loss_before and after.mean() > before.mean(), (before, after)


def test_a_token_budget_needs_a_fast_tokenizer():
    from types import SimpleNamespace

    python_tokenizer = SimpleNamespace(is_fast=False)  # no character offsets to cut by
    RewardScorer(None, python_tokenizer, max_length=None)  # no budget: nothing to cut
    with pytest.raises(ValueError, match="reward_model.max_length needs a fast"):
        RewardScorer(None, python_tokenizer, max_length=8)


@pytest.mark.parametrize("micro_batch_size", [1, 3, 7])
def test_micro_batches_accumulate_the_whole_batchs_gradient(micro_batch_size):
    """grad mean_B l = sum_c (|c| / |B|) grad mean_c l: micro-batches of unequal joint-text lengths
    (so of different padded widths) give the gradient, loss and scores of one pass over the batch."""
    torch.manual_seed(0)
    scorer = RewardScorer.from_source("embedded")
    scorer.model.eval()  # no dropout: the two computations must see the same network
    pairs = _synthetic_pairs(7, seed=3)

    def gradients(size):
        scorer.model.zero_grad(set_to_none=True)
        loss, chosen, rejected = scorer.accumulate_pair_loss(pairs, size)
        return loss, chosen, rejected, [p.grad.clone() for p in scorer.model.parameters() if p.grad is not None]

    whole_loss, whole_chosen, whole_rejected, whole = gradients(None)
    loss, chosen, rejected, micro = gradients(micro_batch_size)
    expected_loss, _, _ = scorer.pair_loss(pairs)
    assert whole_loss == pytest.approx(expected_loss.item(), abs=1e-6)
    assert loss == pytest.approx(whole_loss, abs=1e-5)
    torch.testing.assert_close(chosen, whole_chosen, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rejected, whole_rejected, atol=1e-5, rtol=1e-5)
    assert len(micro) == len(whole) > 0
    for got, want in zip(micro, whole):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_micro_batch_size_is_checked_by_name():
    from comlrl_lightning.joint_reward import RewardModelFit

    with pytest.raises(ValueError, match="reward_model.micro_batch_size"):
        RewardModelFit(micro_batch_size=0)
