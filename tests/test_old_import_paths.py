"""The import paths the package had before it was split by job (issue 49) still name the same objects.

A user's configs, the ``config.yaml`` of their saved runs and their checkpoints' hyperparameters hold
class paths as they were written (jsonargparse keeps a ``class_path`` as given; a part passed as an
object is saved as its class's module and name): those paths keep resolving, quietly, to the classes
the new paths name, and a resume does not count an old path and a new one for the same class as a
changed option."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from comlrl_lightning.checkpoints.resume_rule import option_changes

REPO = Path(__file__).resolve().parents[1]

CONFIG_CLASS_PATHS = [
    "comlrl_lightning.IterativePreferenceDataModule",
    "comlrl_lightning.MADPOModule",
    "comlrl_lightning.MARLHFModule",
    "comlrl_lightning.PreferenceDataModule",
    "comlrl_lightning.RewardModelModule",
    "comlrl_lightning.RoundFilesDataModule",
    "comlrl_lightning.callbacks.ParameterSummary",
    "comlrl_lightning.callbacks.ResumableCheckpoint",
    "comlrl_lightning.callbacks.RewardCurvePlot",
    "comlrl_lightning.callbacks.SamplesLog",
    "comlrl_lightning.comparators.ApiComparator",
    "comlrl_lightning.comparators.CentralizedComparator",
    "comlrl_lightning.comparators.CurrentComparator",
    "comlrl_lightning.comparators.HistoryComparator",
    "comlrl_lightning.data.CurrentReplay",
    "comlrl_lightning.data.DelimitedAdapter",
    "comlrl_lightning.data.LambdaDecayReplay",
    "comlrl_lightning.generation.HFGenerator",
    "comlrl_lightning.generation.VLLMGenerator",
    "comlrl_lightning.models.IndividualCritics",
    "comlrl_lightning.models.SharedCritic",
    "comlrl_lightning.modules.Centralized",
    "comlrl_lightning.tasks.coding.CodingEvaluationLog",
    "comlrl_lightning.tasks.coding.HumanEval",
    "comlrl_lightning.utils.reward_processor.Shift",
]
"""Every ``class_path`` of ``configs/`` at commit 49d4374, the last before the split."""

DOCUMENTED_PATHS = [
    "comlrl_lightning.data.AllHistoryReplay",
    "comlrl_lightning.data.CentralizedAdapter",
    "comlrl_lightning.data.CentralizedComparatorParseError",
    "comlrl_lightning.data.HFDataset",
    "comlrl_lightning.data.ItemSet",
    "comlrl_lightning.data.NearestKReplay",
    "comlrl_lightning.data.Oracle",
    "comlrl_lightning.data.PreferencePair",
    "comlrl_lightning.data.ReplayRule",
    "comlrl_lightning.data.TaggedCentralizedComparatorAdapter",
    "comlrl_lightning.data.Task",
    "comlrl_lightning.data.TaskOptions",
    "comlrl_lightning.data.contract.team_side",
    "comlrl_lightning.data.oracle.resolve_reward_range",
    "comlrl_lightning.data.replay.LambdaDecayReplay",
    "comlrl_lightning.data.replay.lambda_decay_weights",
    "comlrl_lightning.data.task.Task",
    "comlrl_lightning.data.task.load_items",
    "comlrl_lightning.data.task.resolve_formatter",
    "comlrl_lightning.data.task.default_formatter",
    "comlrl_lightning.data.turns.Turns",
    "comlrl_lightning.data.centralized_task.DelimitedAdapter",
    "comlrl_lightning.data.item_sources.HFDataset",
    "comlrl_lightning.models.critics.IndividualCritics",
    "comlrl_lightning.models.critics.SharedCritic",
    "comlrl_lightning.models.joint_reward.JointRewardModel",
    "comlrl_lightning.models.RewardModelOptions",
    "comlrl_lightning.modules.resume_rule.apply_resume_rule",
    "comlrl_lightning.runtime.checkpoint_folders.save_checkpoint_folder",
    "comlrl_lightning.runtime.checkpoint_io.AtomicCheckpointIO",
    "comlrl_lightning.runtime.checkpoint_io.AtomicModelParallelStrategy",
    "comlrl_lightning.runtime.checkpoint_lineage.lineage_of",
    "comlrl_lightning.runtime.checkpoint_metadata.read_checkpoint_metadata",
    "comlrl_lightning.utils.RewardProcessors",
    "comlrl_lightning.utils.markdown_table",
    "comlrl_lightning.utils.checkpoint.read_checkpoint_metadata",
    "comlrl_lightning.utils.reward_processor.RewardProcessors",
    "comlrl_lightning.utils.reward_utils.set_reward_range",
]
"""Objects the docs, the README and the notebooks named at 49d4374 (modules by one of their names), and
the modules a checkpoint's hyperparameters could name (a part's class by its defining module)."""

MOVED = {
    "comlrl_lightning.data.replay.CurrentReplay": "comlrl_lightning.rounds.CurrentReplay",
    "comlrl_lightning.data.LambdaDecayReplay": "comlrl_lightning.rounds.LambdaDecayReplay",
    "comlrl_lightning.data.DelimitedAdapter": "comlrl_lightning.tasks.DelimitedAdapter",
    "comlrl_lightning.data.contract.TeamSide": "comlrl_lightning.contracts.TeamSide",
    "comlrl_lightning.data.loaders.ResumablePairLoader": "comlrl_lightning.datamodules.loaders.ResumablePairLoader",
    "comlrl_lightning.models.IndividualCritics": "comlrl_lightning.critics.IndividualCritics",
    "comlrl_lightning.models.joint_reward.RewardScorer": "comlrl_lightning.joint_reward.RewardScorer",
    "comlrl_lightning.utils.reward_processor.Shift": "comlrl_lightning.trainers.reward_processor.Shift",
    "comlrl_lightning.runtime.checkpoint_assets.CheckpointAssets": "comlrl_lightning.checkpoints.assets.CheckpointAssets",
}
"""An old path and the new one of each kind of move: the same object."""


def resolve(path: str) -> Any:
    """The object at a dotted ``path``: its longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            found = getattr(found, name)
        return found
    raise ModuleNotFoundError(path)


