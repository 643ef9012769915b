"""FSDP2 sharding with real 2-process CPU runs (gloo): equal to DDP, exact resume, LoRA, uneven shares, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from comlrl_lightning.runtime.sharding import check_strategy, decoder_layers
from comlrl_lightning.validation import OptionError
from tests.helpers.forks import run_forked_ranks

REPO = Path(__file__).resolve().parents[2]


def run(kind: str, algorithm: str, root: Path, epochs: int, resume: Path | None = None, plain: bool = False) -> Path:
    """One two-process run of tests/helpers/sharded_run.py, its ranks forked from this process (``plain``:
    under a Trainer that does not reload its dataloaders); both ranks' output is kept beside the run, and
    a failure or a hang (past the timeout) fails the test with the first rank's account of its death."""
    from tests.helpers.sharded_run import main

    run_forked_ranks(main, kind, algorithm, root, epochs, resume, plain, logs=root.parent / f"{root.name}.logs")
    return root


def weights(root: Path) -> list:
    return torch.load(root / "weights.pt")


def round_files(root: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted((root / "preference_replay").glob("iteration_*.json"))}


def assert_close(sharded: list, replicated: list, initial_gap: float) -> None:
    """Equal within float tolerance: the difference is a small fraction of how far training moved them."""
    for a, b in zip(sharded, replicated):
        assert a.keys() == b.keys()
        difference = max((a[k] - b[k]).abs().max().item() for k in a)
        assert difference < 0.02 * initial_gap, (difference, initial_gap)


def moved(before: list, after: list) -> float:
    return max((after[i][k] - before[i][k]).abs().max().item() for i in range(len(after)) for k in after[i])


@pytest.fixture(scope="module")
def madpo_runs(tmp_path_factory):
    """Iterative MADPO, 3 rounds, 15 training items and 5 evaluation items (the ranks' shares differ):
    sharded, data parallel, and sharded stopped after round 2 then resumed."""
    root = tmp_path_factory.mktemp("madpo")
    runs = {"fsdp": run("fsdp", "madpo", root / "fsdp", 3), "ddp": run("ddp", "madpo", root / "ddp", 3)}
    partial = run("fsdp", "madpo", root / "resumed", 2)
    runs["resumed"] = run("fsdp", "madpo", partial, 3, resume=partial / "ckpt" / "last.ckpt")
    return runs


@pytest.fixture(scope="module")
def plain_resumed(tmp_path_factory):
    """The sharded run stopped after round 2 and resumed under a Trainer that does not reload its
    dataloaders (Lightning's default: the data module follows the epochs itself)."""
    partial = run("fsdp", "madpo", tmp_path_factory.mktemp("plain"), 2, plain=True)
    return run("fsdp", "madpo", partial, 3, resume=partial / "ckpt" / "last.ckpt", plain=True)


@pytest.mark.slow
def test_sharded_madpo_equals_data_parallel_with_uneven_shares(madpo_runs):
    from transformers import AutoModelForCausalLM

    from comlrl_lightning.defaults import embedded_model_path

    initial = [
        {k: v.float() for k, v in AutoModelForCausalLM.from_pretrained(embedded_model_path()).state_dict().items()}
    ] * 2
    sharded, replicated = weights(madpo_runs["fsdp"]), weights(madpo_runs["ddp"])
    assert_close(sharded, replicated, moved(initial, replicated))
    files = round_files(madpo_runs["fsdp"])
    assert len(files) == 3 and files == round_files(madpo_runs["ddp"])
    # the evaluation before training samples the same weights: the same reward
    before = [json.loads((madpo_runs[kind] / "evaluations.json").read_text())[0] for kind in ("fsdp", "ddp")]
    assert before[0] is not None and before[0] == before[1], before
    assert_same_forwards_on_every_rank(madpo_runs["fsdp"])


def assert_same_forwards_on_every_rank(root: Path) -> None:
    """A sharded forward is a collective: both ranks ran the same agents' forwards in the same order,
    also where one rank's share of a batch was empty (the evaluation's last batch of 5 items in 2s)."""
    ranks = [json.loads((root / f"forwards_rank_{rank}.json").read_text()) for rank in (0, 1)]
    assert len(set(map(str, ranks[0]))) > 1, ranks[0][:10]  # several agents (adapters) ran
    differ = next((i for i, (a, b) in enumerate(zip(*ranks)) if a != b), min(map(len, ranks)))
    assert ranks[0] == ranks[1], f"forward {differ}: rank 0 ran {ranks[0][differ:][:3]}, rank 1 {ranks[1][differ:][:3]}"


