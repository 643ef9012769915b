"""train(**generation_kwargs): forwarded to every sampler (collection, comparator, evaluation,
rollouts), checked before the run, saved in checkpoints so a resume continues with them."""

from __future__ import annotations

import json

import pytest
import torch

from comlrl_lightning.options import OptionError
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.trainers.configs import MADPOIterConfig, MARLHFConfig
from comlrl_lightning.trainers.preference import MADPOIterTrainer, MARLHFTrainer

VOWELS = "aeiou"
SMALL = dict(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, preference_num_candidates=3)


def no_vowels() -> dict:
    """``suppress_tokens``: generate() never samples a vowel of the embedded model's tokenizer."""
    return {"suppress_tokens": load_tokenizer("embedded").convert_tokens_to_ids(list(VOWELS))}


def test_generate_options_reach_collection_the_comparator_and_evaluation(tmp_path):
    seen = []

    def eval_logger(agent_completions_turns, batch_items, prompts):
        seen.extend(text for agent in agent_completions_turns for item in agent for text in item)
        return [{}]

    torch.manual_seed(0)
    trainer = MADPOIterTrainer(
        agent_model="embedded",
        eval_logger=eval_logger,
        eval_aggregator=lambda metrics, num_turns: {},
        wandb_config={"output_dir": str(tmp_path)},
        args=MADPOIterConfig(
            num_iterations=1, preference_pairs_per_sample=2, eval_interval=1, eval_num_samples=2, **SMALL
        ),
    )
    trainer.train(**no_vowels())
    pairs = json.loads((tmp_path / "preference_replay" / "iteration_0001.json").read_text())["pairs"]
    texts = [t for p in pairs for side in ("winner_completions", "loser_completions") for t in p[side]]
    assert texts and seen  # both sides of every pair (current and comparator) and every evaluation
    assert not any(vowel in text for text in texts + seen for vowel in VOWELS)


def test_generate_options_reach_the_rollouts():
    rollouts = []
    trainer = MARLHFTrainer(
        agent_model="embedded",
        metrics_callback=lambda samples: rollouts.extend(s.completion for s in samples) or {},
        args=MARLHFConfig(
            rl_algorithm="maac", num_generations=2, num_train_epochs=1, eval_interval=0, train_batch_size=8, **SMALL
        ),
    )
    trainer.train(**no_vowels())
    assert rollouts and not any(vowel in text for text in rollouts for vowel in VOWELS)


def test_options_are_checked_before_the_run_and_saved_for_a_resume(tmp_path):
    trainer = MADPOIterTrainer(agent_model="embedded", args=MADPOIterConfig(num_iterations=1, **SMALL))
    with pytest.raises(OptionError, match="repetiton_penalty unknown"):
        trainer.train(repetiton_penalty=1.1)
    assert trainer.trainer is None
    module = trainer.module
    module.generation_settings = module.generation_settings.__class__(max_new_tokens=3, extra={"min_new_tokens": 2})
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    resumed = MADPOIterTrainer(agent_model="embedded", args=MADPOIterConfig(num_iterations=1, **SMALL)).module
    resumed.on_load_checkpoint(checkpoint)  # a resume without generation kwargs continues with the saved ones
    assert resumed.generation_settings == module.generation_settings
    given = MADPOIterTrainer(agent_model="embedded", args=MADPOIterConfig(num_iterations=1, **SMALL))
    given._apply_generation_kwargs({"repetition_penalty": 1.2})
    given.module.on_load_checkpoint(checkpoint)  # ... and one with them keeps them
    assert given.module.generation_settings.extra == {"repetition_penalty": 1.2}


def test_a_resume_without_the_options_continues_as_the_run_with_them(tmp_path):
    options = dict(repetition_penalty=1.5, **no_vowels())

    def trainer(rounds: int, folder: str) -> MADPOIterTrainer:
        torch.manual_seed(0)
        return MADPOIterTrainer(
            agent_model="embedded",
            args=MADPOIterConfig(num_iterations=rounds, preference_pairs_per_sample=2, eval_interval=0, **SMALL),
            wandb_config={"output_dir": str(tmp_path / folder)},
        )

    whole = trainer(2, "whole")
    whole.train(**options)
    first = trainer(1, "parts")
    first.train(checkpoint_dir=str(tmp_path / "ckpt"), **options)
    resumed = trainer(2, "parts")
    resumed.train(resume_from_checkpoint=str(tmp_path / "ckpt"))  # the options come from the checkpoint
    assert resumed.module.generation_settings == whole.module.generation_settings
    round_two = "preference_replay/iteration_0002.json"
    assert (tmp_path / "parts" / round_two).read_bytes() == (tmp_path / "whole" / round_two).read_bytes()
    for mine, theirs in zip(resumed.agents, whole.agents):
        assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), theirs.state_dict().values()))


def test_beam_search_as_a_generate_option_runs_collection_and_evaluation(tmp_path):
    """``train(num_beams=2)``, as the reference forwards it to generate(): beam sampling in every sampler."""
    torch.manual_seed(0)
    trainer = MADPOIterTrainer(
        agent_model="embedded",
        wandb_config={"output_dir": str(tmp_path)},
        args=MADPOIterConfig(num_iterations=1, preference_pairs_per_sample=2, eval_num_samples=2, **SMALL),
    )
    trainer.train(num_beams=2, length_penalty=0.5)
    payload = json.loads((tmp_path / "preference_replay" / "iteration_0001.json").read_text())
    assert payload["num_pairs"] == len(payload["pairs"]) > 0
    assert trainer.module.generation_settings.extra == {"num_beams": 2, "length_penalty": 0.5}
    assert set(trainer.evaluate()) == {"eval/turn_1/reward_mean", "eval/turn_1/expected_return"}
    with pytest.raises(OptionError, match="penalty_alpha is not supported: contrastive search"):
        trainer.train(penalty_alpha=0.6)
