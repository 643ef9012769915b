"""Team: loading, tokenizers, seeded batched sampling, and which tokens are scored."""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning.defaults import build_char_tokenizer, build_tiny_model
from comlrl_lightning.generation import HFGenerator
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team

SETTINGS = GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None)


@pytest.fixture(scope="module")
def team():
    return Team(["embedded", "embedded"])


def test_embedded_team_loads_through_from_pretrained_with_pad_set_to_eos(team):
    assert team.num_agents == 2
    tokenizer = team.tokenizers[0]
    assert tokenizer.pad_token_id == tokenizer.eos_token_id is not None
    assert type(team.agents[0]).__name__ == "GPT2LMHeadModel"


def test_model_objects_need_tokenizers():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(len(tokenizer), tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="Tokenizer\\(s\\) must be provided when agents are model objects."):
        Team([model])
    with pytest.raises(ValueError, match="tokenizers length must match agents."):
        Team([model, model], tokenizers=[tokenizer])
    shared = Team([model, model], tokenizers=tokenizer)
    assert shared.tokenizers[0] is shared.tokenizers[1] and tokenizer.pad_token == tokenizer.eos_token


def test_sampling_is_reproducible_per_stream_and_leaves_the_global_rng_alone(team):
    prompts = ["topic: abc\nwriter:", "topic: zz\nwriter:", "topic: q\nwriter:"]
    torch.manual_seed(123)
    global_before = torch.get_rng_state()
    first = HFGenerator().generate(team, 0, prompts, 4, SETTINGS, RandomStream(7))
    assert torch.equal(torch.get_rng_state(), global_before)
    again = HFGenerator().generate(team, 0, prompts, 4, SETTINGS, RandomStream(7))
    other = HFGenerator().generate(team, 0, prompts, 4, SETTINGS, RandomStream(8))
    assert [[c.ids for c in row] for row in first] == [[c.ids for c in row] for row in again]
    assert [[c.ids for c in row] for row in first] != [[c.ids for c in row] for row in other]
    assert len(first) == 3 and all(len(row) == 4 for row in first)


def test_stream_state_continues_across_calls_and_restores_from_state_dict(team):
    stream = RandomStream(3)
    HFGenerator().generate(team, 1, ["topic: a\nmatcher:"], 2, SETTINGS, stream)
    saved = stream.state_dict()
    expected = HFGenerator().generate(team, 1, ["topic: a\nmatcher:"], 2, SETTINGS, stream)
    restored = RandomStream(0)
    restored.load_state_dict(saved)
    assert [c.ids for c in HFGenerator().generate(team, 1, ["topic: a\nmatcher:"], 2, SETTINGS, restored)[0]] == [
        c.ids for c in expected[0]
    ]


def test_completions_stop_after_the_first_eos_and_decode_without_it(team):
    eos = team.tokenizers[0].eos_token_id
    rows = HFGenerator().generate(team, 0, ["topic: abc\nwriter:"] * 4, 16, SETTINGS, RandomStream(0))
    for completion in (c for row in rows for c in row):
        assert eos not in completion.ids[:-1]
        assert len(completion.ids) <= SETTINGS.max_new_tokens
        assert completion.text == team.tokenizers[0].decode(completion.ids, skip_special_tokens=True)


def test_scored_length_parity_and_every_token(team):
    eos = team.tokenizers[0].eos_token_id
    # pad == eos: parity cuts at the EOS (removing it) and then drops the last content token
    assert team.scored_length(0, [5, 6, 7, eos], score_last_token=False) == 2
    assert team.scored_length(0, [5, 6, 7], score_last_token=False) == 2
    assert team.scored_length(0, [5], score_last_token=False) == 0
    assert team.scored_length(0, [eos], score_last_token=False) == 0
    assert team.scored_length(0, [5, 6, 7, eos], score_last_token=True) == 4
    assert team.scored_length(0, [], score_last_token=True) == 0


