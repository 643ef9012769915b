"""LoRA teams: one base, one adapter per agent; every adapter trains every step, also under DDP."""

from __future__ import annotations

import contextlib
import hashlib
import json

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from peft import LoraConfig

from comlrl_lightning import (
    HistoryComparator,
    IterativePreferenceDataModule,
    MADPOModule,
    MARLHFModule,
    MemoryOptions,
    PreferenceDataModule,
    ReferenceKL,
    RewardModelFit,
)
from comlrl_lightning.team.loading import load_tokenizer
from comlrl_lightning.team.lora import LoraAgent, adapter_parameters, build_lora_agents
from comlrl_lightning.team.team import Team, pack_sequences
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_team

ADAPTER = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn"])
LORA = dict(TINY_MODEL, team=tiny_team(lora=ADAPTER), agent_learning_rate=1e-2)


class AdapterGradients(Callback):
    """Records, before every optimizer step, whether each agent's adapter has a non-zero gradient."""

    def __init__(self, directory=None) -> None:
        self.steps, self.directory = [], directory

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # every LoRA matrix has a gradient; at least one is non-zero (B starts at zero, so A's is zero at first)
        self.steps.append(
            [
                all(p.grad is not None for p in agent.trainable_parameters())
                and any(p.grad.abs().sum() > 0 for p in agent.trainable_parameters())
                for agent in pl_module.team.agents
            ]
        )

    def on_train_end(self, trainer, pl_module) -> None:
        if self.directory is not None:
            digest = hashlib.sha256()
            for key, value in sorted(pl_module.team.state_dict().items()):
                digest.update(value.detach().numpy().tobytes())
            record = {"steps": self.steps, "weights": digest.hexdigest()}
            (self.directory / f"lora_{trainer.global_rank}.json").write_text(json.dumps(record))


def _trainer(tmp_path, **options):
    defaults = dict(
        accelerator="cpu",
        max_epochs=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
    )
    defaults.update(options)
    return Trainer(**defaults)


def test_a_lora_team_is_one_base_with_an_adapter_per_agent():
    module = MADPOModule(**dict(LORA, team=tiny_team(num_agents=3, lora=ADAPTER)))
    agents = module.team.agents
    assert all(isinstance(a, LoraAgent) for a in agents) and agents[0].shared is agents[2].shared
    full = sum(p.numel() for p in MADPOModule(**dict(TINY_MODEL, team=tiny_team(num_agents=3))).team.parameters())
    shared = sum(p.numel() for p in module.team.parameters())
    assert shared < full / 2  # close to one model, not three
    groups = module.configure_optimizers().param_groups
    assert [len(g["params"]) for g in groups] == [4, 4, 4]  # each agent's own LoRA A and B matrices
    names = {id(p): n for n, p in agents[0].shared.named_parameters()}
    assert all(".agent_1." in names[id(p)] for p in groups[1]["params"])


# DoRA magnitudes and modules_to_save copies are adapter parameters too: every agent trains its own
WIDER = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn"], use_dora=True, modules_to_save=["ln_f"])


@pytest.mark.parametrize("adapter", [ADAPTER, WIDER], ids=["lora", "dora_and_modules_to_save"])
def test_every_agents_adapter_receives_gradients_every_step(tmp_path, adapter):
    spy = AdapterGradients()
    _trainer(tmp_path, callbacks=[spy], limit_train_batches=3).fit(
        MADPOModule(**dict(LORA, team=tiny_team(lora=adapter))), PreferenceDataModule(**TINY_DATA)
    )
    assert len(spy.steps) == 3 and all(all(step) for step in spy.steps)


def test_every_parameter_a_lora_config_adds_belongs_to_one_agent_and_trains():
    agents = build_lora_agents("embedded", 2, WIDER)
    shared = agents[0].shared
    names = {id(p): n for n, p in shared.named_parameters()}
    for index, agent in enumerate(agents):
        own = [names[id(p)] for p in agent.trainable_parameters()]
        assert any("lora_magnitude_vector" in n for n in own) and any("modules_to_save" in n for n in own)
        assert all(f".agent_{index}." in n for n in own)
    assert all(p.requires_grad for p in adapter_parameters(shared))
    assert sum(p.requires_grad for p in shared.parameters()) == len(adapter_parameters(shared))  # the base is frozen
    assert agents[0].shared.peft_config["agent_1"].task_type == "CAUSAL_LM"
    assert WIDER.task_type is None  # the given config is copied, not changed


