"""Every option rule fires when the class is built (= when the CLI parses), before any model loads."""

from __future__ import annotations

import pytest
from peft import LoraConfig

from comlrl_lightning import (
    GenerationSettings,
    MADPOModule,
    MemoryOptions,
    OptionError,
    PreferenceDataModule,
    ReferenceKL,
    RewardModelFit,
    RewardModelOptions,
    TeamOptions,
)
from comlrl_lightning.cli import main
from comlrl_lightning.modules.collaboration import Centralized
from tests.conftest import tiny_team

DATA_RULES = [
    (dict(num_train_epochs=0), "num_train_epochs must be >= 1."),
    (dict(train_batch_size=0), "train_batch_size must be >= 1."),
    (dict(eval_num_samples=-1), "eval_num_samples must be >= 0."),
    (dict(eval_batch_size=0), "eval_batch_size must be >= 1."),
    (dict(num_agents=0), "num_agents must be >= 1."),
    (dict(preference_num_candidates=1), "preference_num_candidates must be >= 2."),
    (dict(preference_pairs_per_sample=0), "preference_pairs_per_sample must be >= 1 or null."),
    (dict(pair_selection="best"), "pair_selection must be one of: reward_gap, all, random."),
    (dict(pair_selection="comparator_reward"), "pair_selection must be one of: reward_gap, all, random."),
    (dict(pair_selection="all"), "preference_pairs_per_sample must be null when pair_selection='all'."),
]

MODEL_RULES = [
    (dict(dpo_beta=0.0), "dpo_beta must be > 0."),
    (dict(dpo_beta=-1.0), "dpo_beta must be > 0."),
    (
        dict(collaboration=Centralized(), team=TeamOptions(agents=["a", "b"])),
        "agents: a centralized team has one model that writes every role (got 2).",
    ),
    (
        dict(team=TeamOptions(agents=["a", "b", "c"], num_agents=2)),
        "num_agents (2) must match the number of agents (3).",
    ),
    (dict(agent_learning_rate=0.0), "agent_learning_rate must be > 0."),
    (dict(agent_learning_rate=[1e-3, 1e-3, 1e-3]), "agent_learning_rate must be one value or one per agent (2)."),
]

OPTION_RULES = [
    (TeamOptions, dict(num_agents=0), "num_agents must be >= 1 or null."),
    (TeamOptions, dict(agents=["a", "b"], lora=LoraConfig(r=4)), "lora: a LoRA team needs one base model"),
    (TeamOptions, dict(lora=LoraConfig(r=0)), "lora.r must be >= 1."),
    (TeamOptions, dict(lora=LoraConfig(task_type="SEQ_CLS")), "lora.task_type: the agents are causal language"),
    (MemoryOptions, dict(checkpoint_every_n_layers=0), "checkpoint_every_n_layers must be >= 1."),
    (GenerationSettings, dict(max_new_tokens=0), "max_new_tokens must be >= 1."),
    (GenerationSettings, dict(temperature=0.0), "temperature must be > 0."),
    (GenerationSettings, dict(top_p=0.0), "top_p must be in (0, 1]."),
    (GenerationSettings, dict(top_p=1.5), "top_p must be in (0, 1]."),
    (GenerationSettings, dict(top_k=0), "top_k must be >= 1 or null."),
    (ReferenceKL, dict(coef=-0.1), "reference_kl.coef must be >= 0."),
    (RewardModelOptions, dict(learning_rate=0.0), "reward_model.learning_rate must be > 0."),
    (RewardModelOptions, dict(max_length=0), "reward_model.max_length must be >= 1 or null."),
    (RewardModelFit, dict(num_train_epochs=0), "reward_model.num_train_epochs must be >= 1."),
    (RewardModelFit, dict(train_batch_size=0), "reward_model.train_batch_size must be >= 1."),
]


@pytest.mark.parametrize("options, message", DATA_RULES)
def test_data_module_rules(options, message):
    with pytest.raises(OptionError) as error:
        PreferenceDataModule(**options)
    assert message in str(error.value)


