"""PreferenceDataModule: collection, the no-pair case, and exact resume of a base run."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import TINY_DATA, TINY_MODEL, tiny_task, tiny_trainer


def constant_reward(writer, matcher):
    return [0.5]


def _weights(module):
    return {k: v.detach().clone() for k, v in module.team.state_dict().items()}


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_collection_builds_pairs_with_token_ids_and_records(tiny_run):
    module, datamodule, trainer = tiny_run()
    trainer.fit(module, datamodule)
    pairs = datamodule.pairs
    assert 0 < len(pairs) <= len(datamodule.train_items) * TINY_DATA["preference_pairs_per_sample"]
    for pair in pairs[:5]:
        assert pair.winner_reward > pair.loser_reward
        assert len(pair.prompt_ids) == len(pair.winner_ids) == 2
        tokenizer = module.team.tokenizers[0]
        assert tokenizer.decode(pair.winner_ids[0], skip_special_tokens=True) == pair.winner_completions[0]
        assert tokenizer.decode(pair.prompt_ids[0]) == pair.prompts[0]
    # every item contributes its K candidates to the mean stored on its pairs
    scores = datamodule.last_collection.scores
    assert all(len(s) == TINY_DATA["preference_num_candidates"] for s in scores)
    assert trainer.global_step == TINY_DATA["num_train_epochs"] * -(-len(pairs) // TINY_DATA["train_batch_size"])


def test_no_non_tied_pair_ends_training_without_an_update(tiny_run, recwarn):
    module, datamodule, trainer = tiny_run(data=dict(task=tiny_task(reward_func=constant_reward)))
    before = _weights(module)
    trainer.fit(module, datamodule)
    assert datamodule.pairs == []
    assert trainer.global_step == 0
    after = _weights(module)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert any("no non-tied preference pairs" in str(w.message) for w in recwarn)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The tiny base run of 3 epochs, uninterrupted: what every interrupted and resumed run must equal."""
    from comlrl_lightning import MADPOModule, PreferenceDataModule

    module, datamodule = MADPOModule(**TINY_MODEL), PreferenceDataModule(**TINY_DATA)
    trainer = tiny_trainer(tmp_path_factory.mktemp("uninterrupted"), max_epochs=3)
    trainer.fit(module, datamodule)
    batches = -(-len(datamodule.pairs) // 8)  # batches of 8 pairs per epoch
    return dict(weights=_weights(module), steps=trainer.global_step, batches=batches)


@pytest.mark.parametrize(
    "checkpoint_options, pick",
    [
        (dict(every_n_epochs=1, save_on_train_epoch_end=True), "epoch=0-step={batches}.ckpt"),  # end of epoch 1
        (dict(every_n_train_steps=3), "epoch=0-step=3.ckpt"),  # mid-epoch, after a training step
        (dict(every_n_epochs=1, save_on_train_epoch_end=False), "epoch=0-step=4.ckpt"),  # mid-epoch, after validation
    ],
)
@pytest.mark.slow  # trains and resumes: the everyday tier stays under 2 minutes
def test_interrupted_and_resumed_run_equals_uninterrupted_run(
    uninterrupted, tiny_run, tmp_path, checkpoint_options, pick
):
    from lightning.pytorch.callbacks import ModelCheckpoint

    uninterrupted, steps, batches = uninterrupted["weights"], uninterrupted["steps"], uninterrupted["batches"]
    assert steps == 3 * batches and batches > 4
    pick = pick.format(batches=batches)

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, **checkpoint_options)
    module, datamodule, trainer = tiny_run(trainer=dict(max_epochs=1, callbacks=[checkpoint]))
    trainer.fit(module, datamodule)
    first_pairs = [p.to_record() for p in datamodule.pairs]
    path = tmp_path / "ckpt" / pick
    assert path.exists(), sorted(p.name for p in (tmp_path / "ckpt").iterdir())

    module, datamodule, trainer = tiny_run(trainer=dict(max_epochs=3))
    trainer.fit(module, datamodule, ckpt_path=str(path))
    assert [p.to_record() for p in datamodule.pairs] == first_pairs  # restored, not recollected
    assert trainer.global_step == steps
    resumed = _weights(module)
    for key in uninterrupted:
        torch.testing.assert_close(resumed[key], uninterrupted[key], rtol=0, atol=0)
