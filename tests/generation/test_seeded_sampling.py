"""Per-request seeded sampling: the draws belong to a request, so the tokens do not depend on the batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.seeded_sampling import (
    GOLDEN_GAMMA,
    SEED_BOUND,
    inverse_cdf_tokens,
    request_seeds,
    row_uniforms,
    seeded_sampling_options,
    splitmix64,
)
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team

SETTINGS = GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None)
PROMPTS = ["topic: abc\nwriter:", "topic: zz\nwriter:", "topic: qwerty uiop\nwriter:", "topic: k\nwriter:"]


@pytest.fixture(scope="module")
def team():
    return Team(["embedded"])


def _ids(samples):
    return [[c.ids for c in row] for row in samples]


def test_splitmix64_gives_the_published_sequence():
    # SplitMix64 seeded with 1234567: state += gamma, output = mix(state) (the published test vector)
    states = np.uint64(1234567) + np.arange(1, 4, dtype=np.uint64) * np.uint64(GOLDEN_GAMMA)
    assert splitmix64(states).tolist() == [6457827717110365317, 3203168211198807973, 9817491932198370423]


def test_a_rows_uniforms_come_from_its_request_seed_plus_its_sample_index():
    mask = 2**64 - 1

    def mix(z: int) -> int:  # SplitMix64's output function in plain Python integers
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & mask
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    seed = SEED_BOUND - 5
    uniforms = row_uniforms([7, seed], 3, 4)
    assert uniforms.shape == (6, 4) and uniforms.dtype == torch.float64
    key = mix(seed + 2)  # the third sample of the second request: row 1 * 3 + 2
    expected = [(mix((key + (t + 1) * GOLDEN_GAMMA) & mask) >> 11) * 2.0**-53 for t in range(4)]
    assert uniforms[5].tolist() == expected
    assert torch.equal(row_uniforms([seed], 3, 4), uniforms[3:])  # a row does not depend on the other rows


def test_inverse_cdf_picks_where_the_cumulative_probability_first_passes_the_draw():
    probabilities = torch.tensor([0.0, 0.1, 0.2, 0.0, 0.7])
    scores = probabilities.log().expand(6, 5)  # log 0 = -inf: filtered out
    draws = torch.tensor([0.0, 0.05, 0.1, 0.29, 0.31, 0.999], dtype=torch.float64)
    # cumulative: 0, .1, .3, .3, 1 -> the first index whose cumulative value exceeds u
    assert inverse_cdf_tokens(scores, draws).tolist() == [1, 1, 2, 2, 4, 4]


def test_the_draws_follow_the_softmax():
    torch.manual_seed(0)
    logits = 2 * torch.randn(1, 8)
    logits[0, 3] = float("-inf")
    expected = logits.softmax(dim=-1)[0].double()
    rows = 40000
    seeds = request_seeds(RandomStream(0), rows)
    tokens = inverse_cdf_tokens(logits.expand(rows, 8), row_uniforms(seeds, 1, 1)[:, 0])
    counts = torch.bincount(tokens, minlength=8).double()
    assert counts[3] == 0
    kept = expected > 0
    chi_square = float(((counts - rows * expected)[kept] ** 2 / (rows * expected[kept])).sum())
    assert chi_square < 24.3  # the 0.999 quantile of chi-square with 6 degrees of freedom


def test_request_seeds_come_from_the_streams_torch_state_and_advance_it():
    stream, twin = RandomStream(4), RandomStream(4)
    first, second = request_seeds(stream, 3), request_seeds(stream, 2)
    assert first + second == request_seeds(twin, 3) + request_seeds(twin, 2)
    assert all(0 <= seed < SEED_BOUND for seed in first + second) and first != second[:3]
    assert stream.python.random() == RandomStream(4).python.random()  # pair selection's draws are left alone


def test_the_tokens_do_not_depend_on_how_prompts_are_batched(team):
    stream_seeds = request_seeds(RandomStream(11), len(PROMPTS))
    together = HFGenerator().sample(team, [0] * 4, team.encode_prompts(0, PROMPTS), stream_seeds, 3, SETTINGS)
    split = HFGenerator(batch_size=3).sample(team, [0] * 4, team.encode_prompts(0, PROMPTS), stream_seeds, 3, SETTINGS)
    alone = [
        HFGenerator().sample(team, [0], team.encode_prompts(0, [prompt]), [seed], 3, SETTINGS)[0]
        for prompt, seed in zip(PROMPTS, stream_seeds)
    ]
    assert _ids(together) == _ids(split) == _ids(alone)
    assert len({tuple(ids) for row in _ids(together) for ids in row}) > 4  # samples of one prompt differ
    # generate() draws one seed per prompt from the stream, in prompt order
    assert _ids(HFGenerator().generate(team, 0, PROMPTS, 3, SETTINGS, RandomStream(11))) == _ids(together)


def test_temperature_then_top_k_then_top_p_then_the_draw(team):
    probabilities = torch.tensor([0.05, 0.5, 0.15, 0.3])
    settings = GenerationSettings(max_new_tokens=1, temperature=0.5, top_k=3, top_p=0.8)
    seeds = request_seeds(RandomStream(1), 1)
    options = seeded_sampling_options(settings, team.tokenizers[0], seeds, 64, prompt_width=5)
    assert options["do_sample"] is False  # greedy on what the sampler leaves
    scores = probabilities.log().expand(64, 4).clone()
    for processor in options["logits_processor"]:
        scores = processor(torch.zeros(64, 5, dtype=torch.long), scores)
    tokens = scores.argmax(dim=-1)
    assert bool((scores.isfinite().sum(dim=-1) == 1).all())
    # by hand: p^2 / sum = (.0068, .6849, .0616, .2466); top-k 3 drops token 0; top-p 0.8 then drops
    # token 2 (its renormalised share .062 is within 1 - 0.8); tokens 1 and 3 keep .6849 : .2466
    share = 0.6849315 / (0.6849315 + 0.2465753)
    uniforms = row_uniforms(seeds, 64, 1)[:, 0]
    assert tokens.tolist() == torch.where(uniforms < share, 1, 3).tolist()
    assert set(tokens.tolist()) == {1, 3}


def test_greedy_settings_leave_no_randomness(team):
    def sample(**settings):
        options = GenerationSettings(**{**vars(SETTINGS), **settings})
        return _ids(HFGenerator().generate(team, 0, PROMPTS, 4, options, RandomStream(2)))

    greedy = sample(top_k=1)
    assert all(len({tuple(ids) for ids in row}) == 1 for row in greedy)
    assert sample(top_p=1e-6) == sample(temperature=1e-4) == greedy
    assert sample() != greedy
