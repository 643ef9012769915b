"""The real-model jobs of both sides (``python real_jobs.py '<job json>'``, with either side's interpreter).

SmolLM2-135M-Instruct (a local Hugging Face folder, ``job["model"]``) on chat prompts. Each job
names its side: ``ours`` imports comlrl_lightning, ``reference`` imports comlrl 1.4.3 (its venv's
interpreter); everything both see (the chat prompts, the pairs' token ids, the reward, the sampling
settings) is built here from the same tokenizer, so the two sides do the same work.

Seconds are this process's CPU seconds (``time.process_time``; one compute thread, so the wall
time of an unloaded machine): the machine these rows were written for is shared with other jobs.

* ``real_step``: MADPO updates on the same pairs of chat prompts and written completions (ours:
  collate, margins, the joint loss, one backward, AdamW; the reference:
  ``MADPOTrainer._update_from_preference_batch``), a LoRA team (ours only: the reference has none)
  or full copies; then one update under torch's profiler (the share of its time in matrix products).
* ``real_collection``: sampling ``candidates`` per agent and item and pairing them (ours:
  ``PreferenceDataModule.collect`` with Hugging Face ``generate()``, or with ``VLLMGenerator`` for
  ``"generator": "vllm"``, side ``vllm``: the vLLM venv's interpreter; the reference:
  ``_build_preference_dataset``), every completion forced to exactly ``max_new_tokens`` tokens
  (``min_new_tokens``), so both sides sample the same number of tokens.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

import common

common.limit_threads()

import torch  # noqa: E402

common.limit_threads()

TOPICS = ["rivers", "snow", "bread", "trains", "owls", "maps", "tea", "bridges"]
REQUESTS = ("Write one short sentence about {topic}.", "Reply to a sentence about {topic} in kind.")
SENTENCES = (
    "The {topic} we saw this morning were quieter than anyone had expected, and we stayed to watch.",
    "Nobody in the village could remember a year when the {topic} had looked so strange and bright.",
    "I wrote a long letter about {topic} to my grandmother, who still keeps every letter in a box.",
    "Some people say {topic} are boring, but they have never spent a whole afternoon with them.",
)
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention")
"""Operators counted as matrix products in the profile (self time; attention's fused kernel included)."""
LORA_R = 8


def chat_prompts(tokenizer, count: int) -> List[Dict[str, str]]:
    """``count`` items: each agent's request about a topic in the model's chat template (as text)."""
    items = []
    for index in range(count):
        topic = TOPICS[index % len(TOPICS)]
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": request.format(topic=topic)}], tokenize=False, add_generation_prompt=True
            )
            for request in REQUESTS
        ]
        items.append({"prompt": topic, "agent_0": texts[0], "agent_1": texts[1]})
    return items


def agent_0(item: Dict[str, Any]) -> str:
    return item["agent_0"]


def agent_1(item: Dict[str, Any]) -> str:
    return item["agent_1"]


def real_pairs(tokenizer, count: int, completion_tokens: int) -> List[Dict[str, Any]]:
    """Two-agent pairs: each agent's chat prompt ids, a written winner and loser completion (the
    sentences in turn, about the item's topic) cut to ``completion_tokens`` tokens, the last one EOS."""
    pairs = []
    for index, item in enumerate(chat_prompts(tokenizer, count)):
        pair: Dict[str, Any] = {"prompts": [item["agent_0"], item["agent_1"]], "prompt_ids": [], "winner_ids": []}
        pair["loser_ids"] = []
        for agent in range(2):
            pair["prompt_ids"].append(tokenizer(pair["prompts"][agent], add_special_tokens=True)["input_ids"])
            for key, shift in (("winner_ids", 0), ("loser_ids", 1)):
                ids: List[int] = []
                turn = index + agent + shift
                while len(ids) < completion_tokens - 1:
                    text = " " + SENTENCES[turn % len(SENTENCES)].format(topic=item["prompt"])
                    ids += tokenizer(text, add_special_tokens=False)["input_ids"]
                    turn += 1
                pair[key].append(ids[: completion_tokens - 1] + [tokenizer.eos_token_id])
        pairs.append(pair)
    return pairs


def clock(job: Dict[str, Any]):
    """The job's clock: CPU seconds of this process on the CPU, else wall seconds after the device's
    queued work is done (``torch.cuda.synchronize``)."""
    if job.get("device", "cpu") == "cpu":
        return time.process_time

    def synchronized() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()

    return synchronized


def matmul_share(step) -> Dict[str, float]:
    """One call of ``step`` under torch's profiler: the share of the time inside torch operators spent
    in matrix products (self times, so a preemption by another process inflates all operators alike),
    and the share of the call's CPU seconds that operators cover."""
    from torch.profiler import ProfilerActivity, profile

    started = time.process_time()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        step()
    cpu = time.process_time() - started
    events = profiler.key_averages()
    total = sum(event.self_cpu_time_total for event in events) / 1e6
    matmul = sum(event.self_cpu_time_total for event in events if event.key in MATMUL_OPS) / 1e6
    return {"profiled_cpu_s": cpu, "operator_s": total, "matmul_s": matmul, "matmul_share": matmul / total}


