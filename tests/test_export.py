"""``comlrl-lightning export``: a trained team's folders load with plain transformers / peft and give
the team's own logits; the cards name the run and its last evaluation; the export is all or nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from comlrl_lightning.cli import main, run_cli
from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.export import export_team, last_evaluation, team_options
from tests.helpers.cli_helpers import TWO_UPDATES as TINY

LORA = "{class_path: peft.LoraConfig, init_args: {r: 4, lora_alpha: 16, target_modules: [c_attn]}}"
INPUT = torch.tensor([[5, 9, 14, 3, 22, 7, 11]])
"""A fixed input: token ids of the embedded model's character vocabulary."""


def _trained(root: Path, *extra: str):
    """A tiny team trained two updates from the command line: the module (its team in memory) and last.ckpt."""
    cli = run_cli(["fit", "--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(root), *TINY, *extra])
    (last,) = root.glob("lightning_logs/version_0/checkpoints/last.ckpt")
    return cli.model, last


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    return _trained(tmp_path_factory.mktemp("full"))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    return _trained(tmp_path_factory.mktemp("lora"), "--model.init_args.team.lora", LORA)


def _logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=INPUT).logits


@pytest.mark.slow  # trains a team from the command line
def test_a_full_model_team_loads_with_plain_transformers_and_gives_the_teams_logits(full_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    module, last = full_run
    out = export_team(last, tmp_path / "team")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "agent_0", "agent_1", "hparams.json"]
    for index, agent in enumerate(module.team.agents):
        folder = out / f"agent_{index}"
        assert (folder / "generation_config.json").is_file() and (folder / "README.md").is_file()
        loaded = AutoModelForCausalLM.from_pretrained(folder)
        assert torch.equal(_logits(loaded), _logits(agent))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert tokenizer("ab")["input_ids"] == module.team.tokenizers[index]("ab")["input_ids"]
    # the two agents were trained apart: each folder holds its own agent, not one of them twice
    assert not torch.equal(_logits(module.team.agents[0]), _logits(module.team.agents[1]))


@pytest.mark.slow  # trains a LoRA team from the command line
def test_a_lora_team_exports_as_peft_adapters_or_merged_models_with_the_teams_logits(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    module, last = lora_run
    adapters = export_team(last, tmp_path / "adapters")
    merged = export_team(last, tmp_path / "merged", merge_lora=True)
    for index, agent in enumerate(module.team.agents):
        team_logits = _logits(agent)
        config = json.loads((adapters / f"agent_{index}" / "adapter_config.json").read_text())
        base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
        with_adapter = PeftModel.from_pretrained(base, adapters / f"agent_{index}")
        assert torch.allclose(_logits(with_adapter), team_logits, atol=1e-5)
        assert not (merged / f"agent_{index}" / "adapter_config.json").exists()
        plain = AutoModelForCausalLM.from_pretrained(merged / f"agent_{index}")
        assert torch.allclose(_logits(plain), team_logits, atol=1e-5)
    assert "LoRA adapter (peft)" in (adapters / "agent_0" / "README.md").read_text()
    assert "written as LoRA adapters merged into full models" in (merged / "README.md").read_text()


def _last_csv_evaluation(run_folder: Path) -> dict:
    with open(run_folder / "metrics.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("eval/turn_1/reward_mean")]
    return rows[-1]


@pytest.mark.slow  # trains a team from the command line
def test_the_cards_name_the_run_its_options_and_its_last_evaluation(full_run, tmp_path):
    from comlrl_lightning.checkpoints.metadata import read_checkpoint_metadata

    module, last = full_run
    out = export_team(last, tmp_path / "team")
    record = read_checkpoint_metadata(last)
    evaluation = _last_csv_evaluation(last.parents[1])
    for card in (out / "README.md", out / "agent_1" / "README.md"):
        text = card.read_text()
        assert record["run_id"] in text and str(last) in text and "comlrl_lightning.MADPOModule" in text
        assert f"| `eval/turn_1/reward_mean` | {float(evaluation['eval/turn_1/reward_mean']):.4f} |" in text
        assert f"step {evaluation['step']})" in text
    options = json.loads((out / "hparams.json").read_text())
    assert options["model"]["team"]["agent_model"] == "embedded" and options["data"]["num_agents"] == 2
    assert '"dpo_beta": 0.1' in (out / "README.md").read_text()


@pytest.mark.slow  # trains a team from the command line
def test_the_command_refuses_a_folder_with_files_in_one_line_and_writes_nothing(full_run, tmp_path, capsys):
    _, last = full_run
    out = tmp_path / "team"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", str(last), "--out_dir", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and err == [
        f"error: out_dir {out} is not empty; give export a new or empty folder."
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team"] and [p.name for p in out.iterdir()] == ["notes.txt"]
    # an empty folder is taken, and a folder of checkpoints means its newest
    (out / "notes.txt").unlink()
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", str(last.parent), "--out_dir", str(out)])
    assert exit_info.value.code == 0 and "exported the team to" in capsys.readouterr().out
    assert (out / "agent_1" / "model.safetensors").is_file()


@pytest.mark.slow  # trains a team from the command line
def test_an_export_that_fails_halfway_leaves_no_folder_and_no_staging(full_run, tmp_path, monkeypatch):
    """As a full disk would: the second agent's folder cannot be written."""
    import comlrl_lightning.export as export

    _, last = full_run
    written = []

    def second_fails(agent, tokenizer, folder, layout):
        if written:
            raise OSError(28, "No space left on device")
        written.append(folder)
        real_write(agent, tokenizer, folder, layout)

    real_write = export.write_agent_folder
    monkeypatch.setattr(export, "write_agent_folder", second_fails)
    with pytest.raises(OSError, match="No space left"):
        export_team(last, tmp_path / "team")
    assert written and list(tmp_path.iterdir()) == []  # neither the target nor the staging folder


@pytest.mark.slow  # trains a team from the command line
def test_a_checkpoint_whose_weights_do_not_fit_its_options_is_refused(full_run, tmp_path):
    _, last = full_run
    checkpoint = torch.load(last, weights_only=True, map_location="cpu")
    checkpoint["hyper_parameters"]["team"]["num_agents"] = 3  # three agents, the weights of two
    forged = tmp_path / "forged.ckpt"
    torch.save(checkpoint, forged)
    with pytest.raises(DataError, match=r"do not fit the team its options describe \(\d+ missing, 0 unexpected"):
        export_team(forged, tmp_path / "team")
    assert not (tmp_path / "team").exists()


def test_the_last_evaluation_is_the_last_at_or_before_the_checkpoint_and_split_rows_are_one():
    rows = [
        {"step": "0", "eval/a": "1.0", "eval/c": "9.0", "train/loss": ""},  # before training
        {"step": "0", "eval/a": "2.0", "train/loss": ""},  # after the first update: logged at step 0 too
        {"step": "0", "eval/b": "3.0"},  # the same evaluation, another row
        {"step": "1", "train/loss": "0.5", "eval/a": ""},
        {"step": "3", "eval/a": "4.0"},  # after the checkpoint
    ]
    assert last_evaluation(rows, 2) == (0, {"eval/a": 2.0, "eval/b": 3.0})
    assert last_evaluation(rows, 3) == (3, {"eval/a": 4.0})
    assert last_evaluation(rows[:1], 0) == (0, {"eval/a": 1.0, "eval/c": 9.0})
    assert last_evaluation([{"step": "0", "train/loss": "1"}], 5) == (None, {})


def test_a_team_given_as_objects_is_refused_naming_save_model(tmp_path):
    with pytest.raises(DataError, match="save_model"):
        team_options({"_class_path": "comlrl_lightning.MADPOModule", "team": {"num_agents": 2}}, tmp_path / "x.ckpt")
    options = team_options({"team": {"agent_model": "embedded", "agents": None, "tokenizers": None}}, tmp_path)
    assert options.agent_model == "embedded" and options.lora is None


def test_a_file_or_a_link_as_out_dir_is_refused(tmp_path):
    from comlrl_lightning.export import check_out_dir

    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    for name in ("file", "link"):
        with pytest.raises(ConfigurationError, match="is not a folder"):
            check_out_dir(str(tmp_path / name))
    assert check_out_dir(str(tmp_path / "new")) == tmp_path / "new"


@pytest.mark.slow  # trains a team with the seed API
def test_a_seed_api_checkpoint_folder_exports_with_its_trainer_named(tmp_path):
    from transformers import AutoModelForCausalLM

    from comlrl_lightning.trainers.configs import MADPOConfig
    from comlrl_lightning.trainers.preference import MADPOTrainer

    small = dict(max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, agent_learning_rate=3e-3)
    args = MADPOConfig(**small, preference_num_candidates=4, preference_pairs_per_sample=4, num_train_epochs=1)
    trainer = MADPOTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path / "run")})
    trainer.train(checkpoint_dir=str(tmp_path / "checkpoints"))
    out = export_team(tmp_path / "checkpoints", tmp_path / "team")  # a folder of checkpoint-N: the newest
    assert "- trained by: `MADPOModule`" in (out / "README.md").read_text()
    for index, agent in enumerate(trainer.module.team.agents):
        assert torch.equal(_logits(AutoModelForCausalLM.from_pretrained(out / f"agent_{index}")), _logits(agent))
