"""MARLHF and MAGRPO modules: option rules, learning on the embedded default, resume across phases."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from peft import LoraConfig

from comlrl_lightning import (
    AllHistoryReplay,
    IterativePreferenceDataModule,
    MAGRPOModule,
    MARLHFModule,
    MemoryOptions,
    OptionError,
    PreferenceDataModule,
    ReferenceKL,
    RewardModelFit,
    TaskDataModule,
)
from comlrl_lightning.critics import IndividualCritics, SharedCritic
from comlrl_lightning.joint_reward import RewardModelOracle
from comlrl_lightning.team.activation_checkpointing import is_checkpointing
from tests.conftest import tiny_sampling, tiny_task, tiny_team

SAMPLING = dict(team=tiny_team(), sampling=tiny_sampling(max_new_tokens=8))
REWARD_MODEL = RewardModelFit(learning_rate=1e-3, num_train_epochs=2, train_batch_size=8)
RLHF = dict(SAMPLING, agent_learning_rate=3e-3, num_generations=4, reward_model=REWARD_MODEL)
DATA = dict(
    task=tiny_task(),
    preference_num_candidates=4,
    preference_pairs_per_sample=4,
    train_batch_size=4,
    num_train_epochs=2,
    eval_num_samples=8,
    eval_batch_size=8,
)


def trainer(root, **overrides):
    options = dict(
        accelerator="cpu",
        max_epochs=2,
        default_root_dir=str(root),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        check_val_every_n_epoch=None,
        val_check_interval=1000,
    )
    options.update(overrides)
    return Trainer(**options)


RULES = [
    (dict(rl_algorithm="ppo"), "rl_algorithm must be one of: magrpo, mareinforce, maremax, marloo, maac, iac."),
    (dict(rl_algorithm="maac", num_generations=0), "num_generations must be >= 1."),
    (dict(critic=SharedCritic()), "critic is used by rl_algorithm maac or iac, not by magrpo."),
    (
        dict(rl_algorithm="iac", critic=SharedCritic()),
        "critic SharedCritic belongs to rl_algorithm='maac', not 'iac' (use IndividualCritics).",
    ),
    (
        dict(rl_algorithm="maac", critic=IndividualCritics()),
        "critic IndividualCritics belongs to rl_algorithm='iac', not 'maac' (use SharedCritic).",
    ),
    (dict(num_generations=1), "num_generations must be >= 2 for MAGRPO-family MARLHF backends."),
    (dict(reference_kl=ReferenceKL(devices=["cpu", "cpu", "cpu"])), "reference_kl.devices length (3) must be 1 or 2."),
    (dict(preference_scoring_reward="vibes"), "preference_scoring_reward must be one of: task, reward_model."),
]


@pytest.mark.parametrize("options, message", RULES)
def test_marlhf_option_rules(options, message):
    with pytest.raises(OptionError) as error:
        MARLHFModule(**options)
    assert message in str(error.value)


def test_choices_are_exact_names():
    assert MARLHFModule(rl_algorithm="mareinforce").baseline == "raw"
    assert MARLHFModule(rl_algorithm="marloo").baseline == "rloo"
    assert MARLHFModule(preference_scoring_reward="reward_model").preference_scoring_reward == "reward_model"
    with pytest.raises(OptionError, match="rl_algorithm must be one of"):
        MARLHFModule(rl_algorithm="mareforce")  # the reference's alias table is gone: one name per thing
    with pytest.raises(OptionError, match="preference_scoring_reward must be one of: task, reward_model"):
        MARLHFModule(preference_scoring_reward="learned")


@pytest.mark.slow  # a learning run: 10 epochs
def test_marlhf_improves_the_task_reward_on_the_embedded_default(tmp_path):
    module = MARLHFModule(
        **{
            **RLHF,
            "sampling": tiny_sampling(max_new_tokens=16),
            "num_generations": 8,
            "reward_model": RewardModelFit(learning_rate=1e-3, num_train_epochs=3, train_batch_size=16),
        }
    )
    data = PreferenceDataModule(
        **{
            **DATA,
            "preference_num_candidates": 16,
            "preference_pairs_per_sample": 16,
            "num_train_epochs": 10,
            "eval_num_samples": 32,
            "eval_batch_size": 32,
        }
    )
    trainer(tmp_path, max_epochs=10).fit(module, data)
    assert module.fitted_round == 0
    assert module.final_eval_reward > module.initial_eval_reward + 0.2, (
        module.initial_eval_reward,
        module.final_eval_reward,
    )


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_magrpo_trains_on_the_plain_task_reward_without_preferences(tmp_path):
    module = MAGRPOModule(
        **{
            **SAMPLING,
            "agent_learning_rate": 3e-3,
            "rl_algorithm": "marloo",
            "reference_kl": ReferenceKL(coef=0.05),
        }
    )
    data = TaskDataModule(
        task=tiny_task(),
        train_batch_size=4,
        num_train_epochs=1,
        eval_num_samples=4,
        eval_batch_size=4,
    )
    before = {k: v.clone() for k, v in module.team.state_dict().items()}
    fit = trainer(tmp_path, max_epochs=1)
    fit.fit(module, data)
    assert fit.global_step == 4  # 16 items in batches of 4
    after = module.team.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    reference = module.reference.state_dict()
    assert all(torch.equal(before[k], reference[k]) for k in before)  # the KL reference stays the initial policy
    assert torch.isfinite(torch.tensor(fit.callback_metrics["train/loss"].item()))


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_policy_gradient_with_gradient_checkpointing_trains_the_same_weights(tmp_path):
    """Rollouts are sampled in eval mode (prompts still shared); their packed scoring with grad and
    the reference KL recompute the checkpointed layers in backward."""
    weights = []
    for checkpointing in (False, True):
        module = MAGRPOModule(
            **{
                **SAMPLING,
                "team": tiny_team(memory=MemoryOptions(gradient_checkpointing=checkpointing)),
                "agent_learning_rate": 3e-3,
                "reference_kl": ReferenceKL(coef=0.05),
            }
        )
        data = TaskDataModule(task=tiny_task(eval_dataset=None), train_batch_size=4, num_train_epochs=1)
        trainer(tmp_path / str(checkpointing), max_epochs=1, limit_train_batches=2, limit_val_batches=0).fit(
            module, data
        )
        assert all(is_checkpointing(agent) == checkpointing for agent in module.team.agents)
        weights.append(module.team.state_dict())
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=1e-5, atol=1e-6, msg=name)


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items() if not k.startswith("reference")}


@pytest.mark.parametrize(
    "iterative, stop_step, refits, algorithm",
    [
        (False, 5, [], "magrpo"),  # base: stopped in the second RL epoch, the fitted reward model is restored
        # the variants below repeat the scenario in other places and with critics: the slow tier
        # iterative: stopped in round 1, so only round 2's reward model is fitted after
        pytest.param(True, 3, [1], "magrpo", marks=pytest.mark.slow),
        pytest.param(True, 11, [], "magrpo", marks=pytest.mark.slow),  # iterative: stopped in round 2, after its fit
        # actor-critic: the critic and its optimizer state resume mid-round too
        pytest.param(True, 3, [1], "maac", marks=pytest.mark.slow),
        pytest.param(True, 8, [1], "iac", marks=pytest.mark.slow),  # ... and at a round's end
    ],
    ids=["base", "iterative-round-1", "iterative-round-2", "maac-mid-round", "iac-round-end"],
)
@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_resume_across_the_reward_model_and_rl_phases(tmp_path, iterative, stop_step, refits, algorithm):
    def run(root, ckpt=None, **trainer_options):
        module = MARLHFModule(
            **RLHF, rl_algorithm=algorithm, preference_scoring_reward="reward_model" if iterative else "task"
        )
        if iterative:
            data = IterativePreferenceDataModule(
                **{**DATA, "num_iterations": 2, "num_train_epochs": 2, "replay": AllHistoryReplay()}
            )
        else:
            data = PreferenceDataModule(**DATA)
        fits = []
        original = module.fit_reward_model
        module.fit_reward_model = lambda pairs, round_index=0: fits.append(round_index) or original(pairs, round_index)
        fit = trainer(
            root, max_epochs=4 if iterative else 2, reload_dataloaders_every_n_epochs=int(iterative), **trainer_options
        )
        fit.fit(module, data, ckpt_path=ckpt)
        return module, fits, fit

    full, fits, fit = run(tmp_path / "full")
    assert fits == ([0, 1] if iterative else [0])
    steps = fit.global_step
    assert steps == (16 if iterative else 8)  # 16 items in batches of 4 per epoch
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_train_steps=1)
    run(tmp_path / "part", callbacks=[checkpoint], max_steps=stop_step)
    path = next((tmp_path / "ckpt").glob(f"*step={stop_step}.ckpt"))
    resumed, fits_after_resume, fit = run(tmp_path / "part", ckpt=str(path))
    assert fits_after_resume == refits
    assert fit.global_step == steps
    expected, got = _state(full), _state(resumed)
    assert any(key.startswith("critic.") for key in expected) == (algorithm != "magrpo")
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=0, msg=key)


def test_reward_model_scoring_for_collection_after_the_first_fit():
    module = MARLHFModule(**RLHF, preference_scoring_reward="reward_model")
    module.configure_model()
    task_oracle = object()

    class Task:
        oracle = task_oracle

    assert module.collection_oracle(Task) is task_oracle  # no reward model yet: the task reward
    module.fitted_round = 0
    oracle = module.collection_oracle(Task)
    assert isinstance(oracle, RewardModelOracle)
    raw, processed = oracle.rewards([["aa", "bb"], ["cc", "dd", "ee"]], ["p0", "p1"], {})
    assert raw == processed and len(raw) == 2


@pytest.mark.slow  # trains long for the everyday tier
def test_every_reward_model_epoch_is_logged_at_the_step_of_its_fit(tmp_path):
    """One row per Bradley–Terry epoch, with its epoch and round; a fit between two updates shares
    their step, so the CSV log's steps never decrease."""
    from lightning.pytorch.loggers import CSVLogger

    from comlrl_lightning.callbacks.curves import read_metric_rows

    module = MARLHFModule(
        **{**RLHF, "reward_model": RewardModelFit(learning_rate=1e-3, num_train_epochs=3, train_batch_size=8)}
    )
    returned = []
    original = module.fit_reward_model

    def recording_fit(pairs, round_index=0):
        returned.append(original(pairs, round_index))
        return returned[-1]

    module.fit_reward_model = recording_fit
    data = IterativePreferenceDataModule(
        **{**DATA, "num_iterations": 2, "num_train_epochs": 1, "replay": AllHistoryReplay()}
    )
    logger = CSVLogger(tmp_path, name="marlhf")
    fit = trainer(
        tmp_path,
        max_epochs=2,
        reload_dataloaders_every_n_epochs=1,
        logger=logger,
        log_every_n_steps=1,
        limit_train_batches=2,
    )
    fit.fit(module, data)
    rows = read_metric_rows(logger.log_dir)
    steps = [row["step"] for row in rows]
    assert steps == sorted(steps)
    fits = [row for row in rows if "reward_model/epoch" in row]
    assert [(r["reward_model/iteration"], r["reward_model/epoch"], r["step"]) for r in fits] == [
        (1.0, 1.0, 0.0),
        (1.0, 2.0, 0.0),
        (1.0, 3.0, 0.0),
        (2.0, 1.0, 2.0),
        (2.0, 2.0, 2.0),
        (2.0, 3.0, 2.0),
    ]
    assert all(set(r) >= {"reward_model/loss", "reward_model/accuracy", "reward_model/margin"} for r in fits)
    last_epochs = [r for r in fits if r["reward_model/epoch"] == 3.0]
    for logged, metrics in zip(last_epochs, returned, strict=True):
        for key, value in metrics.items():
            assert logged[key] == pytest.approx(value, rel=1e-6), key
    assert fits[0]["reward_model/loss"] != fits[2]["reward_model/loss"]  # the epochs are distinct passes


