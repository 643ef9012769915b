"""How much of GRPO's sampling is ``generate()``'s own loop: ``generate()`` against a bare decode loop.

The GRPO rows against TRL are bound by sampling, which both sides run through ``generate()``. This
measures what a lean loop of our own would save: the benchmark's tiny and small Llamas (random
weights), 32 sequences of 24 prompt tokens, 32 new tokens at temperature 1, no top-k or top-p, one
thread; ``generate()`` against a loop of the model's forward over a ``DynamicCache`` with
``torch.multinomial``. Both draw the same number of tokens; the median of 5 timed calls after one
warm-up is reported, side by side in one process.

    python benchmarks/decode_overhead.py
"""

from __future__ import annotations

import statistics
import time

import torch
from common import MODELS


def _lean_decode(model, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    from transformers import DynamicCache

    cache, rows = DynamicCache(), input_ids.shape[0]
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    drawn, position = [], input_ids.shape[1]
    for _ in range(new_tokens):
        token = torch.multinomial(torch.softmax(out.logits[:, -1].float(), dim=-1), 1)
        drawn.append(token)
        positions = torch.full((rows, 1), position)
        out = model(input_ids=token, past_key_values=cache, use_cache=True, position_ids=positions)
        position += 1
    return torch.cat(drawn, dim=1)


def _median_seconds(call, repeats: int = 5) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    rows, prompt_tokens, new_tokens, vocab = 32, 24, 32, 49
    print("| model | `generate()` s | bare decode loop s | loop saves |")
    print("|---|---|---|---|")
    for name in ("tiny", "small"):
        config = LlamaConfig(
            vocab_size=vocab, max_position_embeddings=512, pad_token_id=0, eos_token_id=0, **MODELS[name]
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
        input_ids = torch.randint(1, vocab, (rows, prompt_tokens))
        with torch.inference_mode():
            hf = _median_seconds(
                lambda: model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    do_sample=True,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    top_k=0,
                    top_p=1.0,
                    temperature=1.0,
                )
            )
            lean = _median_seconds(lambda: _lean_decode(model, input_ids, new_tokens))
        print(f"| {name} | {hf:.3f} | {lean:.3f} | {hf / lean:.2f}x |")


if __name__ == "__main__":
    main()