def test_the_set_adapter_trap_that_the_agent_view_avoids():
    # Switching adapters with plain peft between the agents' forwards freezes the earlier agent's
    # adapter, so one backward would train only the last agent.
    agents = build_lora_agents("embedded", 2, ADAPTER)
    shared, tokenizer = agents[0].shared, load_tokenizer("embedded")
    batch = pack_sequences([[3, 4, 5]], [[6, 7]], [2], tokenizer.pad_token_id)
    losses = []
    for name in ("agent_0", "agent_1"):
        shared.set_adapter(name)  # plain peft
        losses.append(shared(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.sum())
    assert not any(p.requires_grad for n, p in shared.named_parameters() if ".agent_0." in n)
    for agent in agents:  # our views re-enable every adapter
        agent.activate()
    assert all(p.requires_grad for n, p in shared.named_parameters() if "lora_" in n)


def _joint_gradients(team, batch):
    team.zero_grad(set_to_none=True)
    sum(team.score([batch], unit="sequence", agents=[agent])[0].sum() for agent in range(2)).backward()
    return {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}


def test_checkpointed_lora_agents_recompute_through_their_own_adapter(monkeypatch):
    """Backward recomputes agent 0's layers after agent 1's forward left agent 1's adapter active."""
    from comlrl_lightning.team import activation_checkpointing as checkpointing
    from comlrl_lightning.team import lora

    torch.manual_seed(0)
    agents = build_lora_agents("embedded", 2, ADAPTER)
    team = Team(agents, tokenizers=load_tokenizer("embedded")).train()
    with torch.no_grad():
        for agent, shift in zip(agents, (0.05, -0.05)):  # distinct adapters
            for parameter in agent.trainable_parameters():
                parameter.add_(shift)
    batch = pack_sequences([[3, 4, 5], [3, 9]], [[6, 7, 8], [8, 9]], [3, 2], 0)
    plain = _joint_gradients(team, batch)
    checkpointing.enable_activation_checkpointing(agents[0])
    torch.testing.assert_close(_joint_gradients(team, batch), plain, rtol=1e-5, atol=1e-7)
    # negative control: recomputing under whichever adapter is active trains agent 0 on agent 1's
    monkeypatch.setattr(lora, "recomputed_inside", lambda model, state: contextlib.nullcontext())
    wrong = _joint_gradients(team, batch)
    assert not all(torch.allclose(wrong[n], plain[n], rtol=1e-5, atol=1e-7) for n in plain if ".agent_0." in n)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_reference_log_probs_come_from_the_base_with_adapters_disabled(tmp_path):
    module = MARLHFModule(
        **dict(LORA, num_generations=2, reference_kl=ReferenceKL(), reward_model=RewardModelFit(train_batch_size=8))
    )
    spy = AdapterGradients()
    _trainer(tmp_path, limit_train_batches=2, callbacks=[spy]).fit(
        module, PreferenceDataModule(**dict(TINY_DATA, train_batch_size=4))
    )
    assert module.reference is None  # no copy of the base
    # leaving peft's disable_adapter() freezes the inactive adapters: every agent must still train
    assert len(spy.steps) == 2 and all(all(step) for step in spy.steps)
    base = Team(["embedded"])
    batch = pack_sequences([[3, 4, 5], [3, 9]], [[6, 7], [8]], [2, 1], 0)
    args = (batch["input_ids"], batch["attention_mask"], 2)
    with torch.no_grad():
        disabled = module.team._token_logprobs(0, *args, model=module.reference_model(0))
        trained = module.team._token_logprobs(0, *args)
        original = base._token_logprobs(0, *args)
    torch.testing.assert_close(disabled, original)
    assert not torch.allclose(trained, original)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_history_comparator_with_a_lora_team(tmp_path):
    data = dict(
        TINY_DATA,
        num_iterations=2,
        num_train_epochs=1,
        comparator=HistoryComparator(k=1),
        preference_pairs_per_sample=2,
    )
    data.pop("train_batch_size")
    fit = _trainer(tmp_path, max_epochs=2, reload_dataloaders_every_n_epochs=1, limit_train_batches=2)
    fit.fit(MADPOModule(**LORA), IterativePreferenceDataModule(**data, train_batch_size=8))
    assert (tmp_path / "policy_snapshots" / "iteration_0000" / "agent_1" / "model.safetensors").exists()
    assert fit.global_step == 4


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", [False, True])
def test_adapters_train_in_lockstep_under_two_process_ddp(tmp_path, checkpointing):
    spy = AdapterGradients(tmp_path)
    _trainer(tmp_path, devices=2, strategy="ddp_fork", callbacks=[spy]).fit(
        MADPOModule(
            **dict(LORA, team=tiny_team(lora=ADAPTER, memory=MemoryOptions(gradient_checkpointing=checkpointing)))
        ),
        PreferenceDataModule(**TINY_DATA),
    )
    ranks = [json.loads((tmp_path / f"lora_{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["steps"] and all(all(step) for rank in ranks for step in rank["steps"])


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_lora_team_in_one_pass_resumes_exactly(tmp_path):
    """Collection samples both agents in one pass from per-request seeds: a run stopped inside a round
    and resumed writes the same round files and ends with the same weights as an uninterrupted one."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.helpers.iterative_run import make_run

    def run(root, ckpt=None, **options):
        torch.manual_seed(0)  # peft draws the adapters' A matrices from the global generator
        module, data, trainer = make_run(
            root,
            data=dict(num_iterations=2),
            model=dict(team=tiny_team(lora=LoraConfig(r=4, lora_alpha=16))),
            max_epochs=4,
            **options,
        )
        assert module.team.one_pass_adapters() == ["agent_0", "agent_1"]
        trainer.fit(module, data, ckpt_path=ckpt)
        files = {p.name: p.read_bytes() for p in sorted((root / "preference_replay").glob("iteration_*.json"))}
        return {k: v.detach().clone() for k, v in module.team.state_dict().items()}, files, trainer.global_step

    weights, files, steps = run(tmp_path / "full")
    assert sorted(files) == ["iteration_0001.json", "iteration_0002.json"] and steps == 12
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_train_steps=1)
    run(tmp_path / "part", callbacks=[checkpoint], max_steps=8)  # inside round 2
    resumed, resumed_files, resumed_steps = run(
        tmp_path / "part", ckpt=str(next((tmp_path / "ckpt").glob("*step=8.ckpt")))
    )
    assert resumed_files == files and resumed_steps == steps
    for key, value in weights.items():
        torch.testing.assert_close(resumed[key], value, rtol=0, atol=0, msg=key)
