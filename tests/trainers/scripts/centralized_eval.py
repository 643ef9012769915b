"""A centralized team (one model writes both roles) evaluated with eval_logger, as a CoMLRL user runs it.

Environment: SCRIPT_MODEL. Prints one ``RESULT {json}`` line: what the trainer and the callbacks saw.
"""

import json
import os

import torch
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n", "word": word} for word in ("sun", "moon", "tree")]
SEEN = {}


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


def eval_logger(agent_completions_turns, batch_items, prompts):
    SEEN["roles"] = len(agent_completions_turns)
    SEEN["items"] = [len(role) for role in agent_completions_turns]
    SEEN["strings"] = all(isinstance(turns[0], str) for role in agent_completions_turns for turns in role)
    SEEN["words"] = [item["word"] for item in batch_items]
    return [{"n": 1.0} for _ in batch_items]


torch.manual_seed(0)
trainer = MADPOTrainer(
    agent_model=MODEL,
    num_agents=2,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    formatters=[lambda item: item["prompt"] + "writer:", lambda item: item["prompt"] + "matcher:"],
    eval_logger=eval_logger,
    eval_aggregator=lambda metrics, num_turns: {"turn_1/items": float(len(metrics))},
    args=MADPOConfig(
        collaboration_mode="centralized",
        num_train_epochs=1,
        max_new_tokens=8,
        preference_num_candidates=3,
        preference_pairs_per_sample=2,
        eval_interval=100,
        eval_num_samples=2,
    ),
)
joint_prompt = trainer.formatters[0](ITEMS[0])
result = {
    "num_agents": trainer.num_agents,
    "formatters": len(trainer.formatters),
    "joint_prompt_has_both": "writer:" in joint_prompt and "matcher:" in joint_prompt,
    "agents": len(trainer.agents),
}
metrics = trainer.evaluate()
# the turn_1 metrics (this library adds eval/unparsed_rate for a centralized team)
result.update(SEEN, eval=sorted(k for k in metrics if "/turn_1/" in k), items_metric=metrics["eval/turn_1/items"])
print("RESULT " + json.dumps(result))
