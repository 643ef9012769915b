"""The seed API on a real model, SmolLM2-135M-Instruct (a full-parameter team of 2, chat prompts):
by its name and by its .gguf path; interrupted and resumed equals uninterrupted; save_model's
folders load back with plain transformers and generate what the trained team generates."""

from __future__ import annotations

import gc

import pytest
import torch

from comlrl_lightning.defaults import vowel_length_reward
from comlrl_lightning.team.offline_models import offline_model_file
from comlrl_lightning.trainers.configs import MADPOIterConfig
from comlrl_lightning.trainers.preference import MADPOIterTrainer
from tests.conftest import REAL_MODEL
from tests.trainers.test_preference import round_files, weights

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

ITEMS = [{"prompt": "rivers"}, {"prompt": "snow"}]
REAL_ITER = dict(
    max_new_tokens=8,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    agent_learning_rate=1e-5,
    preference_num_candidates=2,
    preference_pairs_per_sample=2,
    eval_interval=4,
    eval_num_samples=1,  # one evaluation item: a resume must repeat the evaluations, not their size
    eval_batch_size=1,
    logging_steps=1,
    train_batch_size=4,  # a round's 4 pairs in one update: the resume still restores Adam's state mid-run
    num_train_epochs=1,
    preference_replay_mode="lambda_decay",
    preference_replay_lambda=0.5,
    preference_replay_sample_size=4,
    comparator_policy="history",
)


def writer_prompt(item):
    return [{"role": "user", "content": f"Write one short sentence about {item['prompt']}."}]


def matcher_prompt(item):
    return [{"role": "user", "content": f"Answer a sentence about {item['prompt']} in as many letters."}]


def madpo_iter(root, rounds: int, source: str) -> MADPOIterTrainer:
    torch.manual_seed(0)
    return MADPOIterTrainer(
        agent_model=source,
        args=MADPOIterConfig(**REAL_ITER, num_iterations=rounds),
        train_dataset=ITEMS,
        eval_dataset=ITEMS,
        reward_func=vowel_length_reward,
        formatters=[writer_prompt, matcher_prompt],
        wandb_config={"output_dir": str(root)},
    )


def greedy(model, tokenizer) -> list:
    prompt = tokenizer.apply_chat_template(writer_prompt(ITEMS[0]), tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)[0].tolist()


def test_by_name_and_by_gguf_path_interrupted_resumed_and_saved(real_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    whole = madpo_iter(tmp_path / "whole", 2, REAL_MODEL)
    start = weights(whole)
    whole.train()
    expected_files, expected = round_files(tmp_path / "whole" / "preference_replay"), weights(whole)
    assert len(expected_files) == 2 and any(not torch.equal(a, b) for a, b in zip(start, expected))
    whole.save_model(str(tmp_path / "saved"))
    team = whole.module.team
    trained_tokens = [greedy(agent.eval(), tokenizer) for agent, tokenizer in zip(team.agents, team.tokenizers)]
    del whole, team, start
    gc.collect()
    for index, tokens in enumerate(trained_tokens):
        folder = tmp_path / "saved" / f"agent_{index}"
        loaded, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        assert tokenizer.chat_template and greedy(loaded, tokenizer) == tokens
        del loaded
    gguf = str(offline_model_file(REAL_MODEL))  # the same model given as its file
    run, checkpoints = tmp_path / "run", str(tmp_path / "run" / "ckpt")
    first = madpo_iter(run, 1, gguf)
    first.train(checkpoint_dir=checkpoints)
    del first
    gc.collect()
    resumed = madpo_iter(run, 2, gguf)
    resumed.train(resume_from_checkpoint=checkpoints)
    assert round_files(run / "preference_replay") == expected_files  # byte for byte
    assert all(torch.equal(a, b) for a, b in zip(weights(resumed), expected))


def test_a_lora_teams_saved_folders_load_with_transformers_and_its_adapters_with_peft(real_model, tmp_path):
    from peft import AutoPeftModelForCausalLM, LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from comlrl_lightning.team.loading import load_tokenizer
    from comlrl_lightning.team.lora import build_lora_agents
    from comlrl_lightning.trainers.configs import MADPOConfig
    from comlrl_lightning.trainers.preference import MADPOTrainer

    torch.manual_seed(0)
    agents = build_lora_agents(real_model, 2, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    small = {k: v for k, v in REAL_ITER.items() if not k.startswith(("preference_replay", "comparator"))}
    trainer = MADPOTrainer(
        agents=agents,
        tokenizer=load_tokenizer(real_model),
        args=MADPOConfig(**{**small, "agent_learning_rate": 1e-3}),  # big enough to move the greedy tokens
        train_dataset=ITEMS,
        reward_func=vowel_length_reward,
        formatters=[writer_prompt, matcher_prompt],
        wandb_config={"output_dir": str(tmp_path / "run")},
    )
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    team = trainer.module.team
    for index, (agent, tokenizer) in enumerate(zip(team.agents, team.tokenizers)):
        agent.eval()
        tokens = greedy(agent, tokenizer)
        folder = tmp_path / "saved" / f"agent_{index}"
        merged = AutoModelForCausalLM.from_pretrained(folder)
        assert greedy(merged, AutoTokenizer.from_pretrained(folder)) == tokens
        del merged
        adapted = AutoPeftModelForCausalLM.from_pretrained(folder / "adapter")
        assert greedy(adapted, tokenizer) == tokens
        del adapted