def test_a_lora_team_scores_rollouts_and_reference_kl_in_one_pass_each_as_agent_by_agent():
    from comlrl_lightning.losses import group_advantages, policy_gradient_loss

    torch.manual_seed(0)
    module = MAGRPOModule(
        **{**SAMPLING, "team": tiny_team(num_agents=3, lora=LoraConfig(r=4, lora_alpha=16))},
        num_generations=3,
        reference_kl=ReferenceKL(coef=0.5),
    )
    module.configure_model()
    team = module.team
    with torch.no_grad():  # distinct adapters, B away from its zero start
        for agent in team.agents:
            for parameter in agent.trainable_parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))
    prompts = [[f"topic: {t}\nwriter:", f"topic: {t}\nmatcher:", f"topic: {t}\nwriter:"] for t in ("ab", "cde")]
    samples = module.sample_rollouts([{"prompt": t} for t in ("ab", "cde")], prompts)
    returns = torch.tensor([[0.3, -0.2, 0.9], [0.1, 0.4, -0.7]])

    def scored():
        calls = []
        handle = team.agents[0].get_base_model().register_forward_pre_hook(lambda *args: calls.append(1))
        try:
            logprobs, kls = module.score_team(prompts, samples)
        finally:
            handle.remove()
        losses = [
            policy_gradient_loss(logprobs[i], group_advantages(returns - 0.5 * kls[i], "rloo", True).reshape(-1))
            for i in range(3)
        ]
        team.zero_grad(set_to_none=True)
        torch.stack(losses).sum().backward()
        gradients = {name: p.grad.clone() for name, p in team.named_parameters() if p.grad is not None}
        return [lp.detach() for lp in logprobs], kls, gradients, len(calls)

    logprobs, kls, gradients, passes = scored()
    assert passes == 2  # every agent's rollouts, then every agent's reference rows (adapters disabled)
    team.one_pass = False
    expected_logprobs, expected_kls, expected_gradients, passes = scored()
    assert passes == 2 * 3
    for ours, expected in zip(logprobs + kls, expected_logprobs + expected_kls):
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    assert all(float(kl.abs().sum()) > 0 for kl in kls)  # the adapters moved the policy off the base
    assert gradients.keys() == expected_gradients.keys() and len(gradients) == 3 * 2 * 2
    for name, value in expected_gradients.items():
        torch.testing.assert_close(gradients[name], value, rtol=1e-4, atol=1e-6, msg=name)
