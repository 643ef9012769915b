"""Every option rule fires when the class is built (= when the CLI parses), before any model loads."""

from __future__ import annotations

import pytest

from comlrl_lightning import MADPOModule, OptionError, PreferenceDataModule
from comlrl_lightning.cli import main
from comlrl_lightning.modules.collaboration import Centralized

DATA_RULES = [
    (dict(num_turns=2), "MADPO currently supports num_turns=1 only."),
    (dict(joint_mode="separate"), "joint_mode must be aligned"),
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
        dict(collaboration=Centralized(), agents=["a", "b"]),
        "agents: a centralized team has one model that writes every role (got 2).",
    ),
    (dict(num_agents=0), "num_agents must be >= 1 or null."),
    (dict(agents=["a", "b", "c"], num_agents=2), "num_agents (2) must match the number of agents (3)."),
    (dict(num_turns=2), "MADPO currently supports num_turns=1 only."),
    (dict(max_new_tokens=0), "max_new_tokens must be >= 1."),
    (dict(temperature=0.0), "temperature must be > 0."),
    (dict(top_p=0.0), "top_p must be in (0, 1]."),
    (dict(top_p=1.5), "top_p must be in (0, 1]."),
    (dict(top_k=0), "top_k must be >= 1 or null."),
    (dict(gradient_checkpointing=True, checkpoint_every_n_layers=0), "checkpoint_every_n_layers must be >= 1."),
    (dict(agent_learning_rate=0.0), "agent_learning_rate must be > 0."),
    (dict(agent_learning_rate=[1e-3, 1e-3, 1e-3]), "agent_learning_rate must be one value or one per agent (2)."),
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
    module = MADPOModule(agent_model="/nonexistent/model/path")
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
    assert MADPOModule(agent_devices="cpu").agent_devices == ["cpu", "cpu"]
    assert MADPOModule(agent_devices=["cpu"]).agent_devices == ["cpu", "cpu"]
    assert MADPOModule(agent_devices="auto").agent_devices is None
    with pytest.raises(OptionError, match=r"agent_devices length \(3\) must be 1 or 2."):
        MADPOModule(agent_devices=["cpu", "cpu", "cpu"])


def test_agent_devices_place_each_agent(tiny_run):
    module, datamodule, trainer = tiny_run(model=dict(agent_devices=["cpu", "cpu"]), trainer=dict(max_epochs=1))
    trainer.fit(module, datamodule)
    assert trainer.global_step > 0 and all(str(module.team.device_of(i)) == "cpu" for i in range(2))
