"""The seed's Python API end to end: one script per trainer class, equal to the CLI, resume, objects, errors."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
import yaml

from comlrl_lightning.defaults import embedded_model_path, vowel_length_reward
from comlrl_lightning.trainers.configs import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl_lightning.trainers.preference import (
    MADPOIterTrainer,
    MADPOTrainer,
    MARLHFIterTrainer,
    MARLHFTrainer,
)
from comlrl_lightning.validation import OptionError
from tests.helpers.wandb_records import settled

SMALL = dict(
    max_new_tokens=6,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    agent_learning_rate=3e-3,
    preference_num_candidates=4,
    preference_pairs_per_sample=4,
    eval_interval=4,
    eval_num_samples=4,
    eval_batch_size=4,
    logging_steps=1,
    train_batch_size=8,
)
SMALL_ITER = dict(
    SMALL,
    num_iterations=2,
    preference_replay_mode="lambda_decay",
    preference_replay_lambda=0.5,
    preference_replay_sample_size=16,
    comparator_policy="history",
)
SMALL_MARLHF = dict(
    SMALL,
    num_train_epochs=1,
    num_generations=2,
    reward_learning_rate=1e-3,
    reward_train_batch_size=8,
    train_batch_size=4,
)


def weights(trainer) -> list:
    return [p.detach().clone() for agent in trainer.module.team.agents for p in agent.parameters()]


def round_files(folder: Path) -> dict:
    return {path.name: path.read_bytes() for path in sorted(folder.glob("iteration_*.json"))}


SEED_EXAMPLE_SIZES = dict(
    num_iterations=3,
    preference_replay_sample_size=16,
    max_new_tokens=6,
    preference_num_candidates=4,
    eval_interval=8,
    eval_num_samples=2,
)
"""The sizes the seed's example runs at here: 3 rounds of 8 updates, short completions. At its own
sizes (the defaults: 6 rounds of 128 updates, 256 new tokens) it is ``benchmarks/seed_example.py``."""


@pytest.mark.slow  # three training rounds end to end
def test_the_seeds_example_runs_unchanged_but_for_the_import(tmp_path, monkeypatch):
    """The seed's example, its text as written but for the import, then only its sizes replaced
    (``SEED_EXAMPLE_SIZES``, among them the example's own replay sample size, 256 to 16): the same
    config class, checks and trainer call, every round written and trained on its drawn pairs."""
    monkeypatch.chdir(tmp_path)  # the reference writes its outputs under the working directory
    from comlrl_lightning.trainers.configs import MADPOIterConfig

    args = MADPOIterConfig(
        num_agents=2,
        preference_replay_mode="lambda_decay",
        preference_replay_lambda=0.8,
        preference_replay_sample_size=256,
    )
    args = dataclasses.replace(args, **SEED_EXAMPLE_SIZES)
    assert (args.preference_replay_mode, args.preference_replay_lambda) == ("lambda_decay", 0.8)
    trainer = MADPOIterTrainer(agent_model="embedded", args=args)
    trainer.train()
    rounds, sample_size = SEED_EXAMPLE_SIZES["num_iterations"], SEED_EXAMPLE_SIZES["preference_replay_sample_size"]
    assert sorted(round_files(tmp_path / "preference_replay")) == [
        f"iteration_{r:04d}.json" for r in range(1, rounds + 1)
    ]
    # every round trains on its drawn pairs, two per update (rollout_buffer_size)
    assert trainer.trainer.global_step == rounds * sample_size // 2
    assert trainer.trainer.current_epoch == rounds


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_a_facade_run_equals_the_same_run_from_the_command_line(tmp_path):
    from comlrl_lightning.cli import run_cli

    torch.manual_seed(5)
    facade = MADPOIterTrainer(
        agent_model="embedded",
        args=MADPOIterConfig(**SMALL_ITER),
        wandb_config={"output_dir": str(tmp_path / "facade")},
    )
    facade.train()
    config = {
        "seed_everything": 5,
        "trainer": dict(
            accelerator="cpu",
            devices=1,
            default_root_dir=str(tmp_path / "cli"),
            val_check_interval=4,
            check_val_every_n_epoch=None,
            log_every_n_steps=1,
            enable_progress_bar=False,
            enable_checkpointing=False,
        ),
        "model": {
            "class_path": "comlrl_lightning.MADPOModule",
            "init_args": dict(
                team=dict(agent_model="embedded", num_agents=2),
                sampling=dict(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None),
                agent_learning_rate=3e-3,
                seed=5,
            ),
        },
        "data": {
            "class_path": "comlrl_lightning.IterativePreferenceDataModule",
            "init_args": dict(
                task=dict(train_dataset="embedded", eval_dataset="embedded"),
                num_iterations=2,
                num_train_epochs=1,
                preference_num_candidates=4,
                preference_pairs_per_sample=4,
                pair_selection="comparator_reward",
                train_batch_size=8,
                eval_num_samples=4,
                eval_batch_size=4,
                seed=5,
                comparator={"class_path": "comlrl_lightning.comparators.HistoryComparator", "init_args": {"k": 1}},
                replay={
                    "class_path": "comlrl_lightning.rounds.LambdaDecayReplay",
                    "init_args": {"lam": 0.5, "sample_size": 16},
                },
            ),
        },
    }
    path = tmp_path / "cli.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = run_cli(["fit", "--config", str(path)])
    facade_rounds = round_files(tmp_path / "facade" / "preference_replay")
    assert len(facade_rounds) == 2 and facade_rounds == round_files(tmp_path / "cli" / "preference_replay")
    cli_weights = [p.detach() for agent in cli.model.team.agents for p in agent.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(weights(facade), cli_weights))
    assert facade.trainer.global_step == cli.trainer.global_step > 0


@pytest.mark.slow  # two iterative runs
def test_an_iterative_evaluate_before_train_collects_every_round_as_without_it(tmp_path):
    """A baseline first (``evaluate()`` then ``train()``): every round is collected (round files,
    the history comparator's snapshots), the same as a run that never evaluated."""
    args = MADPOIterConfig(**{**SMALL_ITER, "num_iterations": 3})
    runs = {}
    for name in ("plain", "baseline-first"):
        torch.manual_seed(3)
        trainer = MADPOIterTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path / name)})
        if name == "baseline-first":
            assert set(trainer.evaluate()) == {"eval/turn_1/reward_mean", "eval/turn_1/expected_return"}
        trainer.train()
        runs[name] = trainer
    files = {name: round_files(tmp_path / name / "preference_replay") for name in runs}
    assert sorted(files["baseline-first"]) == ["iteration_0001.json", "iteration_0002.json", "iteration_0003.json"]
    assert files["baseline-first"] == files["plain"]
    snapshots = {name: sorted(p.name for p in (tmp_path / name / "policy_snapshots").iterdir()) for name in runs}
    assert "iteration_0001" in snapshots["baseline-first"] and snapshots["baseline-first"] == snapshots["plain"]
    assert all(torch.equal(a, b) for a, b in zip(weights(runs["plain"]), weights(runs["baseline-first"])))


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_madpo_trains_saves_hugging_face_folders_and_resumes(tmp_path):
    from transformers import AutoModelForCausalLM

    args = MADPOConfig(**SMALL, num_train_epochs=2)
    torch.manual_seed(0)
    whole = MADPOTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path / "whole")})
    before = whole.evaluate()
    whole.train()
    after = whole.evaluate()
    assert set(before) == set(after) == {"eval/turn_1/reward_mean", "eval/turn_1/expected_return"}
    assert before != after  # the policy changed
    whole.save_model(str(tmp_path / "saved"))
    for index in range(2):
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved" / f"agent_{index}")
        mine = whole.module.team.agents[index]
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), mine.state_dict().values()))
        assert (tmp_path / "saved" / f"agent_{index}" / "tokenizer.json").is_file()

    torch.manual_seed(0)
    first = MADPOTrainer(
        agent_model="embedded",
        args=MADPOConfig(**SMALL, num_train_epochs=1),
        wandb_config={"output_dir": str(tmp_path / "parts")},
    )
    first.train(checkpoint_dir=str(tmp_path / "ckpt"))
    torch.manual_seed(0)
    resumed = MADPOTrainer(agent_model="embedded", args=args, wandb_config={"output_dir": str(tmp_path / "parts")})
    resumed.train(resume_from_checkpoint=str(tmp_path / "ckpt"))  # a folder: its newest checkpoint
    assert resumed.trainer.global_step == whole.trainer.global_step
    assert all(torch.equal(a, b) for a, b in zip(weights(whole), weights(resumed)))