@pytest.mark.parametrize("path", CONFIG_CLASS_PATHS)
def test_every_class_path_of_the_configs_before_the_split_still_names_a_class(path):
    assert isinstance(resolve(path), type)


@pytest.mark.parametrize("path", DOCUMENTED_PATHS)
def test_every_documented_path_before_the_split_still_resolves(path):
    assert callable(resolve(path)) or isinstance(resolve(path), type)


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_path_names_the_object_of_its_new_path(old, new):
    assert resolve(old) is resolve(new)


def test_a_missing_name_under_an_old_path_fails():
    with pytest.raises(AttributeError):
        resolve("comlrl_lightning.data.replay.NoSuchReplay")


@pytest.mark.parametrize(
    "saved, given, changed",
    [
        ("comlrl_lightning.models.SharedCritic", "comlrl_lightning.critics.SharedCritic", False),
        ("comlrl_lightning.data.centralized_task.DelimitedAdapter", "comlrl_lightning.tasks.DelimitedAdapter", False),
        ("comlrl_lightning.models.SharedCritic", "comlrl_lightning.critics.IndividualCritics", True),
        ("comlrl_lightning.data.NoSuchClass", "comlrl_lightning.data.NoSuchClass", False),
        ("comlrl_lightning.data.NoSuchClass", "comlrl_lightning.rounds.NoSuchClass", True),
    ],
)
def test_a_resume_counts_an_old_and_a_new_path_of_one_class_as_one_option(saved, given, changed):
    name = "model.collaboration.adapter.class_path"  # fixed by the resume rule: a change is refused
    assert bool(option_changes({name: saved}, {name: given})) is changed


@pytest.mark.slow  # a fresh interpreter importing torch and Lightning
def test_the_old_paths_import_without_a_warning():
    modules = sorted({".".join(p.split(".")[:-1]) for p in DOCUMENTED_PATHS if p.count(".") > 2})
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        f"    for name in {modules!r}:\n"
        "        importlib.import_module(name)\n"
        "print([str(w.message) for w in seen if 'comlrl_lightning' in w.filename])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