@pytest.mark.slow
def test_a_sharded_run_resumes_exactly(madpo_runs):
    assert_resumed_exactly(madpo_runs["resumed"], madpo_runs["fsdp"])
    # the history comparator's snapshots are whole Hugging Face folders gathered from the shards
    from transformers import AutoModelForCausalLM

    from comlrl_lightning.defaults import embedded_model_path

    snapshot = AutoModelForCausalLM.from_pretrained(
        madpo_runs["fsdp"] / "policy_snapshots" / "iteration_0001" / "agent_1"
    )
    initial = AutoModelForCausalLM.from_pretrained(embedded_model_path())
    assert snapshot.state_dict().keys() == initial.state_dict().keys()
    assert all(a.shape == b.shape for a, b in zip(snapshot.state_dict().values(), initial.state_dict().values()))
    assert not all(torch.equal(a, b) for a, b in zip(snapshot.state_dict().values(), initial.state_dict().values()))


@pytest.mark.slow
@pytest.mark.timeout(1500)  # alone, it makes the six two-process runs of both fixtures
def test_a_sharded_run_under_a_plain_trainer_resumes_exactly(madpo_runs, plain_resumed):
    # the uninterrupted run reloads its dataloaders every epoch: a plain Trainer trains the same
    assert_resumed_exactly(plain_resumed, madpo_runs["fsdp"])


def assert_resumed_exactly(resumed: Path, whole: Path) -> None:
    """The resumed run's checkpoint is a sharded folder written whole (no .tmp / .old beside it), and
    its weights and round files equal the uninterrupted run's."""
    folder = resumed / "ckpt" / "last.ckpt"
    assert folder.is_dir() and (folder / "meta.pt").is_file()
    assert not list((resumed / "ckpt").glob("*.tmp")) and not list((resumed / "ckpt").glob("*.old"))
    assert all(torch.equal(a[k], b[k]) for a, b in zip(weights(resumed), weights(whole)) for k in a)
    assert round_files(resumed) == round_files(whole)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["magrpo", "marlhf_maac"])
def test_sharded_policy_gradient_equals_data_parallel(tmp_path, algorithm):
    """MAGRPO with the reference KL on the task reward; MARLHF's reward model, then MAAC with a sharded critic."""
    sharded = weights(run("fsdp", algorithm, tmp_path / "fsdp", 2))
    replicated = weights(run("ddp", algorithm, tmp_path / "ddp", 2))
    from transformers import AutoModelForCausalLM

    from comlrl_lightning.defaults import embedded_model_path

    initial = [
        {k: v.float() for k, v in AutoModelForCausalLM.from_pretrained(embedded_model_path()).state_dict().items()}
    ] * 2
    assert_close(sharded, replicated, moved(initial, replicated))


@pytest.mark.slow
def test_a_sharded_lora_team_trains_every_adapter_in_one_pass_as_agent_by_agent(tmp_path):
    root = run("fsdp", "lora", tmp_path / "lora", 2)
    assert json.loads((root / "one_pass.json").read_text()) is True  # routed per row under FSDP2 too
    changed = json.loads((root / "moved.json").read_text())
    for agent in (0, 1):  # each agent's own adapter, in every layer, A and B
        own = {k: v for k, v in changed.items() if k.startswith(f"{agent}:") and f".agent_{agent}." in k}
        assert len(own) == 4 and all(own.values()), own
    per_agent = run("fsdp", "lora_per_agent", tmp_path / "per_agent", 2)
    assert json.loads((per_agent / "one_pass.json").read_text()) is False
    assert_same_forwards_on_every_rank(per_agent)
    assert round_files(root) == round_files(per_agent)
    expected = weights(per_agent)
    # LoRA's B matrices start at zero: their size is how far training moved them
    trained = max(v.abs().max().item() for agent in expected for k, v in agent.items() if "lora_B" in k)
    assert_close(weights(root), expected, trained)


