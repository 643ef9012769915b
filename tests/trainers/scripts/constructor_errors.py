"""The errors a CoMLRL user meets in the constructor: wrong formatter count, wrong tokenizer count,
no reward function, a non-string agent_model.

Environment: SCRIPT_MODEL. Prints one ``RESULT {json}`` line: each case's error type and message.
"""

import json
import os
import re

from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
from transformers import AutoTokenizer

MODEL = os.environ["SCRIPT_MODEL"]
ITEMS = [{"prompt": "sun"}]


def reward(a, b):
    return [0.0]


def error_of(args=None, **arguments):
    try:
        MADPOTrainer(train_dataset=ITEMS, args=args or MADPOConfig(), **arguments)
    except Exception as error:  # the script records what the user sees: its kind and first sentence
        return [isinstance(error, ValueError), re.split(r"(?<=\.) ", str(error))[0]]
    return None


tokenizer = AutoTokenizer.from_pretrained(MODEL)
result = {
    "formatters": error_of(agent_model=MODEL, reward_func=reward, formatters=[lambda item: item["prompt"]]),
    "tokenizers": error_of(agent_model=MODEL, reward_func=reward, tokenizer=[tokenizer]),
    "reward_func": error_of(agent_model=MODEL, reward_func=None),
    "no_model": error_of(reward_func=reward),
    "centralized_agents": error_of(
        agents=[MODEL, MODEL], reward_func=reward, args=MADPOConfig(collaboration_mode="centralized")
    ),
    "centralized_tokenizers": error_of(
        agent_model=MODEL,
        tokenizer=[tokenizer, tokenizer],
        reward_func=reward,
        args=MADPOConfig(collaboration_mode="centralized"),
    ),
    "centralized_roles": error_of(
        agent_model=MODEL, num_agents=3, reward_func=reward, args=MADPOConfig(collaboration_mode="centralized")
    ),
}
print("RESULT " + json.dumps(result))
