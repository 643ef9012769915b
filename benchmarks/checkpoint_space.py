"""The space a self-contained checkpoint costs, after 10 and after 100 rounds.

    python benchmarks/checkpoint_space.py            # writes benchmarks/CHECKPOINT_SPACE.md and prints it
    python benchmarks/checkpoint_space.py --rounds 3 # a quick look

One iterative MADPO run (the seed API, embedded model, history comparator with k=1, nearest-k replay)
writes a ``checkpoint-N`` folder after every round (``checkpoint_total_limit=None``). For the
checkpoints after 10 and after 100 rounds this measures what each holds: the Lightning checkpoint
itself, and its asset folder (the round files and policy snapshots it names). An asset file is a
copy of the run's live file made once, by the first checkpoint that carries it, and every later
checkpoint hard-links that copy: what a checkpoint adds on disk is its directory blocks and the
files no other checkpoint shares (the newest round file and snapshot, until the next checkpoint
links them); a copy of each (what a checkpoint on another file system costs) is the files'
apparent size. The run's history is so stored twice in all: the live files, and one copy shared
by the checkpoints.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent


def folder_cost(folder: Path) -> Dict[str, int]:
    """Files, apparent bytes, and bytes on disk this folder adds (blocks of directories and of files
    no other folder links to) for the asset tree ``folder``."""
    files = apparent = added = 0
    for path in [folder, *folder.rglob("*")]:
        info = os.lstat(path)
        if path.is_dir():
            added += info.st_blocks * 512
        else:
            files += 1
            apparent += info.st_size
            added += info.st_blocks * 512 if info.st_nlink == 1 else 0
    return {"files": files, "apparent": apparent, "added": added}


def measure(root: Path, rounds: int, marks) -> Dict[int, Dict[str, int]]:
    import torch

    from comlrl_lightning.trainers.configs import MADPOIterConfig
    from comlrl_lightning.trainers.preference import MADPOIterTrainer

    torch.manual_seed(0)
    args = MADPOIterConfig(
        num_iterations=rounds,
        max_new_tokens=6,
        preference_num_candidates=4,
        preference_pairs_per_sample=4,
        train_batch_size=8,
        eval_interval=0,
        comparator_policy="history",
        preference_replay_mode="nearest_k",
        preference_replay_k=4,
        preference_replay_sample_size=16,
    )
    trainer = MADPOIterTrainer(
        agent_model="embedded",
        args=args,
        wandb_config={"output_dir": str(root), "config_sections": {"output": {"verbose": False}}},
    )
    started = time.perf_counter()
    trainer.train(checkpoint_dir=str(root / "ckpt"))
    seconds = time.perf_counter() - started
    results = {}
    for mark in marks:
        folder = root / "ckpt" / f"checkpoint-{mark}"
        assets = folder_cost(folder / "checkpoint.assets")
        results[mark] = {
            "ckpt": (folder / "checkpoint.ckpt").stat().st_size,
            "round_files": len(list((folder / "checkpoint.assets" / "preference_replay").glob("*.json"))),
            "snapshots": len(list((folder / "checkpoint.assets" / "policy_snapshots").glob("*"))),
            **assets,
        }
    results["seconds"] = round(seconds, 1)
    return results


def table(results: Dict, rounds: int) -> str:
    import torch

    kib = lambda n: f"{n / 1024:,.1f}"  # noqa: E731
    lines = [
        f"Iterative MADPO on the embedded model (history comparator k=1, nearest-k replay), a checkpoint after "
        f"every round, {rounds} rounds in {results['seconds']} s; torch {torch.__version__}, {platform.machine()}.",
        "",
        "| checkpoint after | checkpoint.ckpt (KiB) | round files | policy snapshots | asset files | "
        "assets if copied (KiB) | assets linked between checkpoints: added on disk (KiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for mark, row in results.items():
        if mark == "seconds":
            continue
        lines.append(
            f"| {mark} rounds | {kib(row['ckpt'])} | {row['round_files']} | {row['snapshots']} | {row['files']} | "
            f"{kib(row['apparent'])} | {kib(row['added'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--out", type=Path, default=HERE / "CHECKPOINT_SPACE.md")
    options = parser.parse_args(argv)
    marks = sorted({min(10, options.rounds), options.rounds})
    with tempfile.TemporaryDirectory(prefix="checkpoint-space-") as root:
        results = measure(Path(root), options.rounds, marks)
    text = table(results, options.rounds)
    if options.rounds == 100:
        options.out.write_text(text)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
