"""Every training path, one short run each, on a real model: SmolLM2-135M-Instruct with its chat
template, as a LoRA team of 2 on one base (and one full-parameter team), from the shipped configs.

They prove the paths, not learning: two task items, 8 new tokens, one epoch, one evaluation item; a
run whose path is whole after one update stops there (``ONE_UPDATE``). The evaluation before and
after training (the same code for every module) runs in the two ``test_madpo_base`` runs, decentralized
and centralized; the other runs check training paths and skip it (``NO_EVALUATION``)."""

from __future__ import annotations

import json
import math

import pytest

from comlrl_lightning.cli import run_cli
from tests.conftest import REAL_MODEL

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

LORA = "{class_path: peft.LoraConfig, init_args: {r: 4, lora_alpha: 16, target_modules: [q_proj, v_proj]}}"
FORMATTERS = '["Write one short sentence about {prompt}.", "Reply to a sentence about {prompt} in as many letters."]'
ONE_UPDATE = ["--trainer.max_steps", "1"]
"""A MADPO run's path is whole after its first update (the epoch's second adds nothing it asserts)."""
NO_EVALUATION = ["--trainer.limit_val_batches", "0"]
"""No evaluation before, during or after training (``limit_val_batches`` 0): a third of a short run's time."""
NO_CHECKPOINTS = ["--trainer.enable_checkpointing", "false"]
"""No checkpoint files: about 25 s a run (two files of the frozen base and the adapters, or of two
full models); ``test_madpo_base[madpo.yaml]`` writes them, and the seed API's real-model test resumes from them."""


def items(tmp_path):
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"prompt": "rivers"}, {"prompt": "snow"}]))
    return str(path)


def real_run(
    tmp_path,
    config: str,
    *more: str,
    source: str = REAL_MODEL,
    lora: bool = True,
    rate: bool = True,
    checkpoints: bool = False,
):
    """``configs/<config>`` on the real model, sized to a few steps; returns the CLI (module, trainer)."""
    data = items(tmp_path)
    args = ["fit", "--config", f"configs/{config}", "--model.init_args.team.agent_model", source]
    args += ["--model.init_args.team.lora", LORA] if lora else []
    args += ["--model.init_args.agent_learning_rate", "1e-4" if lora else "1e-5"] if rate else []
    args += ["--model.init_args.sampling.max_new_tokens", "8"]
    args += ["--data.init_args.task.train_dataset", data, "--data.init_args.task.eval_dataset", data]
    args += ["--data.init_args.task.chat_template", "true", "--data.init_args.num_train_epochs", "1"]
    args += ["--data.init_args.preference_num_candidates", "2", "--data.init_args.preference_pairs_per_sample", "2"]
    args += ["--data.init_args.eval_num_samples", "1", "--data.init_args.eval_batch_size", "1"]
    args += ["--data.init_args.train_batch_size", "2", "--trainer.default_root_dir", str(tmp_path / "run")]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.val_check_interval", "2"]
    args += ["--trainer.log_every_n_steps", "1", *([] if checkpoints else NO_CHECKPOINTS)]
    return run_cli([*args, *more])


def trained(cli) -> None:
    assert cli.trainer.global_step >= 1
    metrics = {name: float(value) for name, value in cli.trainer.callback_metrics.items()}
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    assert any(name.startswith("train/") for name in metrics), metrics


def decentralized(config: str) -> list:
    return ["--data.init_args.task.formatters", FORMATTERS] if "centralized" not in config else []


@pytest.mark.parametrize("config", ["madpo.yaml", "madpo_centralized.yaml"])
def test_madpo_base(real_model, tmp_path, config):
    checkpoints = config == "madpo.yaml"  # one run of the file writes its checkpoint of the real model
    trained(real_run(tmp_path, config, *decentralized(config), *ONE_UPDATE, checkpoints=checkpoints))
    written = sorted(path.name for path in (tmp_path / "run").rglob("*.ckpt"))
    assert written == (["epoch=0-step=1.ckpt", "last.ckpt"] if checkpoints else []), written


@pytest.mark.parametrize(
    "comparator",
    ["CurrentComparator", "CurrentCopyComparator", "HistoryComparator"],
    ids=["current", "copy", "history"],
)
def test_madpo_iterative(real_model, tmp_path, comparator):
    cli = real_run(
        tmp_path,
        "madpo_iter.yaml",
        *decentralized("madpo_iter.yaml"),
        "--data.init_args.comparator",
        f"{{class_path: comlrl_lightning.comparators.{comparator}, init_args: {{num_candidates: 2}}}}",
        "--data.init_args.num_iterations",
        "2",
        "--data.init_args.replay.init_args.sample_size",
        "4",
        *NO_EVALUATION,
    )
    trained(cli)
    assert cli.trainer.current_epoch == 2  # two rounds of one epoch


@pytest.mark.parametrize("config", ["marlhf.yaml", "marlhf_maac.yaml", "marlhf_iac.yaml", "marlhf_centralized.yaml"])
def test_marlhf(real_model, tmp_path, config):
    cli = real_run(
        tmp_path,
        config,
        *decentralized(config),
        "--model.init_args.num_generations",
        "2",
        "--model.init_args.reward_model.num_train_epochs",
        "1",
        "--model.init_args.reward_model.train_batch_size",
        "2",
        *NO_EVALUATION,
    )
    trained(cli)


def test_a_full_parameter_team_from_a_gguf_path_catches_the_configs_toy_rate_and_bfloat16_weights(real_model, tmp_path):
    """One run checks both: a full-parameter team from the model's .gguf path (two agents of their
    own), and the warnings on the config's toy rate and bfloat16 weights (what they say is true)."""
    import torch

    from comlrl_lightning.team.loading import load_model
    from comlrl_lightning.team.offline_models import offline_model_file

    gguf = str(offline_model_file(REAL_MODEL))
    more = [*decentralized("madpo.yaml"), *ONE_UPDATE, *NO_EVALUATION, "--model.init_args.team.dtype", "bfloat16"]
    with pytest.warns(UserWarning) as warned:
        cli = real_run(tmp_path, "madpo.yaml", *more, source=gguf, lora=False, rate=False)  # the config's 0.003
    messages = [str(w.message) for w in warned]
    assert any("agent_learning_rate 0.003" in m and "Training at 5e-06" in m for m in messages), messages
    assert any("trainable weights are bfloat16" in m and "bf16-mixed" in m for m in messages), messages
    assert cli.model.learning_rates == [5e-6, 5e-6]
    trained(cli)
    agents = cli.model.team.agents
    assert len(agents) == 2 and agents[0] is not agents[1]
    # what the warning says: in bfloat16 weights, AdamW's updates at 5e-6 round away
    start = load_model(real_model, dtype="bfloat16").state_dict()
    weights = agents[0].state_dict()
    same = sum(int((weights[name] == start[name]).sum()) for name in start)
    assert same / sum(t.numel() for t in start.values()) > 0.9
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
