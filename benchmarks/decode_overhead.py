"""How much of GRPO's sampling is ``generate()``'s own loop: ``generate()`` against a bare decode loop.

The GRPO rows against TRL are bound by sampling, which both sides run through ``generate()``. This
measures what a lean loop of our own would save: the benchmark's tiny and small Llamas (random
weights), 32 sequences of 24 prompt tokens, 32 new tokens at temperature 1, no top-k or top-p, one
thread; ``generate()`` against a loop of the model's forward over a ``DynamicCache`` with
``torch.multinomial``. Both draw the same number of tokens; the median of 5 timed calls after one
warm-up is reported, side by side in one process.

    python benchmarks/decode_overhead.py

``--real`` measures the library's own sampling path (``HFGenerator.sample``: seeded, shared
prompts) on SmolLM2-135M-Instruct at the coding round's shape (prompts of 210 tokens, 128 new
tokens, temperature 0.6, top-p 0.6, 4 samples a prompt, one thread) at B = 4, 8, 16 rows, with
top-p by transformers' full-sort ``TopPLogitsWarper`` (before issue 51) and by ``CandidateTopP``
(after), side by side in one process: CPU milliseconds per decoded step and tokens per CPU
second (``time.process_time``: other jobs on a shared machine count little), the load average
recorded, both paths' tokens checked equal.

    python benchmarks/decode_overhead.py --real --out benchmarks/decode_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
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


REAL_MODEL = "smollm2-135m-instruct"
REAL_SHAPE = dict(prompt_tokens=210, new_tokens=128, samples=4, temperature=0.6, top_p=0.6)


def _real_prompts(tokenizer, count: int, length: int) -> list:
    """``count`` distinct prompts of ``length`` token ids: code-like text, each with its own header."""
    body = "".join(f"def f{i}(values):\n    # the sum of the squares of the even values\n" for i in range(40))
    return [tokenizer(f"# task {index}\n" + body)["input_ids"][:length] for index in range(count)]


def _sample_cpu(team, encoded, settings, samples: int):
    """The library's sampling of ``samples`` completions per prompt: CPU seconds, tokens, steps, ids."""
    from comlrl_lightning.generation.hf import HFGenerator

    seeds = list(range(1000, 1000 + len(encoded)))
    start = time.process_time()
    out = HFGenerator(batch_size=len(encoded) * samples).sample(
        team, [0] * len(encoded), encoded, seeds, samples, settings
    )
    seconds = time.process_time() - start
    ids = [[c.ids for c in row] for row in out]
    tokens = sum(len(row) for prompt in ids for row in prompt)
    steps = max(len(row) for prompt in ids for row in prompt)
    return seconds, tokens, steps, ids


def real_rows(rows_list=(4, 8, 16)) -> dict:
    """Before/after rows of the library's sampling on SmolLM2 (see the module's docstring)."""
    from transformers.generation.logits_process import TopPLogitsWarper

    from comlrl_lightning.generation import seeded_sampling
    from comlrl_lightning.generation.base import GenerationSettings
    from comlrl_lightning.team.team import Team

    torch.set_num_threads(1)
    team = Team([REAL_MODEL])
    shape = REAL_SHAPE
    settings = GenerationSettings(
        max_new_tokens=shape["new_tokens"], temperature=shape["temperature"], top_p=shape["top_p"], top_k=None
    )
    candidate_top_p = seeded_sampling.CandidateTopP
    result: dict = {"shape": shape, "threads": 1, "load_before": os.getloadavg(), "rows": {}}
    for rows in rows_list:
        encoded = _real_prompts(team.tokenizers[0], rows // shape["samples"], shape["prompt_tokens"])
        measured = {}
        for name, top_p in (("before", TopPLogitsWarper), ("after", candidate_top_p)):
            seeded_sampling.CandidateTopP = top_p  # type: ignore[assignment,misc]
            try:
                measured[name] = _sample_cpu(team, encoded, settings, shape["samples"])
            finally:
                seeded_sampling.CandidateTopP = candidate_top_p  # type: ignore[misc]
        (before_s, tokens, steps, before_ids), (after_s, _, _, after_ids) = measured["before"], measured["after"]
        result["rows"][rows] = {
            "steps": steps,
            "tokens": tokens,
            "before_ms_per_step": round(1000 * before_s / steps, 1),
            "after_ms_per_step": round(1000 * after_s / steps, 1),
            "before_tokens_per_cpu_s": round(tokens / before_s, 1),
            "after_tokens_per_cpu_s": round(tokens / after_s, 1),
            "speedup": round(before_s / after_s, 3),
            "same_tokens": before_ids == after_ids,
        }
        print(rows, result["rows"][rows], flush=True)
    result["load_after"] = os.getloadavg()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="generate() against a bare loop; --real: the library's sampling")
    parser.add_argument("--real", action="store_true", help="the library's sampling on SmolLM2, before/after")
    parser.add_argument("--out", default=None, help="write the --real rows to this JSON file")
    arguments = parser.parse_args()
    if arguments.real:
        measured = real_rows()
        if arguments.out:
            with open(arguments.out, "w", encoding="utf-8") as handle:
                json.dump(measured, handle, indent=1)
    else:
        main()
