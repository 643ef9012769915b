"""Domain metrics the CoMLRL way: eval_logger + eval_aggregator (MADPO), metrics_callback (MARLHF maac).

Environment: SCRIPT_MODEL. Prints one ``RESULT {json}`` line: the keys evaluate() returns and what
the callbacks were given.
"""

import json
import os

import torch
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer, MARLHFConfig, MARLHFTrainer

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n", "word": word} for word in ("sun", "moon", "tree")]
SEEN = {}


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


def eval_logger(agent_completions_turns, batch_items, prompts):
    SEEN["logger"] = {
        "agents": len(agent_completions_turns),
        "items": [len(agent) for agent in agent_completions_turns],
        "turns": [len(agent[0]) for agent in agent_completions_turns],
        "words": [item["word"] for item in batch_items],
        "prompts": prompts,
    }
    return [{"length": float(sum(len(agent[k][0]) for agent in agent_completions_turns))} for k in range(len(prompts))]


def eval_aggregator(metrics, num_turns):
    SEEN["num_turns"] = num_turns
    return {"turn_1/mean_length": sum(m["length"] for m in metrics) / len(metrics), "turn_1/count": len(metrics)}


def metrics_callback(rollouts):
    shape = [[r.agent_idx for r in rollouts], [r.metadata["generation_idx"] for r in rollouts]]
    shape.append(all(r.metadata["batch_item"]["word"] in r.prompt for r in rollouts))
    shape.append([float(r.reward.item()) == float(r.reward.item()) for r in rollouts])
    SEEN.setdefault("rollouts", [])
    if shape not in SEEN["rollouts"]:
        SEEN["rollouts"].append(shape)
    return {"completion_chars": float(sum(len(r.completion) for r in rollouts))}


small = dict(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, preference_num_candidates=4)
small.update(preference_pairs_per_sample=2, eval_interval=100, eval_num_samples=2, logging_steps=1)
torch.manual_seed(0)
madpo = MADPOTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    eval_logger=eval_logger,
    eval_aggregator=eval_aggregator,
    args=MADPOConfig(num_train_epochs=1, train_batch_size=4, **small),
)
result = {"madpo": sorted(madpo.evaluate()), "logger": SEEN["logger"], "num_turns": SEEN["num_turns"]}
result["madpo_one_item"] = madpo.evaluate(num_eval_samples=1)["eval/turn_1/count"]

marlhf = MARLHFTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    eval_dataset=ITEMS,
    reward_func=vowel_reward,
    metrics_callback=metrics_callback,
    args=MARLHFConfig(
        rl_algorithm="maac",
        num_generations=2,
        reward_model_device="cpu",
        num_train_epochs=1,
        **dict(small, eval_interval=2),
    ),
)
marlhf.train()
# training calls metrics_callback with each item's N x G rollouts, its evaluations with N (one each)
result["rollouts"] = sorted(SEEN["rollouts"])
result["maac_evaluate"] = sorted(marlhf.evaluate())
print("RESULT " + json.dumps(result))
