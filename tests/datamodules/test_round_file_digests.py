"""The round files of two shipped configs are byte-identical to the recorded ones (sha256 per file).

The safety net of issue 49's round pipeline: a change to how a round is collected (sampling,
scoring, pairing, sharding, the record's form) must leave the files of ``configs/madpo_iter.yaml``
(3 rounds, one thread) and of ``configs/coding_madpo_iter_2turn.yaml`` (its smallest run that
samples, scores and pairs both turns) unchanged. The digests are in ``round_file_digests.json``
beside this file, with the command lines that made them and the CPU they were recorded on: runs
repeat bit for bit on one machine with one thread count, but another CPU may add floating-point
sums in another order (docs/getting-started.md), so on another CPU the test is skipped, naming it.

Regenerate (only when a change of the round files is intended, and say why in the commit)::

    python -m tests.datamodules.test_round_file_digests
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
DIGESTS = Path(__file__).with_name("round_file_digests.json")

RUNS: Dict[str, List[str]] = {
    "madpo_iter": [
        "--config",
        "configs/madpo_iter.yaml",
        "--data.init_args.num_iterations",
        "3",
        # what the round files do not depend on is left out (the digests are the same): the evaluations,
        # and round 3's training after its file. 12 updates an epoch, 2 epochs a round: round 3 is
        # collected and written at the start of epoch 5, after update 48, and update 49 ends the run
        # (stopped earlier, round 3 is never collected and its digest is missing: the test fails).
        "--trainer.limit_val_batches",
        "0",
        "--trainer.max_steps",
        "49",
    ],
    # SmolLM2 (the config's model: the embedded one has no chat template for the coding prompts), one
    # HumanEval problem, two trajectories a side, no evaluation, no update. The vowel reward instead of the test
    # runner's: the code reward gives 16 new tokens of code the same score everywhere (no pair to
    # compare), and the shifted vowel score never reaches the early stop, so every trajectory takes
    # both turns and the code feedback still runs the tests between them.
    "coding_madpo_iter_2turn": [
        "--config",
        "configs/coding_madpo_iter_2turn.yaml",
        "--data.init_args.num_iterations",
        "1",
        "--data.init_args.task.train_dataset.init_args.limit",
        "1",
        "--data.init_args.preference_num_candidates",
        "2",
        "--data.init_args.preference_pairs_per_sample",
        "2",
        "--data.init_args.task.reward_func",
        "comlrl_lightning.defaults.vowel_length_reward",
        "--model.init_args.sampling.max_new_tokens",
        "16",
        "--trainer.limit_val_batches",
        "0",
        # no update: the round file is written when the first epoch asks for its data, before training,
        # which only cost time here (a third of the run: a two-turn pair's forward and backward)
        "--data.init_args.train_batch_size",
        "1",
        "--trainer.max_steps",
        "0",
    ],
}
"""Each run's options after ``comlrl-lightning fit`` (the run folder and progress options are added)."""


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string elsewhere."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or "unknown"


def round_file_digests(name: str, folder: Path) -> Dict[str, str]:
    """Run ``RUNS[name]`` with one thread into ``folder`` (the command line's ``main`` in a process forked
    from this one: no second import of torch and Lightning); the sha256 of each round file it wrote, by file name."""
    from comlrl_lightning.cli import main
    from tests.helpers.forks import account, in_folder, run_forked

    arguments = [
        "fit",
        *RUNS[name],
        "--trainer.default_root_dir",
        str(folder),
        "--trainer.enable_progress_bar",
        "false",
    ]
    log = folder.parent / f"{folder.name}.log"
    one_thread = {"COMLRL_LIGHTNING_THREADS": "1"}
    assert run_forked(in_folder, REPO, main, arguments, log=log, timeout=1200, environment=one_thread) == 0, account(
        log
    )
    files = sorted((folder / "preference_replay").glob("iteration_*.json"))
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in files}


def recorded() -> Dict[str, object]:
    return json.loads(DIGESTS.read_text())


def check(name: str, tmp_path: Path) -> None:
    expected = recorded()
    if expected["cpu"] != cpu_model():
        pytest.skip(f"round file digests were recorded on {expected['cpu']!r}, not on this {cpu_model()!r} CPU")
    assert round_file_digests(name, tmp_path) == expected["runs"][name]  # type: ignore[index]


@pytest.mark.slow  # a 3-round run in a process of its own (about 15 s of CPU)
def test_the_iterative_default_writes_the_recorded_round_files(tmp_path):
    check("madpo_iter", tmp_path)


@pytest.mark.slow
@pytest.mark.real_model  # SmolLM2 samples two turns: minutes on a busy CPU
def test_the_two_turn_coding_config_writes_the_recorded_round_files(tmp_path, real_model):
    check("coding_madpo_iter_2turn", tmp_path)


def regenerate() -> None:
    """Record the digests of every run with the code as it is (see the module's docstring)."""
    import tempfile

    runs = {}
    for name in RUNS:
        with tempfile.TemporaryDirectory() as folder:
            runs[name] = round_file_digests(name, Path(folder))
    payload = {
        "comment": "sha256 of each round file of tests/datamodules/test_round_file_digests.py's runs; "
        "regenerate with: python -m tests.datamodules.test_round_file_digests",
        "cpu": cpu_model(),
        "threads": 1,
        "commands": {name: ["comlrl-lightning", "fit", *options] for name, options in RUNS.items()},
        "runs": runs,
    }
    DIGESTS.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    regenerate()