@pytest.mark.slow  # trains long for the everyday tier; MARLHF facade runs stay there in test_scripts (eval_callbacks.py, marlhf_attributes.py)
def test_marlhf_base_and_iterative_run(tmp_path):
    torch.manual_seed(0)
    base = MARLHFTrainer(
        agent_model="embedded",
        args=MARLHFConfig(**SMALL_MARLHF, reference_kl_enabled=True),
        wandb_config={"output_dir": str(tmp_path / "base")},
    )
    before = weights(base)
    base.train()
    assert base.trainer.global_step > 0 and any(not torch.equal(a, b) for a, b in zip(before, weights(base)))
    torch.manual_seed(0)
    iterative = MARLHFIterTrainer(
        agent_model="embedded",
        args=MARLHFIterConfig(**SMALL_MARLHF, num_iterations=2, preference_scoring_reward="learned"),
        wandb_config={"output_dir": str(tmp_path / "iter")},
    )
    iterative.train(checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_total_limit=1)
    assert len(round_files(tmp_path / "iter" / "preference_replay")) == 2
    assert iterative.module.preference_scoring_reward == "reward_model"
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["checkpoint-2"]  # the newest of 2 rounds


@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_marlhf_with_a_critic_model_object(tmp_path):
    from transformers import AutoModelForCausalLM

    critic = AutoModelForCausalLM.from_pretrained(embedded_model_path())
    trainer = MARLHFTrainer(
        agent_model="embedded",
        args=MARLHFConfig(**SMALL_MARLHF, rl_algorithm="maac"),
        critic_model=critic,
        wandb_config={"output_dir": str(tmp_path)},
    )
    assert type(trainer.module.critic).__name__ == "SharedCritic" and trainer.module.critic.model_name is critic
    trainer.train()
    assert trainer.trainer.global_step > 0


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_marlhf_iac_with_one_critic_per_agent(tmp_path):
    from transformers import AutoModelForCausalLM

    critics = [AutoModelForCausalLM.from_pretrained(embedded_model_path()), "embedded"]
    trainer = MARLHFTrainer(
        agent_model="embedded",
        args=MARLHFConfig(**SMALL_MARLHF, rl_algorithm="iac"),
        critics=critics,
        wandb_config={"output_dir": str(tmp_path)},
    )
    assert trainer.module.critic.model_name == critics
    trainer.train()
    assert len(trainer.critics) == 2 and trainer.critics[0] is not critics[0]  # a copy of the object trains
    with pytest.raises(OptionError, match="critics can only be provided when use_separate_critic=True."):
        MARLHFTrainer(
            agent_model="embedded", critics=critics, args=MARLHFConfig(rl_algorithm="iac", use_separate_critic=False)
        )
    with pytest.raises(OptionError, match="critic_model and critics conflict"):
        MARLHFTrainer(
            agent_model="embedded", critic_model="a", critics=["b", "b"], args=MARLHFConfig(rl_algorithm="iac")
        )


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_objects_from_python_work(tmp_path):
    """Model and tokenizer objects, a reward callable with a declared range, formatter callables,
    a reward processor and a ``datasets.Dataset``: what the reference's users pass."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = embedded_model_path()
    agents = [AutoModelForCausalLM.from_pretrained(folder) for _ in range(2)]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    items = datasets.Dataset.from_list([{"topic": t} for t in ("sea", "moon", "tea", "rain")])
    seen = []

    def reward(writer, matcher, batch_items=None):
        seen.append(batch_items[0]["topic"])
        return vowel_length_reward(writer, matcher)

    trainer = MADPOIterTrainer(
        agents=agents,
        tokenizer=tokenizer,
        train_dataset=items,
        eval_dataset=items,
        reward_func=reward,
        reward_processor=lambda value: 2.0 * value,
        formatters=[lambda item: f"topic: {item['topic']}\nwriter:", lambda item: f"topic: {item['topic']}\nmatcher:"],
        args=MADPOIterConfig(**{**SMALL_ITER, "num_iterations": 1}),
        wandb_config={"output_dir": str(tmp_path)},
    )
    trainer.train(temperature=0.7, max_new_tokens=5, do_sample=True)
    assert trainer.module.team.agents[0] is agents[0]
    assert trainer.module.generation_settings.max_new_tokens == 5 and set(seen) == {"sea", "moon", "tea", "rain"}
    record = __import__("json").loads((tmp_path / "preference_replay" / "iteration_0001.json").read_text())["pairs"][0]
    assert record["winner_reward"] == pytest.approx(2.0 * record["raw_rewards"][0])


@pytest.mark.slow
def test_wandb_config_logs_offline(tmp_path, monkeypatch):
    import wandb

    wandb.finish()  # a run an earlier test left open in this process would be reused by the logger
    monkeypatch.setenv("WANDB_MODE", "offline")
    trainer = MADPOTrainer(
        agent_model="embedded",
        args=MADPOConfig(**SMALL, num_train_epochs=1),
        wandb_config={
            "project": "facade",
            "name": "run-1",
            "dir": str(tmp_path),
            "tags": ["t"],
            "config_sections": {"task": {"name": "toy"}},
        },
    )
    trainer.train()
    from lightning.pytorch.loggers import WandbLogger

    assert (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").is_file()
    run = next(logger for logger in trainer.trainer.loggers if isinstance(logger, WandbLogger)).experiment
    assert wandb.run is run  # open after train(), as the reference's: evaluate() logs into it
    trainer.save_model(str(tmp_path / "model"))  # ... and save_model() finishes it
    assert wandb.run is None
    # the run's offline record (where wandb put it: an earlier run in this process may have fixed its root)
    record = settled(Path(run.settings.sync_file)).read_bytes()  # args and config_sections are in it
    assert b"dpo_beta" in record and b"toy" in record and b"facade" in record


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: MADPOTrainer(agent_model="embedded", args=MARLHFConfig()), OptionError, "args must be a MADPOConfig"),
        (
            lambda: MADPOTrainer(agent_model="embedded", num_agents=3),
            OptionError,
            "num_agents must match args.num_agents (the role count). Got 3 and 2.",
        ),
        (lambda: MADPOTrainer(), OptionError, "Either agent_model or agents must be provided."),
        (
            lambda: MADPOTrainer(agent_model=torch.nn.Linear(1, 1)),
            OptionError,
            "agent_model should be a string to create homogeneous agents",
        ),
        (
            lambda: MADPOTrainer(agents=[torch.nn.Linear(1, 1)] * 2, train_dataset=[{"prompt": "a"}], reward_func=len),
            OptionError,
            "Tokenizer(s) must be provided when agents are model objects.",
        ),
        (
            lambda: MADPOTrainer(agent_model="m", train_dataset=[{"prompt": "a"}]),
            OptionError,
            "reward_func must be a callable.",
        ),
        (
            lambda: MADPOTrainer(agent_model="m", train_dataset=[{"prompt": "a"}], reward_func=3),
            OptionError,
            "reward_func must be a callable.",
        ),
        (
            lambda: MADPOTrainer(agent_model="embedded", eval_logger=print),
            OptionError,
            "eval_logger needs eval_aggregator",
        ),
        (
            lambda: MARLHFTrainer(agent_model="embedded", external_transition=print),
            OptionError,
            "external_transition is not supported by MARLHFTrainer",
        ),
        (
            lambda: MADPOTrainer(agent_model="embedded", critic_model="x"),
            TypeError,
            "unexpected keyword argument 'critic_model'",
        ),
        (
            lambda: MARLHFTrainer(agent_model="embedded", critics=["a", "b"], args=MARLHFConfig(rl_algorithm="maac")),
            OptionError,
            "critics length (2) must match 1 critic.",
        ),
        (
            lambda: MADPOTrainer(agent_model="embedded", model_config={"trust_remote_code": True}),
            OptionError,
            "model_config: trust_remote_code not supported",
        ),
        (
            lambda: MADPOTrainer(agent_model="embedded", wandb_config={"projct": "x"}),
            OptionError,
            "wandb_config: unknown key(s) projct",
        ),
        (
            lambda: MADPOIterTrainer(
                agent_model="embedded",
                reward_func=lambda a, b: [0.0],
                args=MADPOIterConfig(log_reward_distribution=True),
            ),
            ValueError,
            "reward_range",
        ),
    ],
)
def test_bad_arguments_are_named_before_any_model_loads(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(checkpoint_interval=0), "checkpoint_interval must be a positive integer."),
        (dict(checkpoint_interval=True), "checkpoint_interval must be a positive integer."),
        (dict(checkpoint_total_limit=0), "checkpoint_total_limit must be a positive integer or None."),
        (dict(checkpoint_total_limit=True), "checkpoint_total_limit must be a positive integer or None."),
        (dict(num_beamz=4), "generation option(s) num_beamz unknown to Hugging Face generate()"),
        (dict(do_sample=False), "do_sample=False is not supported"),
        (
            dict(resume_from_checkpoint="missing-folder"),
            "resume_from_checkpoint: missing-folder holds no checkpoint (no *.ckpt file and no checkpoint-N/",
        ),
    ],
)
def test_bad_train_arguments_are_named(tmp_path, kwargs, message):
    trainer = MADPOTrainer(
        agent_model="embedded", args=MADPOConfig(**SMALL), wandb_config={"output_dir": str(tmp_path)}
    )
    if "resume_from_checkpoint" in kwargs:
        (tmp_path / "missing-folder").mkdir()
        kwargs = {"resume_from_checkpoint": str(tmp_path / "missing-folder")}
        message = message.replace("missing-folder", str(tmp_path / "missing-folder"))
    with pytest.raises(OptionError, match=re.escape(message)):
        trainer.train(**kwargs)
    assert trainer.trainer is None  # refused before a Lightning trainer was built


# ----------------------------------------------------------------------------------------------
# Paths the facade is given: local only, folders where folders go, nothing left behind


@pytest.mark.parametrize("path", ["simplecache::http://127.0.0.1:9/last.ckpt", "https://example.invalid/ckpt"])
def test_resume_from_a_remote_checkpoint_is_refused(tmp_path, path):
    from comlrl_lightning.errors import ConfigurationError

    trainer = MADPOTrainer(
        agent_model="embedded", args=MADPOConfig(num_train_epochs=1), wandb_config={"output_dir": str(tmp_path)}
    )
    with pytest.raises(ConfigurationError, match=r"^resume_from_checkpoint '.*' is remote; only a local checkpoint"):
        trainer.train(resume_from_checkpoint=path)


def test_wrong_types_to_the_seed_api_are_one_line_errors_naming_the_option(tmp_path):
    from comlrl_lightning.errors import ConfigurationTypeError

    args = MADPOIterConfig(**{**SMALL_ITER, "num_iterations": 1})
    for arguments, named in (
        (dict(num_agents="2"), "num_agents must be an integer (got str)"),
        (dict(wandb_config="abc"), "wandb_config must be a mapping (a dict) or None (got str)"),
        (dict(model_config=["bf16"]), "model_config must be a mapping (a dict) or None (got list)"),
    ):
        with pytest.raises(ConfigurationTypeError, match=re.escape(named)):
            MADPOIterTrainer(agent_model="embedded", args=args, **arguments)
    trainer = MADPOIterTrainer(
        agent_model="embedded",
        args=args,
        wandb_config={"output_dir": str(tmp_path)},
        eval_logger=lambda **_: [{}],
        eval_aggregator=lambda metrics, num_turns: None,
    )
    for kwargs, named in (
        (dict(temperature="hot"), "temperature must be a number (got str)"),
        (dict(top_p="1"), "top_p must be a number (got str)"),
        (dict(top_k=2.5j), "top_k must be a number (got complex)"),
    ):
        with pytest.raises(ConfigurationTypeError, match=re.escape(named)):
            trainer.train(**kwargs)
    assert trainer.trainer is None
    with pytest.raises(ConfigurationTypeError, match="eval_aggregator must return a mapping .* returned NoneType"):
        trainer.train()  # the evaluation before the first update
    with pytest.raises(ConfigurationTypeError, match="save_checkpoint output_dir must be a path .*got NoneType"):
        trainer.save_checkpoint(None)
    assert not (Path.cwd() / "None").exists() and not (tmp_path / "None").exists()


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_seed_api_trains_madpo_on_two_turns_with_its_external_transition(tmp_path):
    """``num_turns``, ``discount``, ``early_termination_threshold`` and ``external_transition`` (the
    reference's names) become the task's turns; the run collects and trains on trajectory pairs."""
    from comlrl_lightning.rounds.trajectory_pairs import TrajectoryPair
    from tests.helpers.turn_helpers import reward_feedback

    args = MADPOConfig(**{**SMALL, "num_train_epochs": 1, "num_turns": 2, "discount": 0.5})
    evaluated = []  # the reference's eval callbacks see every turn and num_turns=2

    def eval_logger(agent_completions_turns, batch_items, prompts):
        evaluated.append([len(turns) for turns in agent_completions_turns[0]])
        return [{}]

    trainer = MADPOTrainer(
        agent_model="embedded",
        args=args,
        external_transition=reward_feedback,
        eval_logger=eval_logger,
        eval_aggregator=lambda metrics, num_turns: evaluated.append(num_turns) or {},
        wandb_config={"output_dir": str(tmp_path)},
    )
    turns = trainer.datamodule.task_options.turns
    assert (turns.num_turns, turns.transition, turns.discount) == (2, reward_feedback, 0.5)
    trainer.train()
    pairs = trainer.datamodule.pairs
    assert pairs and all(isinstance(pair, TrajectoryPair) for pair in pairs)
    rewards = pairs[0].winner_turns.rewards
    assert pairs[0].winner_reward == pytest.approx(rewards[0] + 0.5 * rewards[1])
    assert evaluated and evaluated[:2] == [[2] * args.eval_num_samples, 2]
