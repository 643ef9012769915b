"""Objects by import path: the working directory as ``python -m`` has it, and one line when not found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.import_paths import import_object, working_directory_first
from comlrl_lightning.tasks.oracle import resolve_callable

ROOT = Path(__file__).resolve().parents[2]
REWARDS = """
from pathlib import Path

from lightning.pytorch import Callback


def joint_reward(writer, matcher):
    return [float(len(writer[0]) - len(matcher[0]))]


class FitSeen(Callback):  # a part by class_path: jsonargparse imports it from sys.path alone
    def on_fit_end(self, trainer, pl_module):
        Path("fit_seen").write_text("yes")
"""


@pytest.fixture
def own_folder(tmp_path, monkeypatch):
    """A working directory holding my_rewards.py, and a sys.path without it (the console script's)."""
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry and Path(entry).resolve() != tmp_path])
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    yield tmp_path
    sys.modules.pop("my_rewards", None)


def test_a_module_in_the_working_directory_imports_and_the_path_is_left_as_it_was(own_folder):
    before = list(sys.path)
    reward = resolve_callable("my_rewards.joint_reward", "reward_func")
    assert reward(["abc"], ["a"]) == [2.0] and Path(reward.__code__.co_filename).parent == own_folder
    assert sys.path == before


def test_a_module_found_nowhere_names_the_option_the_path_and_where_it_looked(own_folder):
    with pytest.raises(ConfigurationError) as error:
        import_object("their_rewards.joint_reward", "external_transition")
    assert str(error.value) == (
        f"external_transition: cannot import 'their_rewards.joint_reward': no module named 'their_rewards' in the "
        f"working directory ({os.getcwd()}) or on sys.path. Put their_rewards.py (or a their_rewards/ package) in "
        "the folder you run from, or install the package that holds it."
    )


def test_a_missing_name_or_a_failing_import_inside_the_module_is_named_as_such(own_folder):
    with pytest.raises(
        ConfigurationError, match=r"^reward_func: cannot import 'my_rewards\.nope' \(.*my_rewards\.py has no 'nope'\)"
    ):
        import_object("my_rewards.nope", "reward_func")
    (own_folder / "broken_rewards.py").write_text("import a_dependency_that_is_not_installed\n")
    with pytest.raises(ConfigurationError) as error:
        import_object("broken_rewards.joint_reward", "reward_func")
    assert "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'" in str(error.value)
    assert "Put " not in str(error.value)  # the module was found: its own import failed
    with pytest.raises(ConfigurationError, match=r"^formatters: cannot import 'nodots' \(an import path"):
        import_object("nodots", "formatters")


def test_the_command_line_puts_the_working_directory_first_once(tmp_path):
    path = ["/somewhere/bin"]
    working_directory_first(path, str(tmp_path))
    assert path == [str(tmp_path), "/somewhere/bin"]
    working_directory_first(path, str(tmp_path))
    assert path == [str(tmp_path), "/somewhere/bin"]
    blank = ["", "/somewhere/bin"]  # "" is the working directory, as Python reads sys.path
    working_directory_first(blank, os.getcwd())
    assert blank == ["", "/somewhere/bin"]


@pytest.mark.slow  # starts the console script, which trains a few steps
def test_the_console_script_finds_a_reward_module_beside_the_config(tmp_path):
    """``comlrl-lightning`` starts with its own folder first on sys.path: a callback by class_path from
    ``my_rewards`` in the working directory imports only because the command line puts it first. The
    installed script runs ``sys.exit(main())``: its exit status 0 says ``main`` returns ``None`` after a run."""
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    script = Path(sys.executable).parent / "comlrl-lightning"
    tiny = ["--model.init_args.sampling.max_new_tokens", "4", "--data.init_args.preference_num_candidates", "2"]
    tiny += ["--data.init_args.num_train_epochs", "1", "--data.init_args.eval_num_samples", "2"]
    tiny += ["--trainer.enable_progress_bar", "false"]
    command = [str(script), "fit", "--config", str(ROOT / "configs" / "madpo.yaml"), *tiny]
    command += ["--data.init_args.task.reward_func", "my_rewards.joint_reward", "--trainer.default_root_dir", "runs"]
    command += ["--trainer.callbacks+=my_rewards.FitSeen"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment.pop("PYTHONPATH", None)
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "evaluation (after training" in done.stdout + done.stderr
    config = next((tmp_path / "runs").glob("lightning_logs/version_0/config.yaml")).read_text()
    assert "reward_func: my_rewards.joint_reward" in config
    assert (tmp_path / "fit_seen").read_text() == "yes"  # the callback by class_path ran
