"""An iterative MADPO run logged to W&B (offline), with reward distributions, as a CoMLRL user writes it.

Environment: SCRIPT_MODEL, WANDB_MODE=offline. The run goes to ./wandb_out; the test reads its
config keys and metric names back from the offline record. Prints one ``RESULT {json}`` line.
"""

import json
import os

import torch
from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer
from comlrl.utils.reward_utils import set_reward_range

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n"} for word in ("sun", "moon", "tree", "rain")]


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


set_reward_range(vowel_reward, 0.0, 1.0)
args = MADPOIterConfig(
    num_iterations=2,
    max_new_tokens=6,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    preference_num_candidates=3,
    preference_pairs_per_sample=2,
    eval_interval=2,
    eval_num_samples=2,
    logging_steps=1,
    train_batch_size=2,
    log_reward_distribution=True,
)
os.makedirs("wandb_out", exist_ok=True)
torch.manual_seed(0)
trainer = MADPOIterTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    formatters=[lambda item: item["prompt"] + "writer:", lambda item: item["prompt"] + "matcher:"],
    wandb_config={
        "project": "seed-api",
        "name": "wandb-run",
        "dir": os.path.abspath("wandb_out"),
        "tags": ["scripts"],
        "config_sections": {"dataset": {"name": "words", "type": "toy"}, "output": {"verbose": False}},
    },
    args=args,
)
trainer.train()
metrics = trainer.evaluate()
trainer.save_model("final")
print("RESULT " + json.dumps({"env_step": trainer.env_step > 0, "eval": sorted(metrics)}))