def test_strategies_the_modules_cannot_run_under_are_refused_by_name():
    from lightning.pytorch.strategies import FSDPStrategy

    with pytest.raises(
        OptionError,
        match=r"trainer.strategy: FSDPStrategy is not supported by the team modules.*use lightning\.pytorch\.strategies\.ModelParallelStrategy \(FSDP2\)",
    ):
        check_strategy(FSDPStrategy())


def test_decoder_layers_are_the_repeated_blocks():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=16, n_head=2, vocab_size=32, n_positions=16))
    assert decoder_layers(gpt2) == list(gpt2.transformer.h)
    llama = LlamaForCausalLM(
        LlamaConfig(
            num_hidden_layers=2,
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=32,
        )
    )
    assert decoder_layers(llama) == list(llama.model.layers)


def test_a_sharded_checkpoint_folder_is_replaced_whole(tmp_path):
    """A save that dies half-way leaves the previous checkpoint folder in place, complete."""
    from comlrl_lightning.checkpoints.assets import ASSETS_KEY
    from comlrl_lightning.checkpoints.io import save_folder_atomically

    class OneProcessStrategy:
        global_rank = 0

        def broadcast(self, value):
            return value

        def barrier(self):
            pass

        def save_checkpoint(self, checkpoint, path, storage_options=None):
            assert ASSETS_KEY not in checkpoint
            path.mkdir(parents=True)
            (path / "__0_0.distcp").write_text(checkpoint["weights"])
            if checkpoint.get("die"):
                raise OSError("no space left on device")
            (path / "meta.pt").write_text("meta")

    class AtomicStrategy(OneProcessStrategy):  # as AtomicModelParallelStrategy wraps its parent's save
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            save_folder_atomically(self, super().save_checkpoint, checkpoint, path, storage_options)

    strategy = AtomicStrategy()
    target = tmp_path / "last.ckpt"
    strategy.save_checkpoint({"weights": "old"}, target)
    with pytest.raises(OSError):
        strategy.save_checkpoint({"weights": "new", "die": True}, target)
    assert (target / "__0_0.distcp").read_text() == "old" and (target / "meta.pt").is_file()
    strategy.save_checkpoint({"weights": "new"}, target)
    assert (target / "__0_0.distcp").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # the failed save's staging is gone
    # the files the state names go beside the folder, and not into the sharded state
    import hashlib

    from comlrl_lightning.checkpoints.assets import asset

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "iteration_0001.json").write_bytes(b"{}")
    entry = asset(
        "preference_replay",
        "iteration_0001.json",
        tmp_path / "run" / "iteration_0001.json",
        hashlib.sha256(b"{}").hexdigest(),
        2,
    )
    strategy.save_checkpoint({"weights": "newer", ASSETS_KEY: [entry], "die": False}, target)
    assert (tmp_path / "last.assets" / "preference_replay" / "iteration_0001.json").read_bytes() == b"{}"


def test_a_copy_of_sharded_agents_on_other_devices_is_refused():
    from comlrl_lightning.comparators import ComparatorContext, CurrentCopyComparator
    from comlrl_lightning.defaults import embedded_model_path
    from comlrl_lightning.generation.hf import HFGenerator
    from comlrl_lightning.runtime.rng import RandomStream
    from comlrl_lightning.team.team import Team

    team = Team([str(embedded_model_path())], synced=True)  # as after ModelParallelStrategy sharded it
    comparator = CurrentCopyComparator(devices="meta")
    comparator.bind(
        ComparatorContext(
            actors=lambda: team, generator=HFGenerator(), stream=RandomStream(0), agent_devices=["cpu"], snapshots=None
        )
    )
    with pytest.raises(OptionError, match="copies of sharded agents"):
        comparator.start_round(0)


