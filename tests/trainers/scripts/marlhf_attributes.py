"""MARLHF and iterative MARLHF as a CoMLRL user writes them: train, then read the reward model,
the team and the environment steps; evaluate and save.

Environment: SCRIPT_MODEL. Prints one ``RESULT {json}`` line.
"""

import json
import os

import torch
from comlrl.trainers.preference import (
    JointRewardModel,
    MARLHFConfig,
    MARLHFIterConfig,
    MARLHFIterTrainer,
    MARLHFTrainer,
)
from comlrl.utils import RewardProcessors

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n"} for word in ("sun", "moon")]


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


small = dict(
    max_new_tokens=6,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    preference_num_candidates=3,
    preference_pairs_per_sample=2,
    eval_interval=100,
    eval_num_samples=2,
    num_generations=2,
    num_train_epochs=1,
    reward_model_device="cpu",
    reward_train_batch_size=2,
)
torch.manual_seed(0)
base = MARLHFTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    reward_processor=RewardProcessors.shift(-0.5),
    args=MARLHFConfig(**small),
)
result = {"before": base.reward_model is None, "processed": base.reward_processor(1.0)}
base.train()
result["base"] = {
    "reward_model": isinstance(base.reward_model, JointRewardModel),
    "reward_tokenizer": base.reward_tokenizer is not None,
    "agents": len(base.agents),
    "num_agents": base.num_agents,
    "env_step_counts_generations": base.env_step > 0 and base.env_step % 2 == 0,
    "eval": sorted(base.evaluate()),
}
iterative = MARLHFIterTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    args=MARLHFIterConfig(num_iterations=2, reward_num_train_epochs=1, **small),
)
iterative.train()
result["iterative"] = {
    # task scoring: the round's reward model is dropped once the round is done
    "reward_model": iterative.reward_model is None,
    "args": type(iterative.args).__name__,
    "env_step": iterative.env_step > 0,
}
iterative.save_model("final")
result["saved"] = sorted(name for name in os.listdir("final") if not name.startswith("."))
print("RESULT " + json.dumps(result))
