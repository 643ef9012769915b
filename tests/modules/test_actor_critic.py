"""Actor-critic backends (MAAC, IAC): critic options, one update against the formulas and its direction,
learning, scale."""

from __future__ import annotations

import copy
import csv
import hashlib
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import CSVLogger
from peft import LoraConfig

from comlrl_lightning import (
    IterativePreferenceDataModule,
    MAGRPOModule,
    MARLHFModule,
    OptionError,
    RewardModelFit,
    TaskDataModule,
)
from comlrl_lightning.critics import (
    IndividualCritics,
    SharedCritic,
    maac_critic_text,
)
from comlrl_lightning.rounds.replay import AllHistoryReplay
from tests.conftest import tiny_sampling, tiny_task, tiny_team
from tests.helpers.update_direction import FixedReturnsModule, one_update, rollout_logprobs

TINY = dict(team=tiny_team(), sampling=tiny_sampling(max_new_tokens=5), num_generations=3)
PROMPTS = [["topic: ab\nwriter:", "topic: ab\nmatcher:"], ["topic: cde\nwriter:", "topic: cde\nmatcher:"]]
ITEMS = [{"prompt": "ab"}, {"prompt": "cde"}]  # the items of PROMPTS
RETURNS = torch.tensor([[0.3, -0.2, 0.9], [0.1, 0.4, -0.7]])  # [items, G]


# ---------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: SharedCritic(critic_type="x"), "critic_type must be one of: v, q."),
        (lambda: SharedCritic(value_loss_coef=0.0), "value_loss_coef must be > 0."),
        (lambda: SharedCritic(learning_rate=0.0), "learning_rate must be > 0 or null."),
        (lambda: SharedCritic(critic_value_head_hidden_dim=0), "critic_value_head_hidden_dim must be >= 1 or null."),
        (lambda: IndividualCritics(value_clip_range=0.0), "value_clip_range must be > 0 or null."),
        (
            lambda: IndividualCritics(value_head_hidden_dim=8),
            "value_head_hidden_dim sizes the value head on an agent; it needs use_separate_critic: false.",
        ),
        (
            lambda: IndividualCritics(use_separate_critic=False, model_name="m"),
            "model_name belongs to a separate critic",
        ),
        (
            lambda: IndividualCritics(use_separate_critic=False, critic_value_head_hidden_dim=4),
            "critic_value_head_hidden_dim belongs to a separate critic",
        ),
        (
            lambda: MAGRPOModule(rl_algorithm="iac", critic=SharedCritic()),
            "critic SharedCritic belongs to rl_algorithm='maac'",
        ),
        (
            lambda: MAGRPOModule(critic=IndividualCritics()),
            "critic is used by rl_algorithm maac or iac, not by magrpo.",
        ),
    ],
)
def test_critic_options_are_checked_with_messages_naming_them(make, message):
    with pytest.raises(OptionError) as error:
        make()
    assert message in str(error.value)


def test_each_algorithm_gets_its_critic_and_no_model_is_loaded_while_parsing():
    maac, iac = MAGRPOModule(rl_algorithm="maac", num_generations=1), MAGRPOModule(rl_algorithm="iac")
    assert isinstance(maac.critic, SharedCritic) and isinstance(iac.critic, IndividualCritics)
    assert not maac.critic.has_networks and maac._team is None
    assert MAGRPOModule().critic is None


def test_the_cli_rejects_an_option_of_the_other_backend(capsys, tmp_path):
    from comlrl_lightning.cli import main

    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "--config",
                "configs/marlhf_maac.yaml",
                "--trainer.default_root_dir",
                str(tmp_path),
                "--model.init_args.critic.init_args.use_separate_critic",
                "false",
            ]
        )
    assert "use_separate_critic" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# One update against a direct computation of the formulas


def _direct_logprob(agent, tokenizer, prompt, completion_ids):
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    ids = torch.tensor([prompt_ids + list(completion_ids)])
    logprobs = F.log_softmax(agent(input_ids=ids).logits[0, :-1].float(), dim=-1)
    targets = ids[0, 1:]
    picked = logprobs[torch.arange(len(targets)), targets]
    return picked[len(prompt_ids) - 1 :].sum()


def _last_hidden(backbone, tokenizer, text):
    ids = torch.tensor([tokenizer(text, add_special_tokens=True)["input_ids"]])
    return backbone(input_ids=ids).last_hidden_state[0, -1]


