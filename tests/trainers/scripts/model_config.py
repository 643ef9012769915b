"""model_config as a CoMLRL user passes it: dtype, attention implementation, added special tokens.

Environment: SCRIPT_MODEL. Prints one ``RESULT {json}`` line.
"""

import json
import os

import torch
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": f"topic: {word}\n"} for word in ("sun", "moon")]


def vowel_reward(writer, matcher):
    text = writer[0] + matcher[0]
    return [sum(char in "aeiou" for char in text) / max(len(text), 1)]


torch.manual_seed(0)
trainer = MADPOTrainer(
    agent_model=MODEL,
    train_dataset=ITEMS,
    reward_func=vowel_reward,
    model_config={
        "torch_dtype": torch.float32,
        "attn_implementation": "eager",
        "special_tokens": {"additional_special_tokens": ["<tool>"]},
    },
    args=MADPOConfig(
        num_train_epochs=1,
        max_new_tokens=4,
        preference_num_candidates=3,
        preference_pairs_per_sample=2,
        eval_interval=0,
    ),
)
tokenizer = trainer.tokenizers[1]
result = {
    "special_token": "<tool>" in tokenizer.all_special_tokens,
    "one_id": len(tokenizer.convert_tokens_to_ids(["<tool>"])) == 1,
    "dtype": str(next(trainer.agents[0].parameters()).dtype),
    "attention": trainer.agents[0].config._attn_implementation,
}
trainer.train()
result["trained"] = True
print("RESULT " + json.dumps(result))
