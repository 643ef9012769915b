"""Hugging Face TRL's side of the benchmark, run only with the interpreter of its own venv (``refenv.py``).

Jobs mirror ours on one agent: ``dpo_step`` (TRL's collator + ``DPOTrainer.training_step`` + the
optimizer step), ``dpo_fit`` (the same pairs through ``DPOTrainer.train()``), ``dpo_check`` (the
first batch as TRL collates it and the policy's margins on it) and ``grpo_step`` (steps of
``GRPOTrainer.train()``: sampling, the reward, the loss, backward, AdamW).

TRL's defaults that differ from ours are pinned here: float32 (no ``bf16``), no gradient
checkpointing, no gradient clipping, our weight decay and learning rate, a constant learning rate,
no logging. TRL has no reference-free DPO, so DPO runs with ``precompute_ref_log_probs=True``: the
reference log-probs are computed once before training (not timed), and a step costs what ours does,
one forward and backward of the policy on winners and losers.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Dict, List

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import common  # noqa: E402

common.limit_threads()

import torch  # noqa: E402

common.limit_threads()

PINNED = dict(
    bf16=False,
    use_cpu=True,
    gradient_checkpointing=False,
    max_grad_norm=0.0,  # 0: no clipping (ours does not clip unless asked)
    weight_decay=common.WEIGHT_DECAY,
    learning_rate=common.LEARNING_RATE,
    lr_scheduler_type="constant",
    optim="adamw_torch_fused",  # what ours uses: torch's fused AdamW, betas (0.9, 0.999), eps 1e-8
    report_to="none",
    logging_steps=10**9,  # ours runs without a logger
    save_strategy="no",
    disable_tqdm=True,
    dataloader_num_workers=0,
    seed=0,
)
"""TRL's (and transformers.Trainer's) settings that would otherwise differ from ours."""


def _model_and_tokenizer(job: Dict[str, Any]):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32)
    return model, tokenizer


def _dpo_trainer(job: Dict[str, Any], root: str, batches: int = 1):
    """A ``DPOTrainer`` on agent 0's share of the benchmark pairs, given as text (TRL tokenizes them;
    ``dpo_check`` shows the ids equal ours), reference log-probs precomputed."""
    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from trl import DPOConfig, DPOTrainer

    model, tokenizer = _model_and_tokenizer(job)
    raw = [common.one_agent(p) for p in common.job_pairs(tokenizer, job)]
    plan = [pair for batch in common.batches(raw, job["batch_size"], batches) for pair in batch]
    text = {
        "prompt": [p["prompt"] for p in plan],
        # without EOS: TRL appends the tokenizer's EOS text to every completion itself
        "chosen": [tokenizer.decode(p["chosen_ids"][:-1]) for p in plan],
        "rejected": [tokenizer.decode(p["rejected_ids"][:-1]) for p in plan],
    }

    class InOrder(DPOTrainer):  # our side takes the batches in this order too
        def _get_train_sampler(self, dataset=None):
            return SequentialSampler(dataset if dataset is not None else self.train_dataset)

    args = DPOConfig(
        output_dir=root,
        per_device_train_batch_size=job["batch_size"],
        beta=common.DPO_BETA,
        precompute_ref_log_probs=True,
        precompute_ref_batch_size=job["batch_size"],
        max_steps=batches,
        **PINNED,
    )
    return InOrder(model=model, args=args, train_dataset=Dataset.from_dict(text), processing_class=tokenizer)


def _examples(trainer) -> List[Dict[str, Any]]:
    return [dict(row) for row in trainer.train_dataset]


def dpo_step(job: Dict[str, Any]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        trainer = _dpo_trainer(job, root, batches=-(-job["pair_pool"] // job["batch_size"]))
        trainer.create_optimizer_and_scheduler(num_training_steps=10**6)
        model, optimizer = trainer.model, trainer.optimizer
        trainer.current_gradient_accumulation_steps = 1  # what train() sets before its first step
        model.train()
        pool = _examples(trainer)

        def step(batch):
            inputs = trainer.data_collator(batch)
            trainer.training_step(model, inputs)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        result = common.time_steps(step, pool, job["batch_size"], job["min_pairs"], job["min_seconds"])
        result["positions_per_batch"] = int(trainer.data_collator(pool[: job["batch_size"]])["input_ids"].numel())
    return result


def dpo_fit(job: Dict[str, Any]) -> Dict[str, Any]:
    """``DPOTrainer.train()`` on the same batches as our ``Trainer.fit``, timed after two warm-up steps."""
    from transformers import TrainerCallback

    steps = 2 + max(1, -(-job["min_pairs"] // job["batch_size"]))
    times: List[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as root:
        trainer = _dpo_trainer(job, root, batches=steps)
        trainer.add_callback(Clock())
        trainer.train()
    pairs = (len(times) - 2) * job["batch_size"]
    seconds = times[-1] - times[1]
    return {"pairs": pairs, "seconds": seconds, "pairs_per_s": pairs / seconds, "ms_per_pair": 1000 * seconds / pairs}


def dpo_check(job: Dict[str, Any]) -> Dict[str, Any]:
    """The first batch as TRL collates it (token ids read back per pair) and the policy's margins on it."""
    with tempfile.TemporaryDirectory() as root:
        trainer = _dpo_trainer(job, root)
        batch = trainer.data_collator(_examples(trainer)[: job["batch_size"]])
        pairs, positions = common.padded_rows(
            batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["completion_mask"].tolist()
        )
        trainer.model.eval()
        chosen, rejected = trainer.compute_ref_log_probs(trainer.model, batch)
    return {"pairs": pairs, "margins": (chosen - rejected).tolist(), "positions": positions}


def grpo_step(job: Dict[str, Any]) -> Dict[str, Any]:
    """Steps of ``GRPOTrainer.train()`` (``items`` prompts x ``generations`` samples per step); the
    median step time after two warm-up steps."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = _model_and_tokenizer(job)
    times: List[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter())

    def reward(completions, **kwargs):
        return common.vowel_reward(completions)

    steps = job["steps"] + 2
    prompts = [common.writer_prompt(item) for item in common.items(job["items"] * steps)]
    with tempfile.TemporaryDirectory() as root:
        args = GRPOConfig(
            output_dir=root,
            per_device_train_batch_size=job["items"] * job["generations"],  # completions per step
            num_generations=job["generations"],
            max_completion_length=job["max_new_tokens"],
            temperature=common.GENERATION["temperature"],
            top_p=common.GENERATION["top_p"],
            top_k=0,  # off, as ours' None
            beta=0.0,  # no KL to a reference (ours: reference_kl_enabled false)
            num_iterations=1,
            shuffle_dataset=False,
            max_steps=steps,
            **PINNED,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": prompts}),
            processing_class=tokenizer,
            callbacks=[Clock()],
        )
        sampling: List[tuple] = []
        trainer._generate_single_turn = common.timed(trainer._generate_single_turn, sampling)
        trainer.train()
    seconds = common.median_step_seconds(times, warmup=2)
    return {
        "steps": len(times) - 2,
        "seconds_per_step": seconds,
        "steps_per_s": 1 / seconds,
        "sampling_share": common.share_within(sampling, times[1], times[-1]),
    }


def versions(job: Dict[str, Any]) -> Dict[str, Any]:
    from importlib.metadata import version

    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": version("trl"),
        "threads": torch.get_num_threads(),
    }


JOBS = {f.__name__: f for f in (dpo_step, dpo_fit, dpo_check, grpo_step, versions)}

if __name__ == "__main__":
    common.worker_main(lambda job: JOBS[job["job"]](job))
