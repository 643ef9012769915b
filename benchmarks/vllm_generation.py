"""Collection with the vLLM generator against our Hugging Face path, and the layout choices behind it.

Run in a virtual environment with vLLM and this package (see ``.ci/vllm``)::

    python benchmarks/vllm_generation.py            # the small benchmark model, full sizes
    python benchmarks/vllm_generation.py --quick    # a smoke run
    python benchmarks/vllm_generation.py --threads 2 --layouts

Rows (the best of 3 timed calls each, after a warm-up that builds the engine):

* ``collection``: one round's ``PreferenceDataModule.collect`` (2 agents, K candidates per item,
  scoring and pairing included) with ``HFGenerator`` and with ``VLLMGenerator``; before every
  vLLM call the weights are marked updated, so each agent's weights are pushed as in a real round.
* ``--layouts``: one engine whose weights are swapped per agent (what ``VLLMGenerator`` does)
  against one engine per agent (no swaps, a second engine's memory), the cost of one push, and a
  LoRA agent sampled through vLLM's own LoRA support against merged weights.

The models are the benchmark's randomly initialised Llamas (``models.py``); the ``tiny`` one has
16-wide attention heads, which vLLM's CPU attention does not run, so the default is ``small``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def rss_gib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def module_with(model: str, generator: Any, max_new_tokens: int):
    from comlrl_lightning import MADPOModule

    module = MADPOModule(
        agents=[model] * 2,
        dpo_beta=common.DPO_BETA,
        agent_learning_rate=common.LEARNING_RATE,
        max_new_tokens=max_new_tokens,
        generator=generator,
        **common.GENERATION,
    )
    module.configure_model()
    return module


def data_module(items: int, candidates: int):
    from comlrl_lightning import PreferenceDataModule

    data = PreferenceDataModule(
        train_dataset=common.items(items),
        formatters=list(common.FORMATTERS),
        reward_func=common.reward,
        num_agents=2,
        preference_num_candidates=candidates,
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        eval_num_samples=0,
    )
    data.setup("fit")
    return data


def timed_collection(module, data, before: Callable[[], None] = lambda: None) -> Dict[str, float]:
    """Warm-up (engine start) on one item, then the best of 3 whole collections."""
    items = data.train_items
    data.train_items = items[:1]
    started = time.perf_counter()
    data.collect(module)
    warmup = time.perf_counter() - started
    data.train_items = items

    def collect():
        before()
        return data.collect(module)

    seconds, result = common.best_of(collect)
    return {"seconds": seconds, "warmup_s": warmup, "pairs": len(result.pairs)}


def collection(model: str, sizes: Dict[str, int]) -> Dict[str, Any]:
    from comlrl_lightning.generation.hf import HFGenerator
    from comlrl_lightning.generation.vllm import VLLMGenerator

    data = data_module(sizes["items"], sizes["candidates"])
    hf = timed_collection(module_with(model, HFGenerator(), sizes["max_new_tokens"]), data)
    rss = rss_gib()
    generator = VLLMGenerator()
    vllm = timed_collection(module_with(model, generator, sizes["max_new_tokens"]), data, generator.weights_updated)
    joint = sizes["items"] * sizes["candidates"]
    return {
        "joint_candidates": joint,
        "hf_s": hf["seconds"],
        "vllm_s": vllm["seconds"],
        "vllm_engine_start_s": vllm["warmup_s"],
        "vllm_engine_rss_gib": rss_gib() - rss,
        "vllm_collection_speedup": hf["seconds"] / vllm["seconds"],
    }


def layouts(model: str, sizes: Dict[str, int]) -> Dict[str, Any]:
    """Swapped weights in one engine against an engine per agent, and the cost of one push."""
    from comlrl_lightning.generation import vllm as vllm_generator
    from comlrl_lightning.generation.base import GenerationSettings
    from comlrl_lightning.generation.vllm import VLLMGenerator
    from comlrl_lightning.runtime.rng import RandomStream
    from comlrl_lightning.team.team import Team

    team = Team([model, model])
    settings = GenerationSettings(max_new_tokens=sizes["max_new_tokens"], **common.GENERATION)
    prompts = [[f(item) for f in common.FORMATTERS] for item in common.items(sizes["items"])]
    generator = VLLMGenerator()
    shared = generator.engine_for(team.agents[0])
    rss = rss_gib()
    second = vllm_generator.Engine.build(team.agents[1], generator)
    second_engine_gib = rss_gib() - rss
    engines = {"one engine, weights swapped": [shared, shared], "one engine per agent": [shared, second]}
    encoded = [team.encode_prompts(a, [p[a] for p in prompts]) for a in range(2)]
    eos = team.tokenizers[0].eos_token_id
    result: Dict[str, Any] = {"second_engine_rss_gib": second_engine_gib}
    for label, per_agent in engines.items():

        def sample():
            stream = RandomStream(0)
            for agent, engine in enumerate(per_agent):
                engine.load(team.agents[agent], vllm_generator._UPDATES[0])
                engine.sample(
                    encoded[agent],
                    sizes["candidates"],
                    settings,
                    eos,
                    vllm_generator.request_seeds(stream, len(encoded[agent])),
                )

        sample()
        result[label] = common.best_of(sample)[0]
    second.close()

    def push():
        generator.weights_updated()
        shared.load(team.agents[0], vllm_generator._UPDATES[0])

    result["push_s"] = common.best_of(push, repeats=5)[0]
    result["parameters"] = sum(p.numel() for p in team.agents[0].parameters())
    result["lora"] = lora_layout(model, sizes, encoded[0], settings, eos)
    return result


def lora_layout(model: str, sizes: Dict[str, int], encoded, settings, eos: int) -> Dict[str, float]:
    """vLLM's own LoRA (the adapter written to disk, as vLLM loads adapters) against merged weights."""
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    from comlrl_lightning.team.lora import build_lora_agents

    agent = build_lora_agents(model, 1, r=8)[0]
    with torch.no_grad():
        for name, parameter in agent.shared.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    folder = tempfile.mkdtemp()
    started = time.perf_counter()
    agent.shared.save_pretrained(folder)
    save_s = time.perf_counter() - started
    llm = LLM(
        model=model,
        enable_lora=True,
        max_lora_rank=8,
        max_loras=2,
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype="float32",
        seed=0,
        kv_cache_memory_bytes=2**30,
        generation_config="vllm",
        enable_chunked_prefill=False,
    )
    params = SamplingParams(
        n=sizes["candidates"],
        temperature=1.0,
        top_p=1.0,
        max_tokens=settings.max_new_tokens,
        stop_token_ids=[eos],
        seed=0,
        detokenize=False,
    )
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in encoded]
    request = LoRARequest(
        "agent_0", 1, folder if (Path(folder) / "adapter_config.json").exists() else f"{folder}/agent_0"
    )
    timings = {}
    for label, options in (("vllm_lora_s", {"lora_request": request}), ("merged_s", {})):
        llm.generate(prompts[:1], params, use_tqdm=False, **options)
        timings[label] = common.best_of(lambda: llm.generate(prompts, params, use_tqdm=False, **options))[0]
    timings["adapter_save_s"] = save_s
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", choices=sorted(common.MODELS))
    parser.add_argument("--quick", action="store_true", help="the quick plan's sizes (a smoke run)")
    parser.add_argument(
        "--threads", type=int, default=common.THREADS, help="torch threads (the benchmark's default: 1)"
    )
    parser.add_argument("--layouts", action="store_true", help="also measure the engine layouts and LoRA")
    args = parser.parse_args()
    common.THREADS = args.threads
    common.limit_threads()
    from models import build

    sizes = (common.QUICK if args.quick else common.FULL)["collection"]
    with tempfile.TemporaryDirectory() as root:
        model = build(Path(root), [args.model])[args.model]
        result = {
            "model": args.model,
            "parameters": model["parameters"],
            "threads": args.threads,
            **sizes,
            "collection": collection(model["path"], sizes),
        }
        if args.layouts:
            result["layouts"] = layouts(model["path"], sizes)
    result["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(result, indent=1))
    print(f"vllm_collection_speedup: {result['collection']['vllm_collection_speedup']:.2f}")


if __name__ == "__main__":
    main()
