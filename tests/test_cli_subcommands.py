"""Every subcommand the command line lists works: validate, test and predict evaluate a checkpoint into
log versions of their own, with the seeds fit's evaluation of the same weights used; a refused run
leaves no log version."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Dict, List

import pytest

from comlrl_lightning.cli import main, run_cli
from comlrl_lightning.defaults import TOY_EVAL_SEED, toy_items

TINY = [
    "--model.init_args.sampling.max_new_tokens",
    "6",
    "--data.init_args.preference_num_candidates",
    "4",
    "--data.init_args.preference_pairs_per_sample",
    "4",
    "--data.init_args.num_train_epochs",
    "2",
    "--data.init_args.eval_num_samples",
    "4",
    "--data.init_args.eval_batch_size",
    "2",
    "--trainer.enable_progress_bar",
    "false",
]


def _eval_file(folder: Path, count: int = 4) -> str:
    """A held-out split of ``count`` toy items: fit and validate evaluate all of them, as test does."""
    path = folder / "eval.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in toy_items(count, TOY_EVAL_SEED)))
    return str(path)


def _digests(folder: Path) -> Dict[str, str]:
    """Every file under ``folder`` by its relative path, with the SHA-256 of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _rows(path: Path) -> List[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow  # trains, then evaluates its checkpoint four times
def test_validate_test_and_predict_evaluate_a_checkpoint_into_their_own_versions_with_fits_numbers(
    tmp_path, caplog, capsys
):
    common = ["--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path), *TINY]
    common += ["--data.init_args.task.eval_dataset", _eval_file(tmp_path)]
    # 8 updates, validation every 3: fit's last evaluation is the one after training, outside the loop
    fit = run_cli(["fit", *common, "--trainer.val_check_interval", "3"])
    final = fit.model.final_eval_reward
    logs = tmp_path / "lightning_logs"
    run = _digests(logs / "version_0")
    assert {"metrics.csv", "config.yaml", "checkpoints/last.ckpt"} <= set(run)
    checkpoint = ["--ckpt_path", str(logs / "version_0" / "checkpoints" / "last.ckpt")]
    caplog.clear()

    for version in (1, 2):  # any number of them
        main(["validate", *common, *checkpoint])
        (row,) = _rows(logs / f"version_{version}" / "metrics.csv")
        assert float(row["eval/turn_1/reward_mean"]) == pytest.approx(final, abs=1e-6)  # float32 of the same mean
    main(["test", *common, *checkpoint])  # the whole held-out split: here the items fit evaluated
    (row,) = _rows(logs / "version_3" / "metrics.csv")
    assert float(row["test/turn_1/reward_mean"]) == pytest.approx(final, abs=1e-6)
    assert not any(key.startswith("eval/") for key in row)
    main(["predict", *common, *checkpoint])
    lines = [json.loads(line) for line in (logs / "version_4" / "predictions.jsonl").read_text().splitlines()]
    assert [line["item"] for line in lines] == toy_items(4, TOY_EVAL_SEED)  # the items' order
    assert all(len(line["prompts"]) == len(line["completions"]) == 2 for line in lines)
    assert sum(line["reward"] for line in lines) / 4 == pytest.approx(final, abs=1e-6)

    with pytest.raises(SystemExit) as refused:  # another team: refused before anything is written
        main(["validate", *common, *checkpoint, "--model.init_args.team.num_agents", "3"])
    assert refused.value.code == 2
    assert (
        f"error: cannot evaluate {checkpoint[1]} with other model.roles, model.team.num_agents ("
        in capsys.readouterr().err
    )

    assert _digests(logs / "version_0") == run  # the training run's files, byte for byte
    assert sorted(p.name for p in logs.iterdir()) == [f"version_{n}" for n in range(5)]
    assert (logs / "version_1" / "config.yaml").is_file()  # each evaluation's own config
    printed = "\n".join(caplog.messages)
    assert "resuming" not in printed
    updates = fit.trainer.global_step
    assert f"validate: {checkpoint[1]} ({updates} updates); metrics in {logs / 'version_1'}/metrics.csv" in printed
    assert f"predictions: 4 items, each agent's completion and the reward, in {logs / 'version_4'}" in printed


@pytest.mark.slow  # trains and evaluates
def test_validate_gives_fits_last_evaluation_when_it_was_the_validation_loops(tmp_path):
    common = ["--config", "configs/madpo.yaml", "--trainer.default_root_dir", str(tmp_path), *TINY]
    common += ["--data.init_args.task.eval_dataset", _eval_file(tmp_path, 2)]
    fit = run_cli(["fit", *common, "--trainer.val_check_interval", "1"])  # the loop saw the final weights
    checkpoint = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    validate = run_cli(["validate", *common, "--ckpt_path", str(checkpoint)])
    value = validate.trainer.callback_metrics["eval/turn_1/reward_mean"]
    assert float(value) == pytest.approx(fit.model.final_eval_reward, abs=1e-6)


@pytest.mark.slow  # builds the command line three times
@pytest.mark.parametrize(
    "words",
    [
        ["fit", "--data.init_args.task.train_dataset", "missing.jsonl"],  # refused while the data is read
        ["fit", "--model.init_args.sampling.max_new_tokens", "600"],  # refused after config.yaml was written
        ["test", "--data.init_args.task.eval_dataset", "null"],  # nothing to test
    ],
    ids=["no-data", "prompt-too-long", "test-without-items"],
)
def test_a_run_refused_before_training_leaves_no_log_version(tmp_path, monkeypatch, capsys, words):
    monkeypatch.chdir(tmp_path)  # missing.jsonl: relative to here
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)
    (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").write_text("step\n0\n")  # an earlier run's
    config = str(Path(__file__).resolve().parents[1] / "configs" / "madpo.yaml")
    with pytest.raises(SystemExit) as exit_status:
        main([words[0], "--config", config, "--trainer.default_root_dir", str(tmp_path), *words[1:]])
    assert exit_status.value.code in (1, 2)  # a configuration or a data error
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]  # no version_1
    assert (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text() == "step\n0\n"


def test_help_lists_every_command_and_what_each_writes(capsys):
    with pytest.raises(SystemExit) as exit_status:
        main(["--help"])
    assert exit_status.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "{fit,validate,test,predict}" in text
    for said in ("validate evaluates", "test evaluates every evaluation item", "predictions.jsonl", "export", "env"):
        assert said in text, said
