"""benchmarks/coding_study.py: the two-level interval against hand-computed cases, the table from
known outcomes, and the command end to end at tiny size (a 1-layer model with the embedded model's
characters and a chat template, one training problem, two held-out problems, two seeds): records,
reading instead of rerunning, resuming a stopped seed, refusing another command's folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def study(bench):
    import coding_study

    return coding_study


def test_the_pooled_interval_holds_the_spread_between_seeds(study):
    # seed A's team gained 1 on every problem, seed B's nothing: over seeds the change is unsure
    gained, unchanged = [(0.0, 1.0)] * 16, [(0.0, 0.0)] * 16
    mean, low, high = study.hierarchical_difference_interval([gained, unchanged])
    # resampled seeds give 0, 0.5 or 1 (1/4, 1/2, 1/4): the 2.5% and 97.5% quantiles are 0 and 1
    assert (mean, low, high) == (0.5, 0.0, 1.0)
    # pooling the 32 problems as one seed's would claim a narrow interval around 0.5
    import coding_evidence

    pooled = gained + unchanged
    _, plain_low, plain_high = coding_evidence.paired_difference_interval(
        [b for b, _ in pooled], [a for _, a in pooled]
    )
    assert 0.3 < plain_low < 0.5 < plain_high < 0.7
    # equal changes everywhere: no spread at all, whatever the level
    assert study.hierarchical_difference_interval([[(1.0, 3.0)] * 4, [(0.0, 2.0)] * 7]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="at least one problem"):
        study.hierarchical_difference_interval([gained, []])


def outcomes(values_per_step):
    """A run's evaluations from ``{step: [pass per problem]}`` (the other metrics copy pass)."""
    return {
        step: {
            f"HumanEval/{j}": {
                metric: value for metric in ("pass_at_1", "code_reward_mean", "parse_rate", "calls_aux_rate")
            }
            for j, value in enumerate(values)
        }
        for step, values in values_per_step.items()
    }


def test_the_table_has_a_row_per_seed_and_a_pooled_row_from_the_first_and_last_evaluations(study):
    runs = [outcomes({0: [0, 0, 0, 1], 4: [1, 0, 0, 1], 8: [1, 1, 0, 1]}), outcomes({0: [0, 0, 0, 0], 8: [0, 0, 0, 1]})]
    seeds = [study.SeedRun(seed, ["fit"], 12.0 + seed, 30.0, 400.0, 1) for seed in (0, 1)]
    text = study.table(seeds, runs)
    rows = [line for line in text.splitlines() if line.startswith("| 0 |") or line.startswith("| pooled")]
    # seed 0: before 1/4, after 3/4 (step 8, not the middle evaluation), change +0.5
    assert rows[0].startswith("| 0 | 0.250 [") and "| 0.750 [" in rows[0] and "| +0.500 [" in rows[0]
    # pooled: before 1/8, after 4/8, change +3/8
    assert rows[1].startswith("| pooled (2 seeds) | 0.125 [") and "| 0.500 [" in rows[1] and "| +0.375 [" in rows[1]
    assert "| 1 | 13 | 30 | 400 | 1 |" in text
    with pytest.raises(SystemExit, match="one evaluation only"):
        study.table(seeds[:1], [outcomes({0: [1, 0]})])


def test_the_fit_command_names_the_configs_seed_and_folder_and_passes_the_rest_on(study, tmp_path):
    command = study.fit_command(["a.yaml", "b.yaml"], 7, tmp_path / "seed_7", ["--trainer.max_epochs", "2"])
    assert command == [
        "fit",
        "--config",
        "a.yaml",
        "--config",
        "b.yaml",
        "--seed_everything",
        "7",
        "--trainer.default_root_dir",
        str(tmp_path / "seed_7"),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.max_epochs",
        "2",
    ]


def test_bad_options_are_one_line_naming_the_option(study, tmp_path, capsys):
    for argv, message in (
        (["--config", str(tmp_path / "no.yaml"), "--out", str(tmp_path)], "no such file"),
        (
            ["--config", str(REPOSITORY / "configs/madpo.yaml"), "--out", str(tmp_path), "--seeds", "0"],
            "--seeds must be",
        ),
    ):
        with pytest.raises(SystemExit):
            study.main(argv)
        assert message in capsys.readouterr().err