@pytest.mark.parametrize("pad_is_eos", [True, False], ids=["pad==eos", "pad!=eos"])
def test_score_last_token_cuts_at_the_first_pad_like_the_references_full_completion_scoring(pad_is_eos):
    team = Team(["embedded"])  # its own tokenizer: the pad is changed below
    tokenizer = team.tokenizers[0]
    if not pad_is_eos:
        tokenizer.pad_token = "<unk>"
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert (pad == eos) is pad_is_eos
    # a pad in the middle: pads and whatever follows are never scored; the pad itself only when it is the EOS
    assert team.scored_length(0, [5, 6, pad, 7, 8], score_last_token=True) == (3 if pad_is_eos else 2)
    assert team.scored_length(0, [pad, 7], score_last_token=True) == (1 if pad_is_eos else 0)
    assert team.scored_length(0, [5, 6, 7], score_last_token=True) == 3  # no pad: every token
    assert team.scored_length(0, [5, 6, eos], score_last_token=True) == 3  # the EOS ends the completion, scored


def test_tokenizers_are_loaded_once_per_distinct_source(monkeypatch):
    import comlrl_lightning.team.team as team_module

    loaded = []
    monkeypatch.setattr(team_module, "load_tokenizer", lambda source: loaded.append(source) or f"tokenizer of {source}")
    tokenizers = Team.resolve_tokenizers(["a", "b", "a", "a"], None)
    assert tokenizers == ["tokenizer of a", "tokenizer of b", "tokenizer of a", "tokenizer of a"]
    assert loaded == ["a", "b"]


def _scoring_batches() -> list:
    from comlrl_lightning.team.team import pack_sequences

    return [
        pack_sequences([[3, 4, 5], [7, 8]], [[6, 7, 9], [9]], [2, 1], 0),
        pack_sequences([[5, 4], [2, 3, 4]], [[8], [6, 6]], [1, 2], 0),
    ]


def test_score_gives_tokens_or_their_sums_and_recomputed_graphs_give_the_held_gradients():
    torch.manual_seed(0)
    team = Team(["embedded", "embedded"])
    batches = _scoring_batches()
    tokens = team.score(batches)
    sequences = team.score(batches, unit="sequence")
    for token, sequence, batch in zip(tokens, sequences, batches):
        assert token.shape == batch["score_mask"].shape
        torch.testing.assert_close(sequence, (token * batch["score_mask"]).sum(dim=-1))
    gradients = {}
    for graphs in ("held", "recompute"):
        team.zero_grad(set_to_none=True)
        values = team.score(batches, unit="sequence", graphs=graphs)
        sum(value.sum() for value in values).backward()
        gradients[graphs] = [p.grad.clone() for p in team.parameters() if p.grad is not None]
        assert all(torch.equal(a, b) for a, b in zip(values, sequences))  # the same numbers either way
    assert len(gradients["held"]) == len(gradients["recompute"]) > 0
    assert all(torch.equal(a, b) for a, b in zip(gradients["held"], gradients["recompute"]))


def test_score_of_chosen_agents_equals_their_place_in_the_whole_teams_scoring():
    torch.manual_seed(0)
    team = Team(["embedded", "embedded"])
    with torch.no_grad():  # the agents differ, so scoring by the wrong one shows
        for parameter in team.agents[0].parameters():
            parameter.mul_(1.5)
    batches = _scoring_batches()
    whole = team.score(batches, unit="sequence")
    (second,) = team.score([batches[1]], unit="sequence", agents=[1])
    torch.testing.assert_close(second, whole[1])
    (first_by_second,) = team.score([batches[1]], unit="sequence", agents=[0])
    assert not torch.allclose(first_by_second, whole[1])  # another agent's weights: other numbers


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(unit="tokens"), "unit must be 'token' or 'sequence'"),
        (dict(graphs="kept"), "graphs must be 'held' or 'recompute'"),
        (dict(agents=[0]), "2 batches but 1 agents"),
    ],
)
def test_score_refuses_an_unknown_option_by_name(options, message):
    team = Team(["embedded", "embedded"])
    with pytest.raises(ValueError, match=message):
        team.score(_scoring_batches(), **options)
