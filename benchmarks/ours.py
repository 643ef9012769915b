"""Our side of the benchmark: one job per process (``python ours.py '<job json>'``) or in-process.

Jobs: ``madpo_step`` (collate + margins + loss + backward + AdamW, what Lightning's automatic
optimization runs), ``madpo_fit`` (the same pairs through a real ``Trainer.fit``), ``collection``,
``iterative`` (3 rounds, history comparator, ``Trainer.fit`` end to end) and ``matmul_peak``; with
``"agents": 1`` the MADPO jobs train one agent on agent 0's share of the pairs (reference-free DPO,
against TRL), and ``dpo_check`` / ``grpo_step`` are the other halves of ``trl_jobs.py``'s jobs.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from typing import Any, Dict

import common

common.limit_threads()

import torch  # noqa: E402

common.limit_threads()


def _module(job: Dict[str, Any], memory: Any = None, **options):
    from comlrl_lightning import MADPOModule, MemoryOptions, TeamOptions

    team = TeamOptions(agents=[job["model"]] * job.get("agents", 2), memory=memory or MemoryOptions())
    module = MADPOModule(
        team=team,
        dpo_beta=common.DPO_BETA,
        agent_learning_rate=common.LEARNING_RATE,
        score_last_token=job.get("score_last_token", False),  # True against TRL: every completion token, EOS included
        **options,
    )
    module.configure_model()
    return module


def _pairs(job: Dict[str, Any], tokenizer):
    from comlrl_lightning.rounds.pairs import PreferencePair

    pairs, agents = [], job.get("agents", 2)
    for raw in common.job_pairs(tokenizer, job):
        raw = {key: value[:agents] for key, value in raw.items()}
        texts = {
            k: [tokenizer.decode(ids, skip_special_tokens=True) for ids in raw[k]] for k in ("winner_ids", "loser_ids")
        }
        pairs.append(
            PreferencePair(
                prompts=raw["prompts"],
                winner_completions=texts["winner_ids"],
                loser_completions=texts["loser_ids"],
                winner_reward=1.0,
                loser_reward=0.0,
                candidate_reward_mean=0.5,
                prompt_ids=raw["prompt_ids"],
                winner_ids=raw["winner_ids"],
                loser_ids=raw["loser_ids"],
            )
        )
    return pairs


def madpo_step(job: Dict[str, Any]) -> Dict[str, Any]:
    from comlrl_lightning import MemoryOptions
    from comlrl_lightning.losses import madpo_loss

    every = job.get("checkpoint_every_n_layers")
    module = _module(
        job, MemoryOptions(gradient_checkpointing=True, checkpoint_every_n_layers=every) if every else None
    )
    optimizer = module.configure_optimizers()
    pool = _pairs(job, module.team.tokenizers[0])

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        loss = madpo_loss(module.margins(module.collate_pairs(batch)), module.dpo_beta)
        loss.backward()
        optimizer.step()

    with _attention_free() if job.get("attention_free") else contextlib.nullcontext():
        result = common.time_steps(step, pool, job["batch_size"], job["min_pairs"], job["min_seconds"])
    if job.get("count_flops"):
        result["flops_per_step"] = common.count_flops(lambda: step(pool[: job["batch_size"]]))
    return result


@contextlib.contextmanager
def _attention_free():
    """A bound, not a model: the packed attention replaced by passing the values through, so the
    step costs everything but attention (collation, layout, the model's other layers, loss, AdamW)."""
    from transformers import AttentionInterface

    from comlrl_lightning.team import packed_scoring

    def values(module, query, key, value, attention_mask, **kwargs):
        return value.repeat_interleave(query.shape[1] // value.shape[1], dim=1).transpose(1, 2), None

    AttentionInterface.register(packed_scoring.ATTENTION_NAME, values)
    try:
        yield
    finally:
        AttentionInterface.register(packed_scoring.ATTENTION_NAME, packed_scoring.packed_attention)


def madpo_fit(job: Dict[str, Any]) -> Dict[str, Any]:
    """The same step inside ``Trainer.fit`` (logging, metrics, hooks); timed after two warm-up batches."""
    from lightning.pytorch import Callback, LightningDataModule, Trainer
    from torch.utils.data import DataLoader

    module = _module(job)
    pool = _pairs(job, module.team.tokenizers[0])
    steps = 2 + max(1, -(-job["min_pairs"] // job["batch_size"]))
    plan = [pair for batch in common.batches(pool, job["batch_size"], steps) for pair in batch]

    class Pairs(LightningDataModule):  # a plain data module: training batches only, so no evaluation
        def train_dataloader(self):
            return DataLoader(plan, batch_size=job["batch_size"], shuffle=False, collate_fn=module.collate_pairs)

    class Clock(Callback):
        times = []

        def on_train_batch_end(self, *args):
            self.times.append(time.perf_counter())

    clock = Clock()
    with tempfile.TemporaryDirectory() as root:
        Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[clock],
        ).fit(module, Pairs())
    pairs = (len(clock.times) - 2) * job["batch_size"]
    seconds = clock.times[-1] - clock.times[1]
    return {"pairs": pairs, "seconds": seconds, "pairs_per_s": pairs / seconds, "ms_per_pair": 1000 * seconds / pairs}


def dpo_check(job: Dict[str, Any]) -> Dict[str, Any]:
    """One agent's first batch of pairs (its token ids) and the margins of the initial weights on it;
    ``positions``: the token positions our packed scoring computes for it."""
    from comlrl_lightning.team.packed_scoring import build_layout

    module = _module(dict(job, agents=1))
    pairs = _pairs(dict(job, agents=1), module.team.tokenizers[0])[: job["batch_size"]]
    batch = module.collate_pairs(pairs)
    module.eval()
    with torch.no_grad():
        margins = module.margins(batch)[:, 0]
    layout = build_layout(**batch["agents"][0])
    return {
        "pairs": [
            {"prompt_ids": p.prompt_ids[0], "chosen_ids": p.winner_ids[0], "rejected_ids": p.loser_ids[0]}
            for p in pairs
        ],
        "margins": margins.tolist(),
        "positions": int(layout.input_ids.numel()),
    }


def grpo_step(job: Dict[str, Any]) -> Dict[str, Any]:
    """Steps of one agent's MAGRPO in ``Trainer.fit`` (``items`` prompts x ``generations`` samples per
    step: sampling, the reward, scoring, backward, AdamW); the median step time after two warm-up steps."""
    from lightning.pytorch import Callback, Trainer

    from comlrl_lightning import GenerationSettings, MAGRPOModule, TaskDataModule, TaskOptions, TeamOptions

    times = []

    class Clock(Callback):
        def on_train_batch_end(self, *args):
            times.append(time.perf_counter())

    steps = job["steps"] + 2
    module = MAGRPOModule(
        team=TeamOptions(agents=[job["model"]]),
        num_generations=job["generations"],
        sampling=GenerationSettings(max_new_tokens=job["max_new_tokens"], **common.GENERATION),
        agent_learning_rate=common.LEARNING_RATE,
    )
    data = TaskDataModule(
        task=TaskOptions(
            train_dataset=common.items(job["items"] * steps),
            formatters=[common.writer_prompt],
            reward_func=common.vowel_reward,
        ),
        train_batch_size=job["items"],
        eval_num_samples=0,
        num_train_epochs=1,
    )
    sampling: list = []
    module.sample_rollouts = common.timed(module.sample_rollouts, sampling)
    with tempfile.TemporaryDirectory() as root:
        Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=steps,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[Clock()],
        ).fit(module, data)
    seconds = common.median_step_seconds(times, warmup=2)
    return {
        "steps": len(times) - 2,
        "seconds_per_step": seconds,
        "steps_per_s": 1 / seconds,
        "sampling_share": common.share_within(sampling, times[1], times[-1]),
    }


def collection(job: Dict[str, Any]) -> Dict[str, Any]:
    """``PreferenceDataModule.collect``: sample K per agent and item, score joint responses, pick pairs.

    ``"generator": "vllm"`` samples with ``VLLMGenerator`` (in the vLLM venv): the warm-up builds its
    engine (``warmup_s``), and the weights are marked updated before every timed pass, so every
    agent's weights are pushed into the engine as in a round after training.
    """
    from comlrl_lightning import GenerationSettings, HFGenerator, PreferenceDataModule, TaskOptions

    if job.get("generator") == "vllm":
        from comlrl_lightning.generation.vllm import VLLMGenerator

        generator = VLLMGenerator()
        before = generator.weights_updated
    else:
        generator, before = HFGenerator(batch_size=job.get("generation_batch_size")), None
    sampling = GenerationSettings(max_new_tokens=job["max_new_tokens"], **common.GENERATION)
    module = _module(job, sampling=sampling, generator=generator)
    data = PreferenceDataModule(
        task=TaskOptions(
            train_dataset=common.items(job["items"]), formatters=list(common.FORMATTERS), reward_func=common.reward
        ),
        num_agents=2,
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        eval_num_samples=0,
    )
    data.setup("fit")
    items = data.train_items
    data.train_items = items[:1]
    started = time.perf_counter()
    data.collect(module)  # warm-up
    warmup = time.perf_counter() - started
    data.train_items = items

    def collect():
        if before is not None:
            before()
        return data.collect(module)

    seconds, result = common.best_of(collect)
    joint = len(items) * job["candidates"]
    return {
        "joint_candidates": joint,
        "seconds": seconds,
        "per_s": joint / seconds,
        "pairs": len(result.pairs),
        "warmup_s": warmup,
    }


def iterative(job: Dict[str, Any]) -> Dict[str, Any]:
    """``rounds`` rounds of iterative MADPO (history comparator, k=1) through ``Trainer.fit``."""
    from lightning.pytorch import Trainer

    from comlrl_lightning import (
        GenerationSettings,
        HistoryComparator,
        IterativePreferenceDataModule,
        MADPOModule,
        TaskOptions,
        TeamOptions,
    )

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        module = MADPOModule(
            team=TeamOptions(agents=[job["model"]] * 2),
            dpo_beta=common.DPO_BETA,
            agent_learning_rate=common.LEARNING_RATE,
            sampling=GenerationSettings(max_new_tokens=job["max_new_tokens"], **common.GENERATION),
        )
        data = IterativePreferenceDataModule(
            task=TaskOptions(
                train_dataset=common.items(job["items"]), formatters=list(common.FORMATTERS), reward_func=common.reward
            ),
            num_iterations=job["rounds"],
            num_train_epochs=1,
            preference_num_candidates=job["candidates"],
            comparator=HistoryComparator(k=1, num_candidates=job["candidates"]),
            preference_pairs_per_sample=job["pairs_per_sample"],
            train_batch_size=job["train_batch_size"],
            eval_num_samples=0,
        )
        trainer = Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=job["rounds"],
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            reload_dataloaders_every_n_epochs=1,
        )
        trainer.fit(module, data)
    return {
        "seconds": time.perf_counter() - started,
        "rounds": job["rounds"],
        "updates": trainer.global_step,
        "pairs": data.replay.total_pairs,
    }


def matmul_peak(job: Dict[str, Any]) -> Dict[str, Any]:
    return common.matmul_peak(job.get("size", 2048))


def versions(job: Dict[str, Any]) -> Dict[str, Any]:
    import lightning
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "lightning": lightning.__version__,
        "threads": torch.get_num_threads(),
    }


from lora_team import lora_team_collection, lora_team_sampling, lora_team_step  # noqa: E402 - run here too
from scaling import large_vocab, replay_growth  # noqa: E402

JOBS = {
    f.__name__: f
    for f in (
        madpo_step,
        madpo_fit,
        dpo_check,
        grpo_step,
        collection,
        iterative,
        matmul_peak,
        versions,
        large_vocab,
        replay_growth,
        lora_team_step,
        lora_team_collection,
        lora_team_sampling,
    )
}


def run_job(job: Dict[str, Any]) -> Dict[str, Any]:
    return JOBS[job["job"]](job)


if __name__ == "__main__":
    common.worker_main(run_job)