@pytest.fixture
def chat_model(tmp_path_factory):
    """A 1-layer GPT-2 with 2,048 positions (the coding prompts are ~950 characters) reading the
    embedded model's characters, with a chat template: a coding run in seconds, no real model."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from comlrl_lightning.defaults import build_char_tokenizer

    folder = tmp_path_factory.mktemp("chat-model")
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    torch.manual_seed(0)
    ids = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=2048, n_embd=32, n_layer=1, n_head=2, **ids)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


TIEBREAK_REWARD = """
import dataclasses

from comlrl_lightning.tasks.coding.reward import CooperativeCodeReward


class LengthTiebreak(CooperativeCodeReward):
    # a random tiny model's programs all score 0: a thousandth per character of the main completion
    # makes pairs, so the run updates and its evaluation after training is at a later step
    def code_scores(self, aux_completions, main_completions, batch_items=None):
        scores = super().code_scores(aux_completions, main_completions, batch_items)
        return [dataclasses.replace(s, reward=s.reward + len(m) / 1000) for s, m in zip(scores, main_completions)]


length_tiebreak = LengthTiebreak()
"""


@pytest.mark.slow  # two tiny coding runs as processes, one resumed
def test_a_study_runs_each_seed_once_resumes_a_stopped_one_and_writes_its_table_and_plot(
    study, chat_model, tmp_path, capsys, monkeypatch
):
    out, config = tmp_path / "study", tmp_path / "coding.yaml"
    shutil.copy(REPOSITORY / "configs/coding_madpo_iter.yaml", config)
    (tmp_path / "tiebreak_reward.py").write_text(TIEBREAK_REWARD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the runs import the reward module from here
    fit_options = [
        f"--model.init_args.team.agent_model={chat_model}",
        "--model.init_args.team.lora=null",
        "--data.init_args.task.reward_func=tiebreak_reward.length_tiebreak",
        "--data.init_args.task.train_dataset.init_args.limit=1",
        "--data.init_args.task.eval_dataset.init_args.limit=2",
        "--data.init_args.num_iterations=1",
        "--data.init_args.preference_num_candidates=2",
        "--data.init_args.preference_pairs_per_sample=2",
        "--model.init_args.sampling.max_new_tokens=8",
    ]
    argv = [
        "--config",
        str(config),
        "--out",
        str(out),
        "--seeds",
        "2",
        "--",
        *fit_options,
    ]
    study.main(argv)
    records = [json.loads((out / f"seed_{s}" / "study_run.json").read_text()) for s in (0, 1)]
    assert [r["seed"] for r in records] == [0, 1] and all(r["cpu_s"] > 0 and r["peak_rss_mb"] > 50 for r in records)
    assert records[1]["command"][records[1]["command"].index("--seed_everything") + 1] == "1"
    table = (out / "study.md").read_text()
    assert "| pooled (2 seeds) |" in table and (out / "study.png").stat().st_size > 10_000
    assert capsys.readouterr().out.count("| pooled (2 seeds) |") == 4  # one per metric

    # a second study reads the finished seeds: no new attempt
    study.main(argv)
    assert all(len((out / f"seed_{s}" / "study_attempts.jsonl").read_text().splitlines()) == 1 for s in (0, 1))

    # a seed stopped after its checkpoint (its record never written) resumes from it, its CPU time summed
    (out / "seed_1" / "study_run.json").unlink()
    study.main(argv)
    attempts = [json.loads(line) for line in (out / "seed_1" / "study_attempts.jsonl").read_text().splitlines()]
    assert len(attempts) == 2 and attempts[1]["resumed_from"].endswith("last.ckpt")
    resumed = json.loads((out / "seed_1" / "study_run.json").read_text())
    assert resumed["attempts"] == 2 and resumed["cpu_s"] == pytest.approx(attempts[0]["cpu_s"] + attempts[1]["cpu_s"])

    # another command in the same folder is refused by name, before it runs anything
    with pytest.raises(SystemExit, match="another command"):
        study.main([*argv, "--model.init_args.dpo_beta=0.2"])
