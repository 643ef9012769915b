"""The reference's side (comlrl 1.4.3), run only with the interpreter of its own venv.

Jobs mirror ``ours.py``: ``madpo_step`` drives ``MADPOTrainer._update_from_preference_batch``
(SPEC 7.3) on ``PreferencePair`` objects holding the same token ids, ``collection`` runs
``_build_preference_dataset`` and ``iterative`` runs ``MADPOIterTrainer.train()``.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Dict

import common

common.limit_threads()

import torch  # noqa: E402

common.limit_threads()


def _trainer(job: Dict[str, Any], iterative: bool = False, **config):
    from comlrl.trainers.preference import (
        MADPOConfig,
        MADPOIterConfig,
        MADPOIterTrainer,
        MADPOTrainer,
    )
    from transformers import AutoTokenizer

    config_cls, trainer_cls = (MADPOIterConfig, MADPOIterTrainer) if iterative else (MADPOConfig, MADPOTrainer)
    args = config_cls(
        num_agents=2,
        agent_devices="cpu",
        agent_learning_rate=common.LEARNING_RATE,
        dpo_beta=common.DPO_BETA,
        eval_interval=0,
        **config,
    )
    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    return trainer_cls(
        agents=[job["model"]] * 2,
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=common.items(job.get("items", 1)),
        reward_func=common.reward,
        formatters=list(common.FORMATTERS),
        args=args,
    )


def madpo_step(job: Dict[str, Any]) -> Dict[str, Any]:
    from comlrl.trainers.preference.madpo import AgentPreferenceTensors, PreferencePair

    trainer = _trainer(job, train_batch_size=job["batch_size"])
    for agent in trainer.agents:
        agent.train()
    pool = []
    for raw in common.job_pairs(trainer.tokenizers[0], job):
        tensors = [
            AgentPreferenceTensors(torch.tensor(p), torch.tensor(w), torch.tensor(lo))
            for p, w, lo in zip(raw["prompt_ids"], raw["winner_ids"], raw["loser_ids"])
        ]
        pool.append(
            PreferencePair(
                prompts=raw["prompts"],
                winner_completions=["", ""],
                loser_completions=["", ""],
                agent_tensors=tensors,
                winner_reward=1.0,
                loser_reward=0.0,
                candidate_reward_mean=0.5,
            )
        )
    step = trainer._update_from_preference_batch
    result = common.time_steps(step, pool, job["batch_size"], job["min_pairs"], job["min_seconds"])
    if job.get("count_flops"):
        result["flops_per_step"] = common.count_flops(lambda: step(pool[: job["batch_size"]]))
    return result


def collection(job: Dict[str, Any]) -> Dict[str, Any]:
    trainer = _trainer(
        job,
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        max_new_tokens=job["max_new_tokens"],
        **common.GENERATION,
    )
    for agent in trainer.agents:
        agent.train()
    items = trainer.train_dataset
    trainer.train_dataset = items[:1]
    trainer._build_preference_dataset()  # warm-up
    trainer.train_dataset = items
    seconds, pairs = common.best_of(trainer._build_preference_dataset)
    joint = len(items) * job["candidates"]
    return {"joint_candidates": joint, "seconds": seconds, "per_s": joint / seconds, "pairs": len(pairs)}


def iterative(job: Dict[str, Any]) -> Dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(
            job,
            iterative=True,
            num_iterations=job["rounds"],
            num_train_epochs=1,
            preference_num_candidates=job["candidates"],
            comparator_num_candidates=job["candidates"],
            preference_pairs_per_sample=job["pairs_per_sample"],
            comparator_policy="history",
            comparator_history_k=1,
            train_batch_size=job["train_batch_size"],
            max_new_tokens=job["max_new_tokens"],
            preference_replay_dir=os.path.join(root, "replay"),
            policy_checkpoint_dir=os.path.join(root, "policies"),
            **common.GENERATION,
        )
        trainer.train()
    return {"seconds": time.perf_counter() - started, "rounds": job["rounds"]}


def versions(job: Dict[str, Any]) -> Dict[str, Any]:
    from importlib.metadata import version

    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "comlrl": version("comlrl"),
        "threads": torch.get_num_threads(),
    }


JOBS = {f.__name__: f for f in (madpo_step, collection, iterative, versions)}

if __name__ == "__main__":
    common.worker_main(lambda job: JOBS[job["job"]](job))
