"""Comparator objects: their own options, the context the data module binds, and choosing one from the CLI."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

from comlrl_lightning import (
    ApiComparator,
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    IterativePreferenceDataModule,
    ModelComparator,
    OptionError,
)
from comlrl_lightning.cli import main
from comlrl_lightning.comparators import (
    CentralizedComparator,
    Comparator,
    ComparatorContext,
)
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.vllm import vllm_available
from comlrl_lightning.runtime.rng import RandomStream
from tests.helpers.configs import OVERLAYS, base_of, run_arguments
from tests.helpers.fake_providers import FakeProvider

TINY_CLI = [
    "--model.init_args.sampling.max_new_tokens",
    "4",
    "--data.init_args.num_iterations",
    "2",
    "--data.init_args.num_train_epochs",
    "1",
    "--data.init_args.preference_num_candidates",
    "3",
    "--data.init_args.preference_pairs_per_sample",
    "2",
    "--data.init_args.eval_num_samples",
    "2",
    "--data.init_args.train_batch_size",
    "4",
    "--data.init_args.replay.init_args.sample_size",  # the config's replay draws 192 pairs a round
    "8",
    "--trainer.val_check_interval",
    "2",
    "--trainer.enable_progress_bar",
    "false",
]
KEY_ENV = "COMLRL_TEST_SWITCH_KEY"


def context(team, **overrides):
    options = dict(actors=lambda: team, generator=HFGenerator(), stream=RandomStream(0), agent_devices=["cpu", "cpu"])
    return ComparatorContext(**{**options, **overrides})


# ---------------------------------------------------------------------------------------------
# Each class validates only its own options


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: CurrentComparator(num_candidates=0), "num_candidates must be >= 1 or null."),
        (lambda: HistoryComparator(k=0), "k must be >= 1."),
        (lambda: ModelComparator(), "ModelComparator needs exactly one of model_name or agents."),
        (
            lambda: ModelComparator(model_name="m", agents=["a"]),
            "ModelComparator needs exactly one of model_name or agents.",
        ),
        (lambda: CurrentCopyComparator(devices=[]), "devices must name at least one device."),
        (lambda: ApiComparator(url=""), "ApiComparator needs a url."),
        (lambda: CentralizedComparator(agent_index=-1), "agent_index must be >= 0."),
    ],
)
def test_each_comparator_checks_its_own_options(make, message):
    with pytest.raises(OptionError) as error:
        make()
    assert message in str(error.value)


def test_a_comparator_must_be_bound_before_it_samples():
    with pytest.raises(RuntimeError, match="CurrentComparator is not bound: the data module binds it in setup"):
        CurrentComparator().source()


def test_context_maps_per_agent_options_and_views_one_agent(team):
    whole = context(team)
    assert whole.agent_indices == [0, 1] and whole.team_size == 2
    assert whole.per_agent(["a"], "agents") == ["a", "a"] and whole.per_agent(["a", "b"], "agents") == ["a", "b"]
    assert whole.devices(None, "devices") == ["cpu", "cpu"] and whole.devices("cpu", "devices") == ["cpu", "cpu"]
    with pytest.raises(OptionError, match=r"agents length \(3\) must be 1 or 2."):
        whole.per_agent(["a", "b", "c"], "agents")
    view = whole.view(1)
    assert view.agent_indices == [1] and view.team_size == 2 and view.agent_devices == ["cpu"]
    assert view.per_agent(["a", "b"], "agents") == ["b"]
    seen = view.actors()
    assert seen.num_agents == 1 and seen.agents[0] is team.agents[1] and seen.tokenizers[0] is team.tokenizers[1]


def test_a_centralized_source_that_only_overrides_sample_is_refused(team):
    class OnlySample(Comparator):
        def sample(self, items, prompts, num_candidates, settings):
            return []

    with pytest.raises(OptionError, match="source OnlySample overrides sample\\(\\) only"):
        CentralizedComparator(source=OnlySample()).bind(context(team))


def test_default_sampling_goes_through_the_generator_with_the_comparator_stream(team):
    calls = []

    class Recording(HFGenerator):
        def generate(self, team_, agent_index, prompts, num_samples, settings, stream=None):
            calls.append((agent_index, list(prompts), num_samples, stream))
            return super().generate(team_, agent_index, prompts, num_samples, settings, stream)

    stream = RandomStream(3)
    comparator = CurrentComparator()
    comparator.bind(context(team, generator=Recording(), stream=stream))
    settings = GenerationSettings(max_new_tokens=3, temperature=1.0, top_p=1.0, top_k=None)
    out = comparator.sample([{}, {}], [["a:", "b:"], ["c:", "d:"]], 2, settings)
    assert [len(per_agent) for per_agent in out] == [2, 2] and all(len(row) == 2 for row in out[0])
    assert [(a, p, n) for a, p, n, _ in calls] == [(0, ["a:", "c:"], 2), (1, ["b:", "d:"], 2)]
    assert all(s is stream for *_, s in calls)


# ---------------------------------------------------------------------------------------------
# Choosing a comparator from the command line: one flag plus that class's own options


def _switch(tmp_path, *flags):
    main(["fit", "--config", "configs/madpo_iter.yaml", "--trainer.default_root_dir", str(tmp_path), *TINY_CLI, *flags])
    files = sorted(p.name for p in (tmp_path / "preference_replay").glob("iteration_*.json"))
    assert files == ["iteration_0001.json", "iteration_0002.json"]
    (config,) = tmp_path.glob("lightning_logs/version_0/config.yaml")
    return yaml.safe_load(config.read_text())["data"]["init_args"]["comparator"]


@pytest.mark.parametrize(
    "flags, class_name, own",
    [
        (["--data.init_args.comparator", "comlrl_lightning.comparators.CurrentComparator"], "CurrentComparator", {}),
        (
            [
                "--data.init_args.comparator",
                "comlrl_lightning.comparators.CurrentCopyComparator",
                "--data.init_args.comparator.init_args.devices",
                "cpu",
            ],
            "CurrentCopyComparator",
            {"devices": "cpu"},
        ),
        (
            [
                "--data.init_args.comparator",
                "comlrl_lightning.comparators.ModelComparator",
                "--data.init_args.comparator.init_args.model_name",
                "embedded",
            ],
            "ModelComparator",
            {"model_name": "embedded"},
        ),
        (
            [
                "--data.init_args.comparator",
                "comlrl_lightning.comparators.HistoryComparator",
                "--data.init_args.comparator.init_args.k",
                "2",
            ],
            "HistoryComparator",
            {"k": 2},
        ),
    ],
    ids=["current", "current_copy", "model", "history"],
)
@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_switching_the_comparator_from_the_command_line(tmp_path, flags, class_name, own):
    comparator = _switch(tmp_path, *flags)
    assert comparator["class_path"] == f"comlrl_lightning.comparators.{class_name}"
    assert {k: comparator["init_args"][k] for k in own} == own
    # the config pins no candidate count (the comparator follows preference_num_candidates); the config's
    # HistoryComparator k does not follow a switch to another class
    assert comparator["init_args"]["num_candidates"] is None
    assert ("k" in comparator["init_args"]) == (class_name == "HistoryComparator")


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_switching_to_the_api_comparator_needs_only_its_own_options(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-switch-0123456789")
    with FakeProvider("openai") as provider:
        comparator = _switch(
            tmp_path,
            "--data.init_args.comparator",
            "comlrl_lightning.comparators.ApiComparator",
            "--data.init_args.comparator.init_args.url",
            provider.url,
            "--data.init_args.comparator.init_args.format",
            "openai",
            "--data.init_args.comparator.init_args.key_env",
            KEY_ENV,
        )
        assert provider.requests and all(
            r.headers["authorization"] == "Bearer sk-switch-0123456789" for r in provider.requests
        )
    assert comparator["class_path"] == "comlrl_lightning.comparators.ApiComparator"
    assert comparator["init_args"]["key_env"] == KEY_ENV and "k" not in comparator["init_args"]


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_switching_to_a_centralized_comparator_wraps_a_source(tmp_path):
    comparator = _switch(
        tmp_path,
        "--data.init_args.comparator",
        "comlrl_lightning.comparators.CentralizedComparator",
        "--data.init_args.comparator.init_args.adapter",
        "tests.helpers.centralized_adapters.HalvesAdapter",
        "--data.init_args.comparator.init_args.agent_index",
        "1",
    )
    assert comparator["class_path"] == "comlrl_lightning.comparators.CentralizedComparator"
    assert comparator["init_args"]["agent_index"] == 1


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_user_comparator_and_replay_rule_by_import_path_run_end_to_end(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data": {
                    "init_args": {
                        "comparator": {
                            "class_path": "tests.helpers.user_parts.ColdComparator",
                            "init_args": {"temperature": 0.2},
                        },
                        "replay": {
                            "class_path": "tests.helpers.user_parts.NewestTwoReplay",
                            "init_args": {"sample_size": 8},
                        },
                    }
                }
            }
        )
    )
    main(
        [
            "fit",
            "--config",
            "configs/madpo_iter.yaml",
            "--config",
            str(config),
            "--trainer.default_root_dir",
            str(tmp_path),
            *TINY_CLI,
            "--data.init_args.num_iterations",
            "3",
        ]
    )
    files = sorted(p.name for p in (tmp_path / "preference_replay").glob("iteration_*.json"))
    assert files == ["iteration_0001.json", "iteration_0002.json", "iteration_0003.json"]
    (metrics,) = tmp_path.glob("lightning_logs/version_0/metrics.csv")
    rows = [r for r in csv.DictReader(open(metrics)) if r.get("iter/train_preference_pairs")]
    assert [float(r["iter/train_preference_pairs"]) for r in rows] == [8.0, 8.0, 8.0]  # the rule's sample_size
    # the comparator's own state travels inside the data module's checkpoint state
    (last,) = tmp_path.glob("lightning_logs/version_0/checkpoints/last.ckpt")
    state = torch.load(last, weights_only=False)["callbacks"]["comlrl_lightning.data"]
    assert state["comparator"] == {"rounds": [0, 1, 2]}


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--data.init_args.comparator", "comlrl_lightning.comparators.NoSuchComparator"], "NoSuchComparator"),
        (["--data.init_args.comparator.init_args.lag", "2"], "lag"),
        (["--data.init_args.replay.init_args.lam", "1.5"], "lam"),
    ],
)
def test_unknown_classes_and_options_are_the_parsers_ordinary_errors(tmp_path, capsys, flags, needle):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "configs/madpo_iter.yaml", "--trainer.default_root_dir", str(tmp_path), *flags])
    assert exit_info.value.code != 0
    assert needle in capsys.readouterr().err
    assert not list(Path(tmp_path).glob("**/config.yaml"))


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(
            arguments,
            marks=pytest.mark.skipif(
                "vllm" in arguments[-1] and not vllm_available(), reason="its generator needs vLLM to be parsed"
            ),
            id=arguments[-1],
        )
        for arguments in [["--config", str(p)] for p in sorted(Path("configs").glob("*iter*.yaml"))]
        + [run_arguments(overlay) for overlay in OVERLAYS if "iter" in base_of(overlay).name]
    ],
)
def test_print_config_shows_the_parts_as_objects(config, capsys):
    with pytest.raises(SystemExit):
        main(["fit", *config, "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    data = printed["data"]["init_args"]
    assert data["comparator"]["class_path"].startswith("comlrl_lightning.comparators.")
    assert data["replay"]["class_path"].startswith("comlrl_lightning.rounds.")
    assert not [key for key in data if key.startswith(("comparator_", "preference_replay_mode"))]


def test_the_data_module_binds_its_own_default_parts():
    first, second = IterativePreferenceDataModule(), IterativePreferenceDataModule()
    assert first.comparator is not second.comparator and first.replay_rule is not second.replay_rule


def test_per_agent_options_are_checked_against_the_team_when_the_config_is_parsed(tmp_path, capsys):
    with pytest.raises(OptionError, match=r"agents length \(3\) must be 1 or 2."):
        IterativePreferenceDataModule(num_agents=2, comparator=ModelComparator(agents=["a", "b", "c"]))
    with pytest.raises(OptionError, match=r"agent_index \(2\) must be smaller than num_agents \(2\)."):
        IterativePreferenceDataModule(num_agents=2, comparator=CentralizedComparator(agent_index=2))
    with pytest.raises(SystemExit) as exit_info:  # the CLI links num_agents from the model: no model is loaded
        main(
            [
                "fit",
                "--config",
                "configs/madpo_iter.yaml",
                "--trainer.default_root_dir",
                str(tmp_path),
                "--data.init_args.comparator",
                "comlrl_lightning.comparators.CurrentCopyComparator",
                "--data.init_args.comparator.init_args.devices",
                "[cpu, cpu, cpu]",
            ]
        )
    assert exit_info.value.code == 2
    assert "error: devices length (3) must be 1 or 2." in capsys.readouterr().err
