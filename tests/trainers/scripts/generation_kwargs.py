"""Sampling options passed to train(), as a CoMLRL user passes them to generate(): no vowel sampled.

Environment: SCRIPT_MODEL. Prints one ``RESULT {json}`` line about the round files' completions.
"""

import json
import os

import torch
from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer
from transformers import AutoTokenizer

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n"} for word in ("sun", "moon", "tree")]


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


vowels = AutoTokenizer.from_pretrained(MODEL).convert_tokens_to_ids(list("aeiou"))
torch.manual_seed(0)
trainer = MADPOIterTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    reward_func=vowel_reward,
    args=MADPOIterConfig(
        num_iterations=1,
        max_new_tokens=6,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        preference_num_candidates=3,
        preference_pairs_per_sample=2,
        eval_interval=0,
        preference_replay_dir="rounds",
    ),
)
trainer.train(suppress_tokens=vowels, repetition_penalty=1.2)
with open(os.path.join("rounds", "iteration_0001.json"), encoding="utf-8") as handle:
    pairs = json.load(handle)["pairs"]
texts = [text for pair in pairs for side in ("winner_completions", "loser_completions") for text in pair[side]]
result = {
    "pairs": len(pairs) > 0,
    "no_vowel": not any(vowel in text for text in texts for vowel in "aeiou"),
}
print("RESULT " + json.dumps(result))
