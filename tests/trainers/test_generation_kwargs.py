"""train(**generation_kwargs): forwarded to every sampler (collection, comparator, evaluation,
rollouts), checked before the run, saved in checkpoints so a resume continues with them."""

from __future__ import annotations

import json
import re

import pytest
import torch

from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.trainers.configs import MADPOIterConfig, MARLHFConfig
from comlrl_lightning.trainers.preference import MADPOIterTrainer, MARLHFTrainer
from comlrl_lightning.validation import OptionError

VOWELS = "aeiou"
SMALL = dict(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, preference_num_candidates=3)


def no_vowels() -> dict:
    """``suppress_tokens``: generate() never samples a vowel of the embedded model's tokenizer."""
    return {"suppress_tokens": load_tokenizer("embedded").convert_tokens_to_ids(list(VOWELS))}


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
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


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_generate_options_reach_the_rollouts(tmp_path):
    rollouts = []
    trainer = MARLHFTrainer(
        agent_model="embedded",
        wandb_config={"output_dir": str(tmp_path)},
        metrics_callback=lambda samples: rollouts.extend(s.completion for s in samples) or {},
        args=MARLHFConfig(
            rl_algorithm="maac", num_generations=2, num_train_epochs=1, eval_interval=0, train_batch_size=8, **SMALL
        ),
    )
    trainer.train(**no_vowels())
    assert rollouts and not any(vowel in text for text in rollouts for vowel in VOWELS)


def test_options_are_checked_before_the_run_saved_whole_and_a_resume_continues_with_them_when_given_none():
    trainer = MADPOIterTrainer(agent_model="embedded", args=MADPOIterConfig(num_iterations=1, **SMALL))
    with pytest.raises(OptionError, match="repetiton_penalty unknown"):
        trainer.train(repetiton_penalty=1.1)
    from transformers import StoppingCriteriaList

    # an object cannot be saved: refused by name when the run starts (a checkpoint would lose it)
    with pytest.raises(OptionError, match="generation option stopping_criteria holds a StoppingCriteriaList object"):
        trainer.train(stopping_criteria=StoppingCriteriaList())
    assert trainer.trainer is None
    saved = {"repetition_penalty": 1.2, "top_k": 5, "suppress_tokens": [1, 2]}
    trainer._apply_generation_kwargs({}, saved)  # a resume given none: every saved one
    settings = trainer.module.generation_settings
    assert settings.top_k == 5 and settings.extra == {"repetition_penalty": 1.2, "suppress_tokens": [1, 2]}
    checkpoint = {}
    trainer.module.on_save_checkpoint(checkpoint)
    assert checkpoint["generation_settings"]["extra"] == settings.extra  # saved whole
    assert trainer.module.hparams["sampling"]["extra"] == settings.extra  # hparams.yaml shows them
    assert trainer.module.hparams_initial["generation_kwargs"] == saved
    trainer._apply_generation_kwargs({"min_p": 0.1}, saved)  # a resume given some: exactly those
    settings = trainer.module.generation_settings
    assert settings.top_k is None and settings.extra == {"min_p": 0.1}
    trainer.module.on_load_checkpoint(checkpoint)  # the checkpoint's settings never replace the given ones
    assert trainer.module.generation_settings == settings


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
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


@pytest.mark.parametrize(
    "saved, named",
    [
        ({"newer_option": 1}, "newer_option unknown to Hugging Face generate()"),
        ({"temperature": "hot"}, "temperature must be a number (got str)"),
        (["top_k"], "hyper_parameters.generation_kwargs is not a mapping"),
    ],
)
def test_generation_kwargs_a_checkpoint_saved_that_cannot_be_used_are_one_error_naming_the_file(saved, named):
    from comlrl_lightning.errors import DataError
    from comlrl_lightning.trainers.checkpoints import saved_generation_kwargs

    with pytest.raises(DataError, match="^ckpt/checkpoint-1: .*" + re.escape(named)):
        saved_generation_kwargs({"hyper_parameters": {"generation_kwargs": saved}}, "ckpt/checkpoint-1")
    assert saved_generation_kwargs({"hyper_parameters": {}}, "x") is None


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
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