def _direct_values(module, critic, texts):
    """``[N, items, G]`` values, one unpadded forward per critic input."""
    team, items, group = module.team, len(PROMPTS), module.num_generations
    rows = []
    for agent in range(module.num_agents):
        row = []
        for k in range(items):
            for g in range(group):
                if isinstance(critic, SharedCritic):
                    joint = [texts[a][k][g] for a in range(module.num_agents)] if critic.critic_type == "q" else None
                    text = maac_critic_text(PROMPTS[k], joint)
                    row.append(critic.model.head(_last_hidden(critic.model.backbone, critic.model.tokenizer, text)))
                    continue
                text = PROMPTS[k][agent] + (texts[agent][k][g] if critic.critic_type == "q" else "")
                if critic.use_separate_critic:
                    model = critic.models[agent]
                    row.append(model.head(_last_hidden(model.backbone, model.tokenizer, text)))
                else:
                    ids = torch.tensor([team.tokenizers[agent](text, add_special_tokens=True)["input_ids"]])
                    hidden = team.agents[agent](input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
                    row.append(critic.heads[agent](hidden))
        rows.append(torch.stack(row).view(items, group))
    return torch.stack(rows).float()


def _direct_loss(module, critic, samples, texts):
    values = _direct_values(module, critic, texts)
    loss = 0.0
    for agent in range(module.num_agents):
        logprobs = torch.stack(
            [
                _direct_logprob(
                    module.team.agents[agent],
                    module.team.tokenizers[agent],
                    PROMPTS[k][agent],
                    samples[agent][k][g].ids,
                )
                for k in range(len(PROMPTS))
                for g in range(module.num_generations)
            ]
        )
        raw = (RETURNS - values[agent].detach()).reshape(-1)
        advantage = (raw - raw.mean()) / raw.std(unbiased=False)
        loss = loss + (-advantage * logprobs).mean()
    errors = torch.stack([((values[a] - RETURNS) ** 2).mean() for a in range(module.num_agents)])
    critic_loss = errors.mean() if isinstance(critic, SharedCritic) else errors.sum()
    return loss + critic.value_loss_coef * critic_loss


@pytest.mark.parametrize(
    "algorithm, critic",
    [
        ("maac", lambda: SharedCritic(critic_type="v")),
        ("maac", lambda: SharedCritic(critic_type="q", critic_value_head_hidden_dim=8)),
        ("iac", lambda: IndividualCritics(critic_type="v")),
        ("iac", lambda: IndividualCritics(critic_type="q", critic_value_head_hidden_dim=8)),
        ("iac", lambda: IndividualCritics(critic_type="v", use_separate_critic=False)),
        ("iac", lambda: IndividualCritics(critic_type="q", use_separate_critic=False, value_head_hidden_dim=8)),
    ],
    ids=["maac-v", "maac-q", "iac-separate-v", "iac-separate-q", "iac-head-v", "iac-head-q"],
)
def test_one_update_has_the_gradients_of_the_formulas(algorithm, critic):
    torch.manual_seed(0)
    module = MAGRPOModule(rl_algorithm=algorithm, critic=critic(), **TINY)
    module.configure_model()
    samples = module.sample_rollouts(ITEMS, PROMPTS)
    texts = [[[c.text for c in row] for row in agent] for agent in samples]
    logprobs, _ = module.score_team(PROMPTS, samples)
    loss, metrics = module.actor_critic_loss(PROMPTS, texts, logprobs, torch.stack([RETURNS] * module.num_agents))
    loss.backward()
    ours = {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}
    module.zero_grad()
    expected = _direct_loss(module, module.critic, samples, texts)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    direct = {name: p.grad for name, p in module.named_parameters() if p.grad is not None}
    assert ours.keys() == direct.keys() and any(name.startswith("critic.") for name in ours)
    assert any(name.startswith("_team.") for name in ours)
    for name in direct:
        torch.testing.assert_close(ours[name], direct[name], rtol=1e-4, atol=1e-6, msg=name)
    assert set(metrics) >= {
        "train/value_loss",
        "train/explained_variance",
        "train/value_mean",
        "train/advantage_mean",
        "train/agent_0/actor_loss",
        "train/agent_1/actor_loss",
    }


@pytest.mark.parametrize(
    "critic",
    [
        lambda: SharedCritic(learning_rate=1e-4),
        lambda: IndividualCritics(critic_type="q", learning_rate=1e-4),
        lambda: IndividualCritics(use_separate_critic=False, learning_rate=1e-4),
    ],
    ids=["maac-v", "iac-separate-q", "iac-head-v"],
)
def test_one_update_raises_the_actors_advantage_weighted_log_prob_and_lowers_the_critics_error(tmp_path, critic):
    """After one optimizer step on a fixed batch (two items, fixed returns), every agent's
    ``mean A_i * log pi_i`` over the update's own rollouts is higher, with ``A_i`` the standardised
    ``R - V_i`` of the critic before the step, and every critic's squared error to the returns is
    lower; advantages, log-probs and errors computed directly (only the critic's forward is the
    library's). The critic learns at 1e-4: at the agents' 1e-3 one AdamW step overshoots the returns."""
    made = critic()
    module = FixedReturnsModule(
        team=tiny_team(),
        rl_algorithm=made.algorithm,
        critic=made,
        num_generations=RETURNS.shape[1],
        agent_learning_rate=1e-3,
        sampling=tiny_sampling(max_new_tokens=5),
    )
    module.fixed_returns = RETURNS
    module.configure_model()
    initial = copy.deepcopy(module)
    data = TaskDataModule(task=tiny_task(eval_dataset=None), train_batch_size=RETURNS.shape[0], num_train_epochs=1)
    one_update(module, tmp_path, datamodule=data)
    prompts, samples = module.rollouts
    texts = [[[c.text for c in row] for row in agent] for agent in samples]
    with torch.no_grad():
        values_before = initial.critic.values(initial.team, prompts, texts)
        values_after = module.critic.values(module.team, prompts, texts)
    raw = RETURNS - values_before  # [N, items, G]
    advantages = torch.stack([(row - row.mean()) / row.std(unbiased=False) for row in raw])
    before, after = rollout_logprobs(initial.team, prompts, samples), rollout_logprobs(module.team, prompts, samples)
    objective_before, objective_after = (advantages * before).mean(dim=(1, 2)), (advantages * after).mean(dim=(1, 2))
    error_before = ((values_before - RETURNS) ** 2).mean(dim=(1, 2))
    error_after = ((values_after - RETURNS) ** 2).mean(dim=(1, 2))
    # measured: the objectives rise by 1.7 to 1.8, the errors fall by 0.01 to 0.13
    assert (objective_after > objective_before).all(), (objective_before, objective_after)
    assert (error_after < error_before).all(), (error_before, error_after)


def test_the_optimizer_has_a_group_per_critic_at_the_critic_learning_rate():
    module = MAGRPOModule(
        rl_algorithm="iac", critic=IndividualCritics(learning_rate=1e-3), agent_learning_rate=[2e-3, 3e-3]
    )
    module.configure_model()
    groups = module.configure_optimizers().param_groups
    assert [(g["name"], g["lr"]) for g in groups] == [
        ("agent_0", 2e-3),
        ("agent_1", 3e-3),
        ("critic_0", 1e-3),
        ("critic_1", 1e-3),
    ]
    shared = MAGRPOModule(rl_algorithm="maac", critic=SharedCritic(), agent_learning_rate=[2e-3, 3e-3])
    shared.configure_model()
    assert [(g["name"], g["lr"]) for g in shared.configure_optimizers().param_groups][-1] == ("critic", 2e-3)
    # a scheduler sees the critic groups too (they exist before the optimizer is built)
    scheduled = MAGRPOModule(rl_algorithm="maac", lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1))
    scheduled.configure_model()
    assert len(scheduled.configure_optimizers()["lr_scheduler"].base_lrs) == 3


