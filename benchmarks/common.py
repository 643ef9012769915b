"""What both sides of the benchmark share: threads, sizes, the task, the pairs and the result line.

This file is imported by ``ours.py`` (our venv) and ``reference.py`` (the reference's venv), so it
needs nothing but the standard library until a function asks for torch.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import resource
import sys
import time
from typing import Any, Callable, Dict, List

THREADS = 1
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
RESULT_PREFIX = "BENCH_RESULT "

# ------------------------------------------------------------------------------------------------
# Sizes. A "plan" is a dict of everything a job needs; run.py picks full or quick.

MODELS = {
    # Llama, char vocabulary (49 tokens); parameter counts are printed in the results.
    "tiny": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4),
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4),
    # the vLLM rows' largest (64-wide heads, as the small one's)
    "medium": dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8),
}

FULL = dict(
    models=["tiny", "small"],  # MADPO step and collection; the iterative run uses the tiny model
    batch_sizes=[1, 4, 16],
    step_min_pairs={"tiny": 64, "small": 32},  # timed pairs per window (3 windows, the best is reported)
    step_min_seconds=1.5,
    pair_pool=64,
    completion_lengths=(8, 32),
    collection=dict(items=16, candidates=16, max_new_tokens=32),
    matmul_size=2048,
    iterative=dict(items=16, rounds=3, candidates=8, pairs_per_sample=4, train_batch_size=8, max_new_tokens=24),
)
QUICK = dict(
    models=["tiny"],
    batch_sizes=[1, 4],
    step_min_pairs={"tiny": 8, "small": 4},
    step_min_seconds=0.1,
    pair_pool=16,
    completion_lengths=(4, 12),
    collection=dict(items=2, candidates=4, max_new_tokens=8),
    matmul_size=512,
    iterative=dict(items=2, rounds=3, candidates=4, pairs_per_sample=2, train_batch_size=4, max_new_tokens=6),
)
GENERATION = dict(temperature=1.0, top_p=1.0, top_k=None)
LEARNING_RATE = 1e-4
DPO_BETA = 0.1


def limit_threads() -> None:
    """One compute thread everywhere (call before and after importing torch)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(THREADS)
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(THREADS)
        try:
            torch.set_num_interop_threads(THREADS)
        except RuntimeError:  # already set in this process
            pass


# ------------------------------------------------------------------------------------------------
# The task: the toy "vowels and lengths" task of the embedded default, written out here so the
# reference's venv can use it without our package.

WRITER_TEMPLATE = "topic: {prompt}\nwriter:"
MATCHER_TEMPLATE = "topic: {prompt}\nmatcher:"
VOWELS = set("aeiou")


def items(count: int, seed: int = 0) -> List[Dict[str, str]]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [{"prompt": "".join(rng.choice(letters) for _ in range(rng.randint(3, 6)))} for _ in range(count)]


def writer_prompt(item: Dict[str, Any]) -> str:
    return WRITER_TEMPLATE.format(**item)


def matcher_prompt(item: Dict[str, Any]) -> str:
    return MATCHER_TEMPLATE.format(**item)


FORMATTERS: List[Callable[[Dict[str, Any]], str]] = [writer_prompt, matcher_prompt]


def reward(writer: List[str], matcher: List[str]) -> List[float]:
    """Vowel share of the writer minus the relative length gap between writer and matcher."""
    values = []
    for w, m in zip(writer, matcher):
        vowels = sum(ch in VOWELS for ch in w) / len(w) if w else 0.0
        values.append(vowels - abs(len(w) - len(m)) / max(len(w), len(m), 1))
    return values


# ------------------------------------------------------------------------------------------------
# Pairs: the same token ids for both sides.


