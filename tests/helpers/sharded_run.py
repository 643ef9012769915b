"""A tiny two-process run, sharded (FSDP2) or data parallel, for tests/runtime/test_sharding.py.

``python tests/helpers/sharded_run.py KIND ALGORITHM ROOT EPOCHS [RESUME] [--plain]``: KIND is ``fsdp``
(``ModelParallelStrategy``) or ``ddp``; ALGORITHM ``madpo`` (iterative, history comparator, 15
training items so the ranks' shares differ), ``magrpo`` (MAGRPO with the reference KL on the task
reward), ``marlhf_maac`` (a reward model, then MAAC with a shared critic), ``lora`` (a MADPO LoRA
team, all agents in one pass) or ``lora_per_agent`` (the same, one pass per agent). Rank 0 writes
``ROOT/weights.pt`` (every agent's whole state dict), ``ROOT/moved.json`` (which trainable tensors
changed), ``ROOT/one_pass.json`` (whether the team ran its agents in one pass),
``ROOT/evaluations.json`` (the evaluation reward before and after training), and every rank
``ROOT/forwards_rank_<r>.json`` (whose model ran each forward, in order). ``--plain``: the
Trainer does not reload its dataloaders every epoch (Lightning's default, a user's plain
``Trainer()``) where otherwise it does as the command line and the seed API. The tests call
:func:`main` in two ranks forked from pytest's process (tests/helpers/forks.py: no import
per run); run as a script, Lightning's launcher starts the second process by running it again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from peft import LoraConfig  # noqa: E402

from comlrl_lightning import (
    CurrentComparator,
    GenerationSettings,
    HistoryComparator,
    IterativePreferenceDataModule,
    LambdaDecayReplay,
    MADPOModule,
    MAGRPOModule,
    MARLHFModule,
    PreferenceDataModule,
    ReferenceKL,
    RewardModelFit,
    SharedCritic,
    TaskDataModule,
    TaskOptions,
    TeamOptions,
)
from comlrl_lightning.checkpoints.io import AtomicCheckpointIO, AtomicModelParallelStrategy  # noqa: E402
from comlrl_lightning.defaults import vowel_length_reward  # noqa: E402
from comlrl_lightning.runtime.sharding import full_state_dict  # noqa: E402
from comlrl_lightning.tasks.task import embedded_formatters, load_items  # noqa: E402

TASK = dict(
    task=TaskOptions(
        train_dataset=load_items("embedded")[:15],
        eval_dataset=load_items("embedded", role="eval"),  # the toy evaluation items, given as one's own list
        formatters=embedded_formatters(),
        reward_func=vowel_length_reward,
    ),
    eval_num_samples=5,
    eval_batch_size=2,
)
SAMPLING = dict(
    team=TeamOptions(agent_model="embedded"),
    sampling=GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None),
    agent_learning_rate=3e-3,
)


class RecordWeights(Callback):
    """Every agent's whole weights at the start and end (gathered when sharded); rank 0 writes them.
    Each rank writes ``forwards_rank_<r>.json``: whose model ran each forward of the fit, in order (a
    LoRA team: which adapter was active), which must be the same on every rank of a sharded team."""

    def __init__(self, root: Path) -> None:
        self.root, self.start, self.forwards = root, None, []

    def on_fit_start(self, trainer, pl_module) -> None:
        team = pl_module.team
        if team.is_lora:
            shared = team.lora_agent(0).get_base_model()
            shared.register_forward_pre_hook(lambda *_: self.forwards.append(team.lora_agent(0).shared.active_adapter))
        else:
            for index, agent in enumerate(team.agents):
                agent.register_forward_pre_hook(lambda *_, index=index: self.forwards.append(index))

    def _weights(self, module) -> list:
        team = module.team
        return [
            {k: v.float().clone() for k, v in (full_state_dict(a) if team.synced else a.state_dict()).items()}
            for a in team.agents
        ]

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = self._weights(pl_module)
        if trainer.global_rank == 0:
            (self.root / "one_pass.json").write_text(json.dumps(pl_module.team.one_pass_adapters() is not None))

    def on_train_end(self, trainer, pl_module) -> None:
        (self.root / f"forwards_rank_{trainer.global_rank}.json").write_text(json.dumps(self.forwards))
        end = self._weights(pl_module)
        if trainer.global_rank == 0:
            torch.save(end, self.root / "weights.pt")
            moved = {
                f"{i}:{k}": not torch.equal(self.start[i][k], v)
                for i, state in enumerate(end)
                for k, v in state.items()
                if "lora_" in k
            }
            (self.root / "moved.json").write_text(json.dumps(moved))
            evaluations = [pl_module.initial_eval_reward, pl_module.final_eval_reward]
            (self.root / "evaluations.json").write_text(json.dumps(evaluations))


def parts(algorithm: str):
    if algorithm == "marlhf_maac":  # a reward model fitted on every rank, then MAAC with a sharded critic
        module = MARLHFModule(
            **SAMPLING,
            rl_algorithm="maac",
            num_generations=2,
            reward_model=RewardModelFit(learning_rate=1e-3, train_batch_size=8),
            critic=SharedCritic(critic_type="q"),
        )
        return module, PreferenceDataModule(
            **TASK, preference_num_candidates=4, preference_pairs_per_sample=4, train_batch_size=2, num_train_epochs=1
        )
    if algorithm == "magrpo":
        module = MAGRPOModule(**SAMPLING, num_generations=3, reference_kl=ReferenceKL(coef=0.05))
        return module, TaskDataModule(**TASK, train_batch_size=2, num_train_epochs=1)
    is_lora = algorithm.startswith("lora")
    lora = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn"]) if is_lora else None
    team = TeamOptions(agent_model="embedded", lora=lora, lora_one_pass=algorithm == "lora")
    module = MADPOModule(**{**SAMPLING, "team": team})
    # a LoRA team's snapshots cannot be gathered yet under sharding: it plays against its live self
    comparator = CurrentComparator() if is_lora else HistoryComparator(k=1)
    data = IterativePreferenceDataModule(
        **TASK,
        num_iterations=3,
        num_train_epochs=1,
        preference_num_candidates=4,
        preference_pairs_per_sample=4,
        train_batch_size=4,
        comparator=comparator,
        replay=LambdaDecayReplay(lam=0.5, sample_size=16),
    )
    return module, data


def main(kind: str, algorithm: str, root: Path, epochs: int, resume: str | None = None, plain: bool = False) -> None:
    root.mkdir(parents=True, exist_ok=True)
    # as the command line builds them: checkpoint files and folders written atomically
    strategy = AtomicModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1) if kind == "fsdp" else "ddp"
    torch.manual_seed(0)  # peft draws LoRA adapters from the global generator: the same ones in every run
    module, data = parts(algorithm)
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        plugins=[AtomicCheckpointIO()],
        max_epochs=epochs,
        default_root_dir=str(root),
        enable_progress_bar=False,
        enable_model_summary=False,
        reload_dataloaders_every_n_epochs=0 if plain else 1,  # 1: as the command line and the seed API
        check_val_every_n_epoch=None,
        val_check_interval=3,
        logger=False,
        callbacks=[
            RecordWeights(root),
            ModelCheckpoint(dirpath=root / "ckpt", save_last=True, save_on_train_epoch_end=True),
        ],
    )
    trainer.fit(module, data, ckpt_path=resume)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--plain"]
    resume = args[4] if len(args) > 4 else None
    main(args[0], args[1], Path(args[2]), int(args[3]), resume, plain="--plain" in sys.argv[1:])