def test_lightning_precision_becomes_the_fsdp2_mixed_precision_policy():
    from comlrl_lightning.runtime.sharding import mixed_precision_policy

    bf16 = mixed_precision_policy("bf16-mixed")
    assert (bf16.param_dtype, bf16.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision_policy("16-mixed").param_dtype == torch.float16
    assert mixed_precision_policy("32-true") is None and mixed_precision_policy("bf16-true") is None


def test_tensor_parallelism_is_refused_with_the_sizes_to_set():
    from lightning.pytorch.strategies import ModelParallelStrategy

    class Mesh:  # the shape of the mesh ModelParallelStrategy builds: 1 data-parallel x 2 tensor-parallel ranks
        sizes = {"data_parallel": 1, "tensor_parallel": 2}

        def __getitem__(self, name):
            return type("Dimension", (), {"size": lambda _, n=self.sizes[name]: n})()

        def size(self):
            return 2

    strategy = ModelParallelStrategy()  # the CLI's defaults ("auto") become exactly this mesh on 2 processes
    strategy._device_mesh = Mesh()
    with pytest.raises(
        OptionError,
        match=r"data_parallel_size=1 and tensor_parallel_size=2: .* set data_parallel_size "
        r"to the number of processes \(2\) and tensor_parallel_size to 1",
    ):
        check_strategy(strategy)


# ----------------------------------------------------------------------------------------------
# Misconfigured sharded runs: named before any process starts or any model loads

FSDP_CONFIG = ["--config", "configs/madpo_iter.yaml", "--config", "configs/overlays/fsdp.yaml"]
"""The iterative default sharded with FSDP2 over 2 processes (the fsdp overlay over its base)."""

FSDP_TINY = [
    "--model.init_args.sampling.max_new_tokens",
    "4",
    "--data.init_args.num_iterations",
    "1",
    "--data.init_args.num_train_epochs",
    "1",
    "--data.init_args.preference_num_candidates",
    "2",
    "--data.init_args.preference_pairs_per_sample",
    "2",
    "--data.init_args.comparator.init_args.num_candidates",
    "2",
    "--data.init_args.replay.init_args.sample_size",
    "4",
    "--data.init_args.eval_num_samples",
    "2",
    "--trainer.enable_progress_bar",
    "false",
]


@pytest.mark.parametrize(
    "overrides, sizes, processes",
    [
        (["--trainer.devices", "1"], "data_parallel_size=2 and tensor_parallel_size=1", 1),  # the config on one process
        (
            ["--trainer.strategy.init_args.data_parallel_size", "1"],
            "data_parallel_size=1 and tensor_parallel_size=1",
            2,
        ),
        (
            [
                "--trainer.strategy.init_args.data_parallel_size",
                "auto",
                "--trainer.strategy.init_args.tensor_parallel_size",
                "auto",
            ],
            "data_parallel_size=1 and tensor_parallel_size=2",  # Lightning's "auto" is tensor parallel
            2,
        ),
    ],
    ids=["one-process", "data-parallel-1-of-2", "auto"],
)
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_mesh_that_does_not_fit_the_processes_is_named_before_any_process_starts(
    tmp_path, capsys, overrides, sizes, processes
):
    from comlrl_lightning.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *FSDP_CONFIG, "--trainer.default_root_dir", str(tmp_path)] + FSDP_TINY + overrides)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert (
        f"error: trainer.strategy: ModelParallelStrategy with {sizes}, but the trainer runs {processes} process(es)"
        in err
    )
    assert f"set data_parallel_size to {processes} and tensor_parallel_size to 1" in err
    assert not list(tmp_path.rglob("config.yaml"))  # fit never started


@pytest.mark.slow
def test_a_sharded_lora_team_with_the_history_comparator_is_named_before_any_model_loads(tmp_path):
    """Two real processes (gloo; the command line's main in two forked ranks): each names the problem in
    setup, before the comparator loads the team."""
    from comlrl_lightning.cli import main
    from tests.helpers.forks import in_folder

    lora = "{class_path: peft.LoraConfig, init_args: {r: 4}}"
    arguments = ["fit", *FSDP_CONFIG, "--trainer.default_root_dir", str(tmp_path), "--model.init_args.team.lora", lora]
    logs = tmp_path.parent / f"{tmp_path.name}.logs"
    run_forked_ranks(in_folder, REPO, main, [*arguments, *FSDP_TINY], logs=logs, expect=2)
    for rank in (0, 1):
        output = (logs / f"rank_{rank}.log").read_text()
        lines = [line for line in output.splitlines() if line.startswith("error:")]
        assert lines and all(
            "policy snapshots (HistoryComparator, policy_checkpoint_dir) of a LoRA team" in x for x in lines
        ), output[-3000:]
        assert "Traceback" not in output and "evaluation (before training" not in output
    assert not list(tmp_path.rglob("policy_snapshots/*"))  # no snapshot was attempted