@functools.lru_cache(maxsize=4)
def word_tokens(tokenizer) -> List[int]:
    """The ids of whole lower-case words with a leading space (`` the``) that tokenizing their own
    text gives back: random completions of them tokenize back to the same ids, which random ids of a
    BPE tokenizer do not (TRL tokenizes text, we take ids)."""
    words = []
    for token in range(len(tokenizer)):
        text = tokenizer.decode([token])
        if re.fullmatch(r" [a-z]{2,}", text) and tokenizer(text, add_special_tokens=False)["input_ids"] == [token]:
            words.append(token)
    return words


def pair_ids(
    tokenizer,
    count: int,
    lengths: tuple,
    seed: int = 0,
    words: bool = False,
    context_words: int = 0,
    pairs_per_prompt: int = 1,
) -> List[Dict[str, List[List[int]]]]:
    """``count`` two-agent pairs: real prompt ids, random completion ids ending in EOS (as sampled);
    with ``words``, random whole words (:func:`word_tokens`), for a real model's BPE tokenizer.

    ``context_words`` random words before each prompt and ``pairs_per_prompt`` consecutive pairs of
    one prompt give the coding task's layout (a long prompt, several pairs of one problem in a batch).
    Returns dicts with ``prompts`` (texts), ``prompt_ids``, ``winner_ids``, ``loser_ids`` (per agent).
    """
    rng = random.Random(seed)
    eos = tokenizer.eos_token_id
    specials = set(tokenizer.all_special_ids)
    vocabulary = word_tokens(tokenizer) if words else [i for i in range(len(tokenizer)) if i not in specials]
    pairs: List[Dict[str, Any]] = []
    for item in items(-(-count // pairs_per_prompt), seed):
        context = tokenizer.decode([rng.choice(vocabulary) for _ in range(context_words)]).strip()
        prompts = [(context + "\n" if context else "") + f(item) for f in FORMATTERS]
        prompt_ids = [tokenizer(prompt, add_special_tokens=True)["input_ids"] for prompt in prompts]
        for _ in range(min(pairs_per_prompt, count - len(pairs))):
            pair: Dict[str, Any] = {"prompts": prompts, "prompt_ids": prompt_ids, "winner_ids": [], "loser_ids": []}
            for _agent in prompts:
                for key in ("winner_ids", "loser_ids"):
                    pair[key].append([rng.choice(vocabulary) for _ in range(rng.randint(*lengths))] + [eos])
            pairs.append(pair)
    return pairs


def job_pairs(tokenizer, job: Dict[str, Any]) -> List[Dict[str, List[List[int]]]]:
    """:func:`pair_ids` with the sizes and layout a job names (every side builds its pairs through this)."""
    return pair_ids(
        tokenizer,
        job["pair_pool"],
        tuple(job["completion_lengths"]),
        words=job.get("words", False),
        context_words=job.get("context_words", 0),
        pairs_per_prompt=job.get("pairs_per_prompt", 1),
    )


def batches(pool: list, batch_size: int, count: int) -> List[list]:
    """``count`` batches cycling through ``pool`` (the same sequence for both sides)."""
    return [[pool[(b * batch_size + i) % len(pool)] for i in range(batch_size)] for b in range(count)]


def time_steps(
    step: Callable[[list], None],
    pool: list,
    batch_size: int,
    min_pairs: int,
    min_seconds: float,
    windows: int = 3,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> Dict[str, float]:
    """Throughput of ``step`` on pair batches: the best of ``windows`` timed windows.

    Each window runs batches until at least ``min_pairs`` pairs and ``min_seconds`` have passed;
    the best window is reported so a burst of load from other processes does not count.
    ``clock``: wall seconds by default; ``time.process_time`` counts this process's CPU seconds
    (one compute thread: the wall time of an unloaded machine).
    """
    plan = iter(batches(pool, batch_size, 100_000))
    for _ in range(warmup):
        step(next(plan))
    rates = []
    for _ in range(windows):
        done, started = 0, clock()
        while True:
            batch = next(plan)
            step(batch)
            done += len(batch)
            elapsed = clock() - started
            if done >= min_pairs and elapsed >= min_seconds:
                break
        rates.append((done / elapsed, done, elapsed))
    rate, done, elapsed = max(rates)
    return {
        "pairs": done,
        "seconds": elapsed,
        "pairs_per_s": rate,
        "ms_per_pair": 1000 / rate,
        "window_rates": [r[0] for r in rates],
    }


def best_of(function: Callable[[], Any], repeats: int = 3, clock: Callable[[], float] = time.perf_counter) -> tuple:
    """``(fastest seconds, last result)`` of ``repeats`` calls (other processes' load only slows a call down);
    ``clock`` as in :func:`time_steps`."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = clock()
        result = function()
        best = min(best, clock() - started)
    return best, result


def count_flops(function: Callable[[], None]) -> int:
    """FLOPs of one call, counted by torch's FlopCounterMode (matmuls and attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        function()
    return int(counter.get_total_flops())


def matmul_peak(size: int = 2048, repeats: int = 10) -> Dict[str, float]:
    """Best dense float32 ``torch.mm`` FLOP/s of this process (1 thread)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    for _ in range(2):
        torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - started)
    return {"size": size, "flops_per_s": 2 * size**3 / best}


# ------------------------------------------------------------------------------------------------
# Against TRL: one agent, the same pairs and prompts; what both sides must see identically.

TRL_FULL = dict(
    models=["tiny", "small"],
    dpo_batch_size=16,
    dpo_min_pairs={"tiny": 64, "small": 32},
    grpo=dict(items=4, generations=8, max_new_tokens=32, steps={"tiny": 8, "small": 5}),
)
TRL_QUICK = dict(
    models=["tiny"],
    dpo_batch_size=4,
    dpo_min_pairs={"tiny": 8, "small": 4},
    grpo=dict(items=2, generations=2, max_new_tokens=6, steps={"tiny": 2, "small": 2}),
)
TRL_REAL = dict(
    models=["smollm2-135m-instruct"],
    pairs=dict(pair_pool=8, completion_lengths=(32, 48), words=True, step_min_seconds=1.5),
    dpo_batch_size=4,
    dpo_min_pairs={"smollm2-135m-instruct": 8},
    grpo=dict(items=2, generations=4, max_new_tokens=32, steps={"smollm2-135m-instruct": 3}),
)
"""Against TRL on SmolLM2-135M-Instruct: completions of 32-48 whole words (a BPE tokenizer gives random
ids back as other ids), batches of 4 pairs, GRPO 2 prompts x 4 samples of 32 tokens."""
TRL_CODING_LAYOUT = dict(
    TRL_REAL,
    pairs=dict(
        pair_pool=8,
        completion_lengths=(48, 64),
        words=True,
        step_min_seconds=1.5,
        context_words=100,
        pairs_per_prompt=4,
    ),
    rows=("dpo_step",),
)
"""The DPO step on the coding task's layout: a long prompt (100 random words before it) and the 4 pairs
of one prompt in a batch (``preference_pairs_per_sample: 4``, ``train_batch_size: 4``), completions of
48-64 words; TRL computes every pair's prompt twice, ours each distinct prompt once."""
TRL_REAL_QUICK = dict(
    TRL_REAL,
    pairs=dict(pair_pool=4, completion_lengths=(4, 8), words=True, step_min_seconds=0.1),
    dpo_batch_size=2,
    dpo_min_pairs={"smollm2-135m-instruct": 2},
    grpo=dict(items=1, generations=2, max_new_tokens=4, steps={"smollm2-135m-instruct": 2}),
)
WEIGHT_DECAY = 0.01
"""Our modules' default AdamW weight decay, pinned on TRL's side (its default is 0)."""


def one_agent(pair: Dict[str, Any]) -> Dict[str, Any]:
    """Agent 0's share of a two-agent pair from :func:`pair_ids`: its prompt, winner and loser ids."""
    return {
        "prompt": pair["prompts"][0],
        "prompt_ids": pair["prompt_ids"][0],
        "chosen_ids": pair["winner_ids"][0],
        "rejected_ids": pair["loser_ids"][0],
    }


def vowel_reward(completions: List[str]) -> List[float]:
    """The one-agent task's reward: the vowel share of each completion (0 for an empty one)."""
    return [sum(ch in VOWELS for ch in text) / len(text) if text else 0.0 for text in completions]


def padded_rows(input_ids: List[List[int]], attention_mask: List[List[int]], completion_mask: List[List[int]]):
    """Undo a ``[chosen rows; rejected rows]`` padded batch (TRL's preference collator): per pair,
    ``{"prompt_ids", "chosen_ids", "rejected_ids"}`` read from the attended positions, the prompt
    being the attended tokens before the completion mask starts. Also returns the number of token
    positions the batch computes (rows x width, padding included)."""
    rows = []
    for ids, attended, completion in zip(input_ids, attention_mask, completion_mask):
        kept = [(token, c) for token, a, c in zip(ids, attended, completion) if a]
        rows.append(([t for t, c in kept if not c], [t for t, c in kept if c]))
    half = len(rows) // 2
    pairs = []
    for (prompt, chosen), (prompt_again, rejected) in zip(rows[:half], rows[half:]):
        if prompt != prompt_again:
            raise ValueError("a chosen row and its rejected row carry different prompts")
        pairs.append({"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected})
    return pairs, sum(len(ids) for ids in input_ids)


def dpo_disagreements(ours: Dict[str, Any], theirs: Dict[str, Any], tolerance: float = 1e-4) -> List[str]:
    """What differs between two sides' view of the same DPO batch (empty: they agree).

    Each side gives ``pairs`` (per pair ``prompt_ids``, ``chosen_ids``, ``rejected_ids``) and
    ``margins``: per pair ``log pi(chosen | prompt) - log pi(rejected | prompt)`` of the same
    weights. Token ids must be identical; margins may differ by ``tolerance x max(1, |margin|)``
    (float32 sums in another order).
    """
    problems = []
    if len(ours["pairs"]) != len(theirs["pairs"]):
        return [f"{len(ours['pairs'])} pairs against {len(theirs['pairs'])}"]
    for index, (mine, other) in enumerate(zip(ours["pairs"], theirs["pairs"])):
        for key in ("prompt_ids", "chosen_ids", "rejected_ids"):
            if list(mine[key]) != list(other[key]):
                problems.append(f"pair {index}: {key} differ: {list(mine[key])} against {list(other[key])}")
    for index, (mine, other) in enumerate(zip(ours["margins"], theirs["margins"])):
        if abs(mine - other) > tolerance * max(1.0, abs(mine)):
            problems.append(f"pair {index}: margin {mine:.6f} against {other:.6f}")
    return problems


def median_step_seconds(times: List[float], warmup: int) -> float:
    """The median time between consecutive step ends after ``warmup`` steps (a burst of load from
    other processes moves a mean, not a median)."""
    gaps = sorted(b - a for a, b in zip(times[warmup:], times[warmup + 1 :]))
    if not gaps:
        raise ValueError(f"{len(times)} step times leave none to measure after {warmup} warm-up steps")
    middle = len(gaps) // 2
    return gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2


def timed(function: Callable, intervals: List[tuple]) -> Callable:
    """``function``, recording the ``(start, end)`` of every call in ``intervals``."""

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            intervals.append((started, time.perf_counter()))

    return wrapper


def share_within(intervals: List[tuple], start: float, end: float) -> float:
    """The share of ``[start, end]`` covered by the (non-overlapping) ``intervals``, clipped to it."""
    covered = sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals)
    return covered / (end - start)


# ------------------------------------------------------------------------------------------------
# Result protocol: a worker prints one line ``BENCH_RESULT {json}`` with its peak RSS added.


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def emit(result: Dict[str, Any]) -> None:
    result = dict(result, peak_rss_mb=peak_rss_mb())
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def worker_main(run_job: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
    """``python ours.py|reference.py '<job json>'``: run one job, print its result line."""
    limit_threads()
    job = json.loads(sys.argv[1])
    emit(run_job(job))