# ---------------------------------------------------------------------------------------------
# Learning on the embedded default


def _run(tmp_path, module, epochs, **trainer_options):
    data = TaskDataModule(
        task=tiny_task(),
        train_batch_size=4,
        num_train_epochs=epochs,
        eval_num_samples=32,
        eval_batch_size=32,
    )
    options = dict(
        accelerator="cpu",
        max_epochs=epochs,
        default_root_dir=str(tmp_path),
        logger=CSVLogger(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        check_val_every_n_epoch=None,
        val_check_interval=1000,
        enable_checkpointing=False,
        log_every_n_steps=1,
    )
    trainer = Trainer(**{**options, **trainer_options})
    trainer.fit(module, data)
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    return [float(r["train/value_loss"]) for r in rows if r.get("train/value_loss")]


@pytest.mark.slow  # learning runs
@pytest.mark.parametrize(
    "algorithm, critic",
    [
        ("maac", SharedCritic(learning_rate=1e-3)),
        ("iac", IndividualCritics(learning_rate=1e-3)),
        ("iac", IndividualCritics(use_separate_critic=False)),
    ],
    ids=["maac", "iac-separate", "iac-head"],
)
def test_actor_critic_raises_the_task_reward_and_the_value_loss_falls(tmp_path, algorithm, critic):
    module = MAGRPOModule(
        team=tiny_team(),
        rl_algorithm=algorithm,
        critic=critic,
        num_generations=8,
        agent_learning_rate=3e-3,
        sampling=tiny_sampling(max_new_tokens=12),
    )
    value_losses = _run(tmp_path, module, epochs=5)
    assert module.final_eval_reward - module.initial_eval_reward > 0.5  # measured: about +0.9 on every variant
    assert sum(value_losses[-4:]) < 0.5 * sum(value_losses[:4])


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_critics_and_their_optimizer_state_persist_across_marlhf_rounds(tmp_path):
    seen = []

    class Watch(Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            state = trainer.optimizers[0].state
            critic = next(pl_module.critic.parameters())
            step = state.get(critic, {}).get("step")
            seen.append((trainer.current_epoch, critic.detach().clone(), None if step is None else float(step)))

        def on_train_epoch_end(self, trainer, pl_module):
            seen.append((trainer.current_epoch, next(pl_module.critic.parameters()).detach().clone(), None))

    module = MARLHFModule(
        team=tiny_team(),
        rl_algorithm="maac",
        num_generations=2,
        sampling=tiny_sampling(max_new_tokens=4),
        reward_model=RewardModelFit(train_batch_size=8),
    )
    data = IterativePreferenceDataModule(
        task=tiny_task(eval_dataset=None),
        num_iterations=2,
        num_train_epochs=1,
        preference_num_candidates=3,
        preference_pairs_per_sample=2,
        train_batch_size=8,
        replay=AllHistoryReplay(),
    )
    Trainer(
        accelerator="cpu",
        max_epochs=2,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[Watch()],
    ).fit(module, data)
    (_, _, step_0), (_, end_0, _), (_, start_1, step_1), _ = seen
    assert torch.equal(end_0, start_1)  # the critic is not rebuilt when round 2 starts
    assert step_0 is None and step_1 == 2.0  # and AdamW keeps its moments (2 updates in round 1)


# ---------------------------------------------------------------------------------------------
# Scale: LoRA teams, bf16, two processes


@pytest.mark.parametrize(
    "critic", [SharedCritic(), IndividualCritics(use_separate_critic=False)], ids=["maac", "iac-head"]
)
def test_a_lora_team_trains_with_critics(tmp_path, critic):
    module = MAGRPOModule(
        team=tiny_team(lora=LoraConfig(r=4, lora_alpha=16)),
        rl_algorithm=critic.algorithm,
        critic=critic,
        num_generations=2,
        agent_learning_rate=1e-2,
        sampling=tiny_sampling(max_new_tokens=4),
    )
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    _run(tmp_path, module, epochs=1, limit_train_batches=2)
    after = dict(module.named_parameters())
    changed = {n for n, value in before.items() if not torch.equal(after[n], value)}
    assert any("lora_" in n and "agent_0" in n for n in changed) and any(
        "lora_" in n and "agent_1" in n for n in changed
    )
    assert any(n.startswith("critic.") for n in changed)


@pytest.mark.parametrize(
    "critic",
    [lambda: SharedCritic(critic_type="q"), lambda: IndividualCritics(critic_type="v", use_separate_critic=False)],
    ids=["maac", "iac-head"],
)
def test_a_lora_team_in_one_pass_has_the_actor_critic_update_of_one_pass_per_agent(critic):
    torch.manual_seed(0)
    made = critic()
    team = tiny_team(lora=LoraConfig(r=4, lora_alpha=16))
    module = MAGRPOModule(rl_algorithm=made.algorithm, critic=made, **{**TINY, "team": team})
    module.configure_model()
    with torch.no_grad():  # distinct adapters, B away from its zero start
        for agent in module.team.agents:
            for parameter in agent.trainable_parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))
    assert module.team.one_pass_adapters() == ["agent_0", "agent_1"]
    samples = module.sample_rollouts(ITEMS, PROMPTS)
    texts = [[[c.text for c in row] for row in agent] for agent in samples]

    def update():
        module.zero_grad(set_to_none=True)
        logprobs, _ = module.score_team(PROMPTS, samples)
        loss, _ = module.actor_critic_loss(PROMPTS, texts, logprobs, torch.stack([RETURNS] * module.num_agents))
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}

    loss, gradients = update()
    module.team.one_pass = False
    expected_loss, expected = update()
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    assert gradients.keys() == expected.keys() and any(name.startswith("critic.") for name in gradients)
    assert {f"agent_{i}" for i in (0, 1)} <= {part for name in gradients for part in name.split(".")}
    for name, value in expected.items():
        torch.testing.assert_close(gradients[name], value, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_bf16_mixed_precision_has_bfloat16_activations_float32_weights_and_the_loss_of_float32(tmp_path):
    """What ``bf16-mixed`` changes and keeps in one actor-critic update: the agents' and the critics'
    activations are bfloat16, their weights stay float32, and the update's loss and critic loss are
    float32's on the same rollouts and weights up to bfloat16 rounding (but not equal)."""

    class Activations(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            blocks = [agent.transformer.h[-1].mlp for agent in pl_module.team.agents]  # GPT-2's last MLPs
            blocks += [critic.backbone.h[-1].mlp for critic in pl_module.critic.models]
            self.dtypes = []
            self.hooks = [b.register_forward_hook(lambda m, i, out: self.dtypes.append(out.dtype)) for b in blocks]

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            for hook in self.hooks:
                hook.remove()
            self.loss, self.value_loss = outputs["loss"].detach(), trainer.callback_metrics["train/value_loss"]

    module = FixedReturnsModule(
        team=tiny_team(),
        rl_algorithm="iac",
        critic=IndividualCritics(critic_type="q"),
        num_generations=RETURNS.shape[1],
        sampling=tiny_sampling(max_new_tokens=4),
    )
    module.fixed_returns = RETURNS
    module.configure_model()
    initial = copy.deepcopy(module)
    seen = Activations()
    data = TaskDataModule(task=tiny_task(eval_dataset=None), train_batch_size=RETURNS.shape[0], num_train_epochs=1)
    one_update(module, tmp_path, datamodule=data, precision="bf16-mixed", callbacks=[seen])
    assert len(seen.dtypes) >= 4 and set(seen.dtypes) == {torch.bfloat16}  # each agent and critic ran
    assert {p.dtype for p in module.parameters()} == {torch.float32}
    prompts, samples = module.rollouts
    texts = [[[c.text for c in row] for row in agent] for agent in samples]
    with torch.no_grad():
        logprobs, _ = initial.score_team(prompts, samples)
        loss, metrics = initial.actor_critic_loss(prompts, texts, logprobs, torch.stack([RETURNS] * 2))
    # measured: 5.6e-4 apart on a loss of 0.31, 1.2e-4 on a critic loss of 0.50
    assert seen.loss != loss and seen.value_loss != metrics["train/value_loss"]
    torch.testing.assert_close(seen.loss, loss, rtol=0, atol=5e-3)
    torch.testing.assert_close(seen.value_loss, metrics["train/value_loss"], rtol=0, atol=1e-3)


class Fingerprint(Callback):
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def on_train_end(self, trainer, pl_module) -> None:
        digests = {}
        for part, module in (("actors", pl_module.team), ("critic", pl_module.critic)):
            digest = hashlib.sha256()
            for key, value in sorted(module.state_dict().items()):
                digest.update(key.encode() + value.detach().cpu().float().numpy().tobytes())
            digests[part] = digest.hexdigest()
        (self.directory / f"rank_{trainer.global_rank}.json").write_text(json.dumps(digests))


@pytest.mark.slow
@pytest.mark.parametrize(
    "critic", [SharedCritic(critic_type="q"), IndividualCritics(use_separate_critic=False)], ids=["maac-q", "iac-head"]
)
def test_two_process_ddp_keeps_actors_and_critics_identical(tmp_path, critic):
    module = MAGRPOModule(
        team=tiny_team(),
        rl_algorithm=critic.algorithm,
        critic=critic,
        num_generations=2,
        agent_learning_rate=1e-2,
        sampling=tiny_sampling(max_new_tokens=4),
    )
    data = TaskDataModule(task=tiny_task(eval_dataset=None), train_batch_size=4, num_train_epochs=1)
    Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[Fingerprint(tmp_path)],
    ).fit(module, data)
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1]
