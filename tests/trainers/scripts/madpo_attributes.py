"""MADPO as a CoMLRL user writes it: read the trainer's attributes, train, evaluate, save.

Environment: SCRIPT_MODEL (a local causal-LM folder); outputs go to the working directory.
Prints one ``RESULT {json}`` line.
"""

import json
import os

import torch
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
from comlrl.utils import RewardProcessors
from comlrl.utils.reward_utils import set_reward_range

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n"} for word in ("sun", "moon")]


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


set_reward_range(vowel_reward, 0.0, 1.0)

args = MADPOConfig(
    num_train_epochs=1,
    max_new_tokens=6,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    preference_num_candidates=4,
    preference_pairs_per_sample=2,
    eval_interval=2,
    eval_num_samples=2,
    logging_steps=1,
    train_batch_size=2,
)
torch.manual_seed(0)
trainer = MADPOTrainer(
    agent_model=MODEL,
    num_agents=2,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    reward_processor=RewardProcessors.scale(2.0),
    formatters=[lambda item: item["prompt"] + "writer:", lambda item: item["prompt"] + "matcher:"],
    args=args,
)
result = {
    "num_agents": trainer.num_agents,
    "agents": len(trainer.agents),
    "tokenizers": len(trainer.tokenizers),
    "tokenizer_is_first": trainer.tokenizer is trainer.tokenizers[0],
    "formatters": [formatter(ITEMS[0]) for formatter in trainer.formatters],
    "processed": trainer.reward_processor(0.25),
    "reward_range": list(trainer.reward_func.reward_range),
    "args": type(trainer.args).__name__,
    "env_step_before": trainer.env_step,
}
trainer.train()
result["env_step_counts_pairs"] = trainer.env_step > 0 and trainer.env_step % 2 == 0
result["eval_keys"] = sorted(trainer.evaluate())
trainer.save_model("final")
result["saved"] = sorted(name for name in os.listdir("final") if not name.startswith("."))
print("RESULT " + json.dumps(result))