@pytest.mark.parametrize("options, message", MODEL_RULES)
def test_module_rules(options, message):
    with pytest.raises(OptionError) as error:
        MADPOModule(**options)
    assert message in str(error.value)


@pytest.mark.parametrize("kind, options, message", OPTION_RULES)
def test_option_objects_check_themselves_when_made(kind, options, message):
    with pytest.raises(OptionError) as error:
        kind(**options)
    assert message in str(error.value)


def test_pair_selection_is_normalised_and_all_accepts_null_limit():
    assert PreferenceDataModule(pair_selection=" Reward_Gap ").pair_selection == "reward_gap"
    assert PreferenceDataModule(pair_selection=None).pair_selection == "reward_gap"
    assert PreferenceDataModule(pair_selection="all", preference_pairs_per_sample=None).pair_selection == "all"


def test_generator_rules_and_default():
    from comlrl_lightning.generation.hf import HFGenerator

    with pytest.raises(OptionError, match=r"batch_size must be >= 1 or null."):
        HFGenerator(batch_size=0)
    assert isinstance(MADPOModule().generator, HFGenerator) and MADPOModule().generator.batch_size is None
    assert MADPOModule().generator is not MADPOModule().generator  # no shared default object


def test_no_model_is_loaded_while_options_are_checked():
    # A model id that cannot exist: construction must still succeed because loading is lazy.
    module = MADPOModule(team=TeamOptions(agent_model="/nonexistent/model/path"))
    assert module._team is None
    with pytest.raises(OSError):
        module.team


def test_cli_reports_option_errors_as_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                "configs/madpo.yaml",
                "--model.init_args.dpo_beta",
                "0",
                "--trainer.default_root_dir",
                str(tmp_path),
            ]
        )
    assert exit_info.value.code == 2
    assert "error: dpo_beta must be > 0." in capsys.readouterr().err


def test_cli_rejects_a_literal_api_key_option(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                "configs/madpo.yaml",
                "--model.init_args.api_key",
                "sk-123",
                "--trainer.default_root_dir",
                str(tmp_path),
            ]
        )
    assert exit_info.value.code == 2
    assert "sk-123" not in capsys.readouterr().out


def test_agent_devices_forms():
    assert MADPOModule(team=TeamOptions(agent_devices="cpu")).agent_devices == ["cpu", "cpu"]
    assert MADPOModule(team=TeamOptions(agent_devices=["cpu"])).agent_devices == ["cpu", "cpu"]
    assert MADPOModule(team=TeamOptions(agent_devices="auto")).agent_devices is None
    with pytest.raises(OptionError, match=r"agent_devices length \(3\) must be 1 or 2."):
        MADPOModule(team=TeamOptions(agent_devices=["cpu", "cpu", "cpu"]))


def test_agent_devices_place_each_agent_when_fit_starts(tmp_path):
    """Agent i goes to ``agent_devices[i]``: observed on the CPU with the ``meta`` device (the agents
    load on the CPU, so a placement that was skipped, or given to the wrong agent, shows)."""
    from tests.conftest import tiny_trainer

    module = MADPOModule(team=tiny_team(agent_devices=["meta", "cpu"]))
    assert [str(module.team.device_of(i)) for i in range(2)] == ["cpu", "cpu"]  # loaded on the CPU
    module.trainer = tiny_trainer(tmp_path)
    module.on_fit_start()
    assert [str(module.team.device_of(i)) for i in range(2)] == ["meta", "cpu"]
    assert all(p.is_meta for p in module.team.agents[0].parameters())
    assert not any(p.is_meta for p in module.team.agents[1].parameters())


def test_agent_devices_are_refused_with_several_processes(tmp_path):
    from tests.conftest import tiny_trainer

    module = MADPOModule(team=tiny_team(agent_devices=["cpu", "cpu"]))
    module.trainer = tiny_trainer(tmp_path, devices=2, strategy="ddp_fork")  # two processes, none started here
    with pytest.raises(OptionError, match=r"agent_devices places the agents of one process; .* leave it null\."):
        module.on_fit_start()
