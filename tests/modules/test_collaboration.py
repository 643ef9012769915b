"""Centralized collaboration: one model writes every role; joint scoring, runs and resume (the joint prompt
and its parsing: tests/tasks/test_centralized_task.py)."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig

from comlrl_lightning import (
    CentralizedComparator,
    CurrentComparator,
    MADPOModule,
    MAGRPOModule,
    MARLHFModule,
    OptionError,
    PreferenceDataModule,
    RewardModelFit,
    TaskDataModule,
)
from comlrl_lightning.modules.collaboration import Centralized
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.tasks.centralized_task import CentralizedTask, DelimitedAdapter
from tests.conftest import TINY_DATA, tiny_sampling, tiny_task, tiny_team, tiny_trainer
from tests.helpers.iterative_run import make_run

DELIMITED = dict(separator=";", prompt_template="topic: {prompt}\nwriter;matcher:")
TINY_CENTRAL = dict(
    team=tiny_team(),
    sampling=tiny_sampling(max_new_tokens=8),
    agent_learning_rate=3e-3,
)


def centralized(missing="empty"):
    return Centralized(adapter=DelimitedAdapter(**DELIMITED, missing=missing))


def _round_files(root):
    return {p.name: p.read_bytes() for p in sorted((Path(root) / "preference_replay").glob("iteration_*.json"))}


# ---------------------------------------------------------------------------------------------
# MADPO on the joint completion


def _direct_joint_logprob(module, prompt, completion_ids):
    tokenizer, agent = module.team.tokenizers[0], module.team.agents[0]
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    ids = torch.tensor([prompt_ids + completion_ids])
    logprobs = F.log_softmax(agent(input_ids=ids).logits[0, :-1].float(), dim=-1)
    targets = ids[0, 1:]
    return logprobs[torch.arange(len(targets)), targets][len(prompt_ids) - 1 :].sum()


@pytest.mark.parametrize("pad_is_eos", [True, False], ids=["pad==eos", "pad!=eos"])
def test_the_margin_is_the_joint_completions_log_prob_difference_eos_included(pad_is_eos):
    module = MADPOModule(**TINY_CENTRAL, collaboration=centralized())
    module.configure_model()
    tokenizer = module.team.tokenizers[0]
    if not pad_is_eos:
        tokenizer.pad_token = "<unk>"  # an existing id, so the model's vocabulary fits
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt = "topic: ab\nwriter;matcher:"
    winner = encode("aei;oo") + [eos]
    loser = encode("bc;d") + ([eos] if pad_is_eos else [pad] + encode("zz"))  # pad != eos: cut before the pad
    assert module.team.joint_scored_length(0, winner) == len(winner)
    assert module.team.joint_scored_length(0, loser) == (len(loser) if pad_is_eos else len(encode("bc;d")))
    pair = PreferencePair(
        [prompt],
        ["aei;oo"],
        ["bc;d"],
        1.0,
        0.0,
        0.5,
        prompt_ids=[tokenizer(prompt)["input_ids"]],
        winner_ids=[winner],
        loser_ids=[loser],
    )
    margin = module.margins(module.collate_pairs([pair]))
    scored_loser = loser if pad_is_eos else encode("bc;d")
    expected = _direct_joint_logprob(module, prompt, winner) - _direct_joint_logprob(module, prompt, scored_loser)
    torch.testing.assert_close(margin, expected.view(1, 1), rtol=1e-5, atol=1e-5)
    # the decentralized rule would have left the last token (the EOS) out
    assert module.team.scored_length(0, winner, False) == (len(winner) - 2 if pad_is_eos else len(winner) - 1)


def test_centralized_madpo_trains_one_model_on_the_joint_completions(tiny_run):
    module, datamodule, trainer = tiny_run(
        model=dict(collaboration=centralized(), sampling=tiny_sampling(max_new_tokens=8)), trainer=dict(max_epochs=1)
    )
    trainer.fit(module, datamodule)
    assert module.team.num_agents == 1 and module.num_roles == 2 and trainer.global_step > 0
    assert isinstance(datamodule.task, CentralizedTask)
    pair = datamodule.pairs[0]
    assert len(pair.prompts) == 1 and pair.prompts[0].endswith("writer;matcher:")


# ---------------------------------------------------------------------------------------------
# Iterative: centralized comparator generation, round files, resume


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_iterative_centralized_round_files_keep_the_joint_text_and_resume_exactly(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    model = dict(collaboration=centralized(), sampling=tiny_sampling(max_new_tokens=8))
    module, datamodule, trainer = make_run(tmp_path / "full", model=model)
    trainer.fit(module, datamodule)
    files = _round_files(tmp_path / "full")
    payload = json.loads(files["iteration_0002.json"])
    record = payload["pairs"][0]
    assert list(record) == [
        "prompts",
        "winner_completions",
        "loser_completions",
        "winner_reward",
        "loser_reward",
        "candidate_reward_mean",
        "raw_rewards",
        "target_raw_reward",
        "comparator_raw_reward",
    ]
    assert len(record["prompts"]) == len(record["winner_completions"]) == len(record["loser_completions"]) == 1
    assert record["prompts"][0].startswith("topic: ") and record["prompts"][0].endswith("\nwriter;matcher:")
    texts = {t for p in payload["pairs"] for t in p["winner_completions"] + p["loser_completions"]}
    assert any(";" in text for text in texts)  # the joint text verbatim, separator and all
    weights = {k: v.clone() for k, v in module.team.state_dict().items()}

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_train_steps=1)
    module, datamodule, trainer = make_run(tmp_path / "part", model=model, callbacks=[checkpoint], max_steps=8)
    trainer.fit(module, datamodule)
    module, datamodule, trainer = make_run(tmp_path / "part", model=model)
    trainer.fit(module, datamodule, ckpt_path=str(next((tmp_path / "ckpt").glob("*step=8.ckpt"))))
    assert _round_files(tmp_path / "part") == files
    for key, value in module.team.state_dict().items():
        torch.testing.assert_close(value, weights[key], rtol=0, atol=0, msg=key)


def test_a_centralized_team_refuses_a_centralized_comparator_wrapper(tmp_path):
    module, datamodule, trainer = make_run(
        tmp_path,
        model=dict(collaboration=centralized()),
        data=dict(comparator=CentralizedComparator(source=CurrentComparator())),
    )
    with pytest.raises(OptionError, match="a centralized team already writes every role"):
        trainer.fit(module, datamodule)


def test_parse_failures_are_counted_in_collection_and_evaluation(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    module = MADPOModule(**TINY_CENTRAL, collaboration=centralized(missing="error"))
    data = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 1})
    tiny_trainer(tmp_path, max_epochs=1, logger=CSVLogger(tmp_path)).fit(module, data)
    with open(next(tmp_path.glob("lightning_logs/version_*/metrics.csv"))) as handle:
        rows = list(csv.DictReader(handle))
    collected = [float(r["collect/unparsed_completions"]) for r in rows if r.get("collect/unparsed_completions")]
    rates = [float(r["eval/unparsed_rate"]) for r in rows if r.get("eval/unparsed_rate")]
    assert len(collected) == 1 and 0 < collected[0] <= 16 * TINY_DATA["preference_num_candidates"]
    assert rates and all(0.0 <= rate <= 1.0 for rate in rates) and any(rate > 0 for rate in rates)


# ---------------------------------------------------------------------------------------------
# MARLHF, MAGRPO, LoRA, two processes


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_centralized_marlhf_fits_a_one_agent_reward_model_and_trains(tmp_path):
    module = MARLHFModule(
        team=tiny_team(),
        collaboration=centralized(),
        num_generations=2,
        sampling=tiny_sampling(max_new_tokens=6),
        reward_model=RewardModelFit(train_batch_size=8),
    )
    data = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 1})
    tiny_trainer(tmp_path, max_epochs=1).fit(module, data)
    assert module.fitted_round == 0 and module.team.num_agents == 1
    (joint_prompt,) = data.task.prompts({"prompt": "ab"})
    score = module.scorer.predicted_rewards([[joint_prompt]], [["aei;oo"]])
    assert score.shape == (1,)  # the joint reward model sees one "agent": joint prompt + joint text


@pytest.mark.parametrize(
    "options",
    [dict(), dict(team=tiny_team(lora=LoraConfig(r=4, lora_alpha=16))), dict(rl_algorithm="maac")],
    ids=["full", "lora", "maac"],
)
def test_centralized_policy_gradient_on_the_task_reward(tmp_path, options):
    module = MAGRPOModule(
        **{"team": tiny_team(), **options},
        collaboration=centralized(),
        num_generations=2,
        sampling=tiny_sampling(max_new_tokens=6),
        agent_learning_rate=1e-2,
    )
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    data = TaskDataModule(task=tiny_task(eval_dataset=None), train_batch_size=4, num_train_epochs=1)
    tiny_trainer(tmp_path, max_epochs=1, limit_train_batches=2).fit(module, data)
    changed = [n for n, p in module.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert changed and ("team" not in options or all("lora_" in n for n in changed))
    assert any(n.startswith("_team.") for n in changed)


@pytest.mark.slow
def test_two_process_centralized_madpo_keeps_the_replicas_identical(tmp_path):
    import hashlib

    from lightning.pytorch import Callback

    class Fingerprint(Callback):
        def on_train_end(self, trainer, pl_module):
            digest = hashlib.sha256()
            for key, value in sorted(pl_module.team.state_dict().items()):
                digest.update(key.encode() + value.detach().numpy().tobytes())
            (tmp_path / f"rank_{trainer.global_rank}.txt").write_text(digest.hexdigest())

    module = MADPOModule(**TINY_CENTRAL, collaboration=centralized())
    data = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 1, "eval_num_samples": 0})
    tiny_trainer(tmp_path, devices=2, strategy="ddp_fork", max_epochs=1, callbacks=[Fingerprint()]).fit(module, data)
    assert (tmp_path / "rank_0.txt").read_text() == (tmp_path / "rank_1.txt").read_text()


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_centralized_configs_parse_and_show_the_collaboration_object(capsys):
    import yaml

    from comlrl_lightning.cli import main

    overlay = ["configs/madpo_iter.yaml", "--config", "configs/overlays/centralized.yaml"]
    for config in (["configs/madpo_centralized.yaml"], overlay, ["configs/marlhf_centralized.yaml"]):
        with pytest.raises(SystemExit):
            main(["fit", "--config", *config, "--print_config"])
        printed = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["collaboration"]
        assert printed["class_path"] == "comlrl_lightning.modules.Centralized"
        assert printed["init_args"]["adapter"]["class_path"] == "comlrl_lightning.tasks.DelimitedAdapter"


def test_centralized_madpo_in_bf16_mixed_precision_has_bfloat16_activations_float32_weights_and_loss(tmp_path):
    """What ``bf16-mixed`` changes and keeps, on the first update: the joint model's activations are
    bfloat16, its weights stay float32 (the optimizer's master copy), and the loss is float32's on
    the same batch and weights up to bfloat16 rounding (but not equal: the precision did apply)."""
    from lightning.pytorch import Callback

    from comlrl_lightning.losses import madpo_loss

    class FirstUpdate(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 0:
                self.batch, self.weights = batch, copy.deepcopy(pl_module.team.state_dict())
                mlp = pl_module.team.agents[0].transformer.h[-1].mlp  # the last block's MLP (GPT-2)
                self.activations = []
                self.hook = mlp.register_forward_hook(lambda m, i, out: self.activations.append(out.dtype))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 0:
                self.hook.remove()
                self.loss = outputs["loss"].detach()

    first = FirstUpdate()
    module = MADPOModule(**TINY_CENTRAL, collaboration=centralized())
    data = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 1, "eval_num_samples": 0})
    trainer = tiny_trainer(tmp_path, max_epochs=1, precision="bf16-mixed", limit_train_batches=2, callbacks=[first])
    trainer.fit(module, data)
    assert trainer.global_step == 2
    assert first.activations and set(first.activations) == {torch.bfloat16}
    assert {p.dtype for p in module.team.parameters()} == {torch.float32}
    assert {value.dtype for value in first.weights.values() if value.is_floating_point()} == {torch.float32}
    module.team.load_state_dict(first.weights)
    with torch.no_grad():
        in_float32 = madpo_loss(module.margins(first.batch), module.dpo_beta)
    # measured: 1e-5 apart on a loss of 0.596 (the margins' bfloat16 errors largely cancel)
    assert first.loss.dtype == torch.float32 and first.loss != in_float32
    torch.testing.assert_close(first.loss, in_float32, rtol=0, atol=1e-3)
