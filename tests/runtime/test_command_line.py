"""``null`` on the command line for an option nested in a part's options is ``None``, not the text "None"."""

from __future__ import annotations

import pytest
from lightning.pytorch import LightningDataModule, LightningModule

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.command_line import null_options, set_aside_nulls

PARTS = ["--model=comlrl_lightning.MADPOModule", "--data=comlrl_lightning.IterativePreferenceDataModule"]


def parsed(tmp_path, *args):
    from comlrl_lightning.cli import PreferenceCLI

    return PreferenceCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        auto_configure_optimizers=False,
        run=False,
        args=[*PARTS, *args, f"--trainer.default_root_dir={tmp_path}"],
    )


def test_null_options_are_found_in_both_spellings():
    args = ["fit", "--a.b=null", "--c.d", "~", "--e=None", "--f", "x", "--g=NULL", "--h"]
    assert null_options(args) == ["a.b", "c.d", "g"]


def test_nested_nulls_are_set_aside_and_a_later_value_wins():
    args = ["fit", "--model.sampling.top_k", "null", "--data.init_args.task.eval_dataset=~", "--model.seed=null"]
    args += ["--data.task.x=null", "--data.task.x=3", "--trainer.max_steps", "null"]
    assert set_aside_nulls(args) == (
        ["fit", "--model.seed=null", "--data.task.x=null", "--data.task.x=3", "--trainer.max_steps", "null"],
        ["model.sampling.top_k", "data.init_args.task.eval_dataset"],
    )


def test_a_null_for_a_nested_number_is_none(tmp_path):
    generator = "--model.generator=comlrl_lightning.generation.HFGenerator"
    cli = parsed(tmp_path, "--model.init_args.sampling.top_k", "null", generator, "--model.generator.batch_size=null")
    assert cli.model.generation_settings.top_k is None  # was a parse error: jsonargparse passed on the text "None"
    assert cli.config["model"]["init_args"]["generator"]["init_args"]["batch_size"] is None
    assert parsed(tmp_path, "--model.sampling.top_k=50").model.generation_settings.top_k == 50


@pytest.mark.parametrize(
    "args",
    [["--data.task.eval_dataset=null"], ["--data.init_args.task.eval_dataset", "~"]],
    ids=["short", "init-args"],
)
def test_a_nested_null_is_none(tmp_path, args):
    cli = parsed(tmp_path, *args, "--model.team.dtype=null", "--data.task.train_dataset=embedded")
    assert cli.datamodule.task_options.eval_dataset is None  # not a hub dataset named "None"
    assert cli.model.team_options.dtype is None
    assert cli.config["data"]["init_args"]["task"]["eval_dataset"] is None  # as config.yaml saves it


def test_the_text_none_stays_text_and_a_null_where_none_is_not_allowed_is_named(tmp_path):
    assert parsed(tmp_path, "--data.task.eval_dataset=None").datamodule.task_options.eval_dataset == "None"
    with pytest.raises(ConfigurationError, match="^data.task.dataset_split cannot be null: give it a value"):
        parsed(tmp_path, "--data.task.dataset_split=null")


@pytest.mark.slow  # a run
def test_a_run_with_eval_dataset_null_trains_without_evaluation(tmp_path, capfd):
    from comlrl_lightning.cli import main

    main(
        [
            "fit",
            "--model=comlrl_lightning.MADPOModule",
            "--model.sampling.max_new_tokens=4",
            "--data=comlrl_lightning.PreferenceDataModule",
            "--data.preference_num_candidates=2",
            "--data.num_train_epochs=1",
            "--data.task.eval_dataset=null",
            "--trainer.accelerator=cpu",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    saved = next(tmp_path.rglob("config.yaml")).read_text()
    assert "eval_dataset: null" in saved
    out, err = capfd.readouterr()
    assert "Hub" not in out + err and "evaluation (" not in out + err  # no lookup, no evaluation


def test_a_dataset_name_neither_local_nor_on_the_hub_is_one_named_error(monkeypatch):
    import datasets
    import huggingface_hub

    from comlrl_lightning.errors import DataError
    from comlrl_lightning.tasks.task import load_items

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="^eval_dataset: None: no such local file or folder, and the hub lookup failed"):
        load_items("None", "test", "eval")