# ------------------------------------------------------------------------------------------------
# Ours


def _our_team(job: Dict[str, Any]):
    from peft import LoraConfig

    from comlrl_lightning import MemoryOptions, TeamOptions

    memory = MemoryOptions(hold_agent_graphs=job.get("hold_agent_graphs", False))
    agents, device = job.get("agents", 2), job.get("device", "cpu")
    placed = dict(memory=memory, dtype=job.get("dtype"), agent_devices=None if device == "cpu" else device)
    if job["team"] == "lora":
        lora = LoraConfig(r=LORA_R, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
        return TeamOptions(
            agent_model=job["model"], num_agents=agents, lora=lora, lora_one_pass=job.get("one_pass", True), **placed
        )
    return TeamOptions(agents=[job["model"]] * agents, **placed)


def _widen(pair: Dict[str, Any], agents: int) -> Dict[str, Any]:
    """A two-agent pair for ``agents`` agents (agent i takes agent i mod 2's share)."""
    return {key: [value[i % 2] for i in range(agents)] for key, value in pair.items()}


def ours_step(job: Dict[str, Any]) -> Dict[str, Any]:
    from comlrl_lightning import MADPOModule
    from comlrl_lightning.losses import madpo_loss
    from comlrl_lightning.rounds.pairs import PreferencePair

    module = MADPOModule(team=_our_team(job), dpo_beta=common.DPO_BETA, agent_learning_rate=common.LEARNING_RATE)
    module.configure_model()
    optimizer = module.configure_optimizers()
    tokenizer = module.team.tokenizers[0]
    pool = []
    for raw in real_pairs(tokenizer, job["pairs"], job["completion_tokens"]):
        raw = _widen(raw, job.get("agents", 2))
        pool.append(
            PreferencePair(
                prompts=raw["prompts"],
                winner_completions=[tokenizer.decode(ids, skip_special_tokens=True) for ids in raw["winner_ids"]],
                loser_completions=[tokenizer.decode(ids, skip_special_tokens=True) for ids in raw["loser_ids"]],
                winner_reward=1.0,
                loser_reward=0.0,
                candidate_reward_mean=0.5,
                prompt_ids=raw["prompt_ids"],
                winner_ids=raw["winner_ids"],
                loser_ids=raw["loser_ids"],
            )
        )

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        madpo_loss(module.margins(module.collate_pairs(batch)), module.dpo_beta).backward()
        optimizer.step()

    return _timed_steps(step, pool, job)


def _timed_steps(step, pool: list, job: Dict[str, Any]) -> Dict[str, Any]:
    """Warm-up updates, the best of timed windows (``timing``: ``[warmup, windows, min_seconds]``, by
    default one warm-up and two windows of one update), then one under the profiler."""
    size = job["batch_size"]
    warmup, windows, seconds = job.get("timing", (1, 2, 0.0))
    result = common.time_steps(step, pool, size, size, seconds, windows=windows, warmup=warmup, clock=clock(job))
    if job.get("profile", True):
        result.update(matmul_share(lambda: step(pool[:size])))
    return result


def _generator(job: Dict[str, Any]):
    """``(generator, before)``: ``HFGenerator`` (the default), or ``VLLMGenerator`` for ``"generator": "vllm"``
    with ``before`` marking the weights updated (every agent's weights pushed into the engine, as in a
    round after training)."""
    if job.get("generator", "hf") == "hf":
        from comlrl_lightning import HFGenerator

        return HFGenerator(), None
    from comlrl_lightning.generation.vllm import VLLMGenerator

    generator = VLLMGenerator()
    return generator, generator.weights_updated


def ours_collection(job: Dict[str, Any]) -> Dict[str, Any]:
    """``PreferenceDataModule.collect`` (the warm-up on one item also starts a vLLM engine: ``warmup_s``)."""
    from comlrl_lightning import GenerationSettings, MADPOModule, PreferenceDataModule, TaskOptions
    from comlrl_lightning.team.loading import load_tokenizer

    agents = job.get("agents", 2)
    sampling = GenerationSettings(
        max_new_tokens=job["max_new_tokens"], extra={"min_new_tokens": job["max_new_tokens"]}, **common.GENERATION
    )
    generator, before = _generator(job)
    module = MADPOModule(
        team=_our_team(job),
        dpo_beta=common.DPO_BETA,
        agent_learning_rate=common.LEARNING_RATE,
        sampling=sampling,
        generator=generator,
    )
    module.configure_model()
    items = chat_prompts(load_tokenizer(job["model"]), job["items"])
    formatters = [agent_0, agent_1] * (agents // 2)
    data = PreferenceDataModule(
        task=TaskOptions(
            train_dataset=items,
            formatters=formatters,
            reward_func=(common.reward if agents == 2 else _team_reward),
        ),
        num_agents=agents,
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        eval_num_samples=0,
    )
    data.setup("fit")
    data.train_items = items[:1]
    started = clock(job)()
    data.collect(module)  # warm-up
    warmup = clock(job)() - started
    data.train_items = items

    def collect():
        if before is not None:
            before()
        return data.collect(module).pairs

    return dict(_timed_collection(collect, job), warmup_s=warmup)


def _team_reward(*texts: List[str]) -> List[float]:
    """The two-agent reward summed over consecutive pairs of agents (a team of 4)."""
    return [sum(values) for values in zip(*(common.reward(a, b) for a, b in zip(texts[::2], texts[1::2])))]


def _timed_collection(collect, job: Dict[str, Any]) -> Dict[str, Any]:
    seconds, pairs = common.best_of(collect, repeats=job.get("repeats", 2), clock=clock(job))
    joint = job["items"] * job["candidates"]
    result = {"joint_candidates": joint, "seconds": seconds, "per_s": joint / seconds, "pairs": len(pairs)}
    if job.get("profile", True):
        result.update(matmul_share(collect))
    return result


# ------------------------------------------------------------------------------------------------
# The reference (comlrl 1.4.3): full copies only


def _reference_trainer(job: Dict[str, Any], **config):
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    args = MADPOConfig(
        num_agents=2,
        agent_devices=job.get("device", "cpu"),
        agent_learning_rate=common.LEARNING_RATE,
        dpo_beta=common.DPO_BETA,
        eval_interval=0,
        **config,
    )
    return MADPOTrainer(
        agents=[job["model"]] * 2,
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=chat_prompts(tokenizer, job.get("items", 1)),
        reward_func=common.reward,
        formatters=[agent_0, agent_1],
        args=args,
    )


def reference_step(job: Dict[str, Any]) -> Dict[str, Any]:
    from comlrl.trainers.preference.madpo import AgentPreferenceTensors, PreferencePair

    if job["team"] != "full":
        raise ValueError("the reference has no LoRA team: full copies only")
    trainer = _reference_trainer(job, train_batch_size=job["batch_size"])
    for agent in trainer.agents:
        agent.train()
    pool = []
    for raw in real_pairs(trainer.tokenizers[0], job["pairs"], job["completion_tokens"]):
        tensors = [
            AgentPreferenceTensors(torch.tensor(p), torch.tensor(w), torch.tensor(lo))
            for p, w, lo in zip(raw["prompt_ids"], raw["winner_ids"], raw["loser_ids"])
        ]
        pool.append(PreferencePair(raw["prompts"], ["", ""], ["", ""], tensors, 1.0, 0.0, 0.5))
    return _timed_steps(trainer._update_from_preference_batch, pool, job)


def reference_collection(job: Dict[str, Any]) -> Dict[str, Any]:
    trainer = _reference_trainer(
        job,
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        max_new_tokens=job["max_new_tokens"],
        **common.GENERATION,
    )
    for agent in trainer.agents:
        agent.train()
    items = trainer.train_dataset
    forced = {"min_new_tokens": job["max_new_tokens"]}
    trainer.train_dataset = items[:1]
    trainer._build_preference_dataset(**forced)  # warm-up
    trainer.train_dataset = items
    return _timed_collection(lambda: trainer._build_preference_dataset(**forced), job)


def versions(job: Dict[str, Any]) -> Dict[str, Any]:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads()}


OURS = {"real_step": ours_step, "real_collection": ours_collection, "versions": versions}
JOBS = {
    "ours": OURS,
    "vllm": OURS,  # ours, run by the vLLM venv's interpreter
    "reference": {"real_step": reference_step, "real_collection": reference_collection, "versions": versions},
}


MIN_AVAILABLE_GIB = 8.0
"""A CPU job starts only when the machine has this much memory available (it is shared)."""


def available_gib() -> float:
    """The kernel's estimate of the memory available for a new process (``MemAvailable``), GiB."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


def wait_for_memory(minimum: float = MIN_AVAILABLE_GIB, poll_s: float = 10.0, limit_s: float = 3600.0) -> float:
    """Seconds waited until ``minimum`` GiB are available (at most ``limit_s``; then the job starts anyway)."""
    started = time.perf_counter()
    while available_gib() < minimum and time.perf_counter() - started < limit_s:
        time.sleep(poll_s)
    return time.perf_counter() - started


def run_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """The job's result with the versions it ran on (a CPU job first waits for memory: :func:`wait_for_memory`)."""
    waited = wait_for_memory() if job.get("device", "cpu") == "cpu" and job["job"] != "versions" else 0.0
    result = JOBS[job["side"]][job["job"]](job)
    return dict(result, side=job["side"], versions=versions(job), waited_for_memory_s=waited)


if __name__ == "__main__":
    common.worker_main(run_job)
