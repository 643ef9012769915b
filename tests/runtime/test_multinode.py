"""Two nodes on one machine: the torchrun and SLURM command lines of docs/scaling.md, run as written.

Each "node" is its own process (one device per node, gloo on 127.0.0.1). DDP through torchrun and
through SLURM's variables, and FSDP2 (ModelParallelStrategy) through torchrun, must write byte for
byte the round files of one node with two processes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.helpers.forks import free_port

REPO = Path(__file__).resolve().parents[2]
SIZES = [
    "--data.init_args.num_iterations",
    "2",
    "--data.init_args.num_train_epochs",
    "1",
    "--model.init_args.sampling.max_new_tokens",
    "4",
    "--data.init_args.preference_num_candidates",
    "3",
    "--data.init_args.comparator.init_args.num_candidates",
    "3",
    "--data.init_args.replay.init_args.sample_size",
    "16",
    "--data.init_args.eval_num_samples",
    "4",
    "--trainer.enable_progress_bar",
    "false",
]
"""Appended to every command: a small run (2 rounds of 1 epoch, 3 candidates of 4 tokens, 4 evaluation items)."""


def documented_commands() -> Dict[str, List[str]]:
    """The torchrun and srun command lines of docs/scaling.md's "Several nodes" section, by launcher and
    configs (a base and its overlays joined by ``+``: ``torchrun madpo_iter+fsdp``)."""
    text = (REPO / "docs" / "scaling.md").read_text(encoding="utf-8")
    section = text[text.index("## Several nodes") :]
    section = section[: section.index("\n## ", 1)]
    commands = {}
    for line in re.findall(r"^(?:torchrun|srun) .*$", section, flags=re.M):
        words = shlex.split(line)
        config = "+".join(Path(words[i + 1]).stem for i, word in enumerate(words) if word == "--config")
        commands[f"{words[0]} {config}"] = words
    return commands


def node_command(words: List[str], node: int, port: int) -> List[str]:
    """One node's process for a documented line: torchrun as ``python -m torch.distributed.run``,
    srun's ``python`` as this interpreter (srun itself only starts it with the SLURM variables)."""
    values = {"$NODE_RANK": str(node), "$MASTER_ADDR": "127.0.0.1", "29500": str(port)}
    words = [values.get(word, word) for word in words]
    if words[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *words[1:]]
    assert words[:2] == ["srun", "python"], words
    return [sys.executable, *words[2:]]


def srun_variables(node: int, port: int) -> Dict[str, str]:
    """What ``srun`` sets for task ``node`` of a 2-node job with one task per node."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "comlrl-multinode-test",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "2",
        "SLURM_NODELIST": "127.0.0.1",
        "SLURM_PROCID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(node),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def launch(commands: List[List[str]], envs: List[Dict[str, str]], root: Path) -> None:
    """Start every process, wait for all; a failure or a hang fails the test with each one's stderr tail."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    base.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    logs = [open(root / f"process_{i}.log", "w+") for i in range(len(commands))]
    processes = [
        subprocess.Popen(
            command + SIZES + ["--trainer.default_root_dir", str(root)],
            cwd=REPO,
            env={**base, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for command, env, log in zip(commands, envs, logs)
    ]
    try:
        codes = [process.wait(timeout=400) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    tails = []
    for log in logs:
        log.seek(0)
        tails.append(log.read()[-3000:])
        log.close()
    assert codes == [0] * len(commands), "\n----\n".join(tails)


def round_files(root: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "preference_replay").glob("iteration_*.json"))}


@pytest.fixture(scope="module")
def one_node_root(tmp_path_factory) -> Path:
    """The folder of a run on one node with two processes: the command line with the plain
    ``--trainer.strategy ddp`` flag (Lightning starts the second process)."""
    root = tmp_path_factory.mktemp("one_node")
    command = [sys.executable, "-m", "comlrl_lightning", "fit", "--config", "configs/madpo_iter.yaml"]
    launch([command + ["--trainer.strategy", "ddp", "--trainer.devices", "2"]], [{}], root)
    return root


@pytest.fixture(scope="module")
def one_node(one_node_root) -> Dict[str, bytes]:
    """Round files of one node with two processes."""
    files = round_files(one_node_root)
    assert sorted(files) == ["iteration_0001.json", "iteration_0002.json"]
    return files


@pytest.mark.slow
def test_cli_runs_with_the_plain_ddp_strategy_flag(one_node_root):
    # one set of round files (rank 0 writes them) and a checkpoint
    assert sorted(p.name for p in (one_node_root / "preference_replay").iterdir()) == [
        ".lock",
        "iteration_0001.json",
        "iteration_0002.json",
    ]
    assert list(one_node_root.glob("lightning_logs/version_0/checkpoints/*.ckpt"))


def test_the_docs_give_a_torchrun_line_per_strategy_and_an_srun_line():
    commands = documented_commands()
    assert sorted(commands) == ["srun madpo_iter", "torchrun madpo_iter", "torchrun madpo_iter+fsdp"]
    for words in commands.values():
        assert words[words.index("--trainer.num_nodes") + 1] == "2"
        assert words[words.index("--trainer.devices") + 1] == "1"
    torchrun = commands["torchrun madpo_iter"]
    assert torchrun[torchrun.index("--nnodes") + 1] == "2" and torchrun[torchrun.index("--nproc-per-node") + 1] == "1"


@pytest.mark.slow
@pytest.mark.parametrize("config", ["madpo_iter", "madpo_iter+fsdp"])
def test_two_torchrun_nodes_write_the_round_files_of_one_node(one_node, tmp_path, config):
    words, port = documented_commands()[f"torchrun {config}"], free_port()
    launch([node_command(words, node, port) for node in (0, 1)], [{}, {}], tmp_path)
    assert round_files(tmp_path) == one_node
    checkpoints = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    assert (checkpoints / "last.ckpt").exists()


@pytest.mark.slow
def test_two_slurm_tasks_write_the_round_files_of_one_node(one_node, tmp_path):
    words, port = documented_commands()["srun madpo_iter"], free_port()
    launch(
        [node_command(words, node, port) for node in (0, 1)],
        [srun_variables(node, port) for node in (0, 1)],
        tmp_path,
    )
    assert round_files(tmp_path) == one_node
