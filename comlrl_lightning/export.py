"""``comlrl-lightning export``: a trained team as standard Hugging Face folders, one per agent.

``export_team("run/lightning_logs/version_0/checkpoints/last.ckpt", "team/")`` reads the checkpoint
as plain data (never running code from it), rebuilds the team its hyperparameters describe, loads
the weights, and writes ``team/agent_0``, ``team/agent_1``... Each folder loads with plain
``transformers`` (``AutoModelForCausalLM.from_pretrained``), or for a LoRA team's adapters with
``peft`` (``PeftModel.from_pretrained(base, folder)`` or ``AutoPeftModelForCausalLM``); a LoRA team
is written as adapters (the default) or, with ``merge_lora``, as full models with the adapter merged in.
Each folder and the top one get a ``README.md`` model card naming the run, its options and its last
evaluation recorded at or before the checkpoint's step; ``team/hparams.json`` holds the run's
options as the checkpoint recorded them.

The whole folder is written beside its final name and renamed into place: an export that stops
halfway leaves nothing under ``out_dir``. An existing ``out_dir`` that is not an empty folder is refused.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from comlrl_lightning.callbacks.csv_logger import log_folder
from comlrl_lightning.checkpoints.io import read_checkpoint
from comlrl_lightning.checkpoints.metadata import (
    CheckpointProgress,
    checkpoint_progress,
    resolve_checkpoint,
    run_record,
)
from comlrl_lightning.checkpoints.resume_rule import TEAM_KEY
from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.runtime.files import fsync_directory, read_bounded
from comlrl_lightning.runtime.hparams import summarized
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.team.options import TeamOptions
from comlrl_lightning.team.saving import LoraLayout, write_agent_folder
from comlrl_lightning.team.team import Team

TEAM_PREFIX = "_team."
"""Where a team module's state dict keeps the team's weights."""

METRICS_LIMIT = 256 * 1024 * 1024
"""The most bytes of a run's ``metrics.csv`` read for the model card."""


@dataclass(frozen=True)
class TrainedRun:
    """What a checkpoint says about the run that wrote it.

    Attributes:
        checkpoint: the checkpoint file read.
        trained_by: the class that trained the team (the module's class path, else the trainer class the
            run record names: a seed-API trainer such as ``MADPOTrainer``).
        model: the module's hyperparameters (``_class_path`` and its options, ``team`` among them).
        data: the data module's hyperparameters (lists longer than 16 items summarised).
        centralized: whether one model writes every role.
        record: the run record (run id, W&B run, CSV log), ``None`` without one.
        progress: epochs, updates and batches done.
        evaluation: the last evaluation logged at or before the checkpoint's step, by metric name.
        evaluation_step: that evaluation's step in ``metrics.csv`` (``None`` without one).
    """

    checkpoint: Path
    trained_by: str
    model: Dict[str, Any]
    data: Dict[str, Any]
    centralized: bool
    record: Optional[Dict[str, Any]]
    progress: CheckpointProgress
    evaluation: Dict[str, float] = field(default_factory=dict)
    evaluation_step: Optional[int] = None

    @property
    def algorithm(self) -> str:
        """:attr:`trained_by` without its module path (``MADPOModule``...)."""
        return self.trained_by.rsplit(".", 1)[-1]

    @property
    def run_id(self) -> Optional[str]:
        return (self.record or {}).get("run_id")


def trained_run(checkpoint: Dict[str, Any], path: Path) -> TrainedRun:
    """The :class:`TrainedRun` of a checkpoint read from ``path`` (its evaluation from the run's
    ``metrics.csv`` where the run record names one that is still there)."""
    record = run_record(checkpoint, path)
    progress = checkpoint_progress(checkpoint, path)
    layout = checkpoint.get(TEAM_KEY) or {}
    step, evaluation = last_evaluation(metrics_rows((record or {}).get("logs")), max(progress.step - 1, 0))
    model = dict(checkpoint.get("hyper_parameters") or {})
    trained_by = model.get("_class_path") or layout.get("class") or (record or {}).get("trainer_class")
    return TrainedRun(
        checkpoint=path,
        trained_by=str(trained_by or "a class not recorded"),
        model=model,
        data=summarized(dict(checkpoint.get("datamodule_hyper_parameters") or {})),
        centralized=layout.get("collaboration") == "centralized",
        record=record,
        progress=progress,
        evaluation=evaluation,
        evaluation_step=step,
    )


def metrics_rows(logs: Optional[Dict[str, Any]]) -> List[Dict[str, str]]:
    """The rows of the ``metrics.csv`` a run record's CSV log names (none when it names none, or the
    file is gone: a log folder moved away leaves the card without numbers, not the export failed)."""
    if not logs:
        return []
    path = log_folder(logs["save_dir"], logs.get("name"), logs["version"]) / "metrics.csv"
    try:
        text = read_bounded(path, METRICS_LIMIT, "the run's metrics log").decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return list(csv.DictReader(io.StringIO(text, newline="")))


def last_evaluation(rows: Sequence[Dict[str, str]], last_step: int) -> Tuple[Optional[int], Dict[str, float]]:
    """The last evaluation among CSV ``rows`` logged at a step <= ``last_step``: its step and its
    ``eval/...`` values. An evaluation is logged at the index of the last update it saw (updates - 1),
    so for a checkpoint after ``n`` updates ``last_step`` is ``n - 1``. Consecutive rows of one step
    whose metrics do not repeat are one evaluation (the loggers may split it over rows); a metric seen
    again starts the next one (two evaluations at step 0: before training and after the first update)."""
    found_step: Optional[int] = None
    found: Dict[str, float] = {}
    for row in rows:
        values = {
            key: float(value) for key, value in row.items() if key.startswith("eval/") and value not in ("", None)
        }
        step = _step(row.get("step"))
        if not values or step is None or step > last_step:
            continue
        if step != found_step or set(values) & set(found):
            found_step, found = step, {}
        found.update(values)
    return found_step, dict(sorted(found.items()))


def _step(text: Optional[str]) -> Optional[int]:
    try:
        return int(float(text)) if text not in (None, "") else None
    except ValueError:
        return None


def team_options(model: Dict[str, Any], path: Path) -> TeamOptions:
    """The :class:`~comlrl_lightning.team.TeamOptions` a module's hyperparameters record, parsed as
    the command line parses them; a checkpoint whose team was given as objects (models or
    tokenizers made in Python, which no checkpoint records) is refused, naming the seed API's
    ``save_model`` instead."""
    from jsonargparse import ArgumentParser

    team = model.get("team")
    if not isinstance(team, dict) or not {"agent_model", "agents", "tokenizers"} <= set(team):
        raise DataError(
            f"ckpt_path {path}: its hyperparameters do not say which models the team is made of (given as "
            "objects in Python, or not a team module's checkpoint); save such a team with the seed API's "
            "save_model, or the team's agents' save_pretrained."
        )
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--team", type=TeamOptions)
    with warnings.catch_warnings():  # as the command line: the loftq_config jsonargparse fills in
        warnings.filterwarnings("ignore", message="`loftq_config` specified but will be ignored")
        return parser.instantiate(parser.parse_object({"team": team})).team


def rebuild_team(checkpoint: Dict[str, Any], run: TrainedRun) -> Team:
    """The team of ``checkpoint``: built from its recorded options, with its weights loaded (every
    one of the team's weights must be there, and nothing else under the team's prefix)."""
    options = team_options(run.model, run.checkpoint)
    sources = options.sources(run.centralized)
    team = options.build(sources, options.load_tokenizers(sources))
    weights = {k[len(TEAM_PREFIX) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(TEAM_PREFIX)}
    missing, unexpected = team.load_state_dict(weights, strict=False)
    if missing or unexpected:
        names = ", ".join((missing or unexpected)[:3])
        raise DataError(
            f"ckpt_path {run.checkpoint}: its team weights do not fit the team its options describe "
            f"({len(missing)} missing, {len(unexpected)} unexpected: {names}...)."
        )
    return team.eval()


def check_out_dir(out_dir: str) -> Path:
    """``out_dir`` as the export's target: a local path that does not exist yet or is an empty folder;
    anything else (a file, a link, a folder with files) is refused in one line."""
    target = Path(require_local(out_dir, "out_dir", "a local folder")).expanduser()
    if target.is_symlink() or target.exists() and not target.is_dir():
        raise ConfigurationError(f"out_dir {target} is not a folder; give export a new folder.")
    if target.is_dir() and any(target.iterdir()):
        raise ConfigurationError(f"out_dir {target} is not empty; give export a new or empty folder.")
    return target


def export_team(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, merge_lora: bool = False) -> Path:
    """Write the team of ``checkpoint`` (a checkpoint file, or a folder: its newest) to ``out_dir`` as
    one Hugging Face folder per agent (``agent_{i}``) with a model card each, a card for the team
    (``README.md``) and the run's options (``hparams.json``); returns ``out_dir``.

    A LoRA team's agents are written as peft adapter folders naming their base, or with
    ``merge_lora`` as full models with the adapter merged in; full-model agents as full models.

    Raises:
        ConfigurationError: ``out_dir`` exists and is not an empty folder.
        DataError: the checkpoint is not a team module's Lightning checkpoint, or its weights do not
            fit the team its options describe.
    """
    target = check_out_dir(str(out_dir))
    path = resolve_checkpoint(require_local(str(checkpoint), "ckpt_path", "a local checkpoint file"))
    if path.is_dir():
        raise ConfigurationError(
            f"ckpt_path {path} is a sharded (distributed) checkpoint folder; export reads a single-file "
            "checkpoint (ModelParallelStrategy with save_distributed_checkpoint: false)."
        )
    loaded = read_checkpoint(path)
    run = trained_run(loaded, path)
    team = rebuild_team(loaded, run)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write_team(team, run, staging, merge_lora)
        if target.is_dir():  # empty (checked above): the rename needs the name free
            target.rmdir()
        os.rename(staging, target)
        fsync_directory(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def write_team(team: Team, run: TrainedRun, folder: Path, merge_lora: bool) -> None:
    """Write ``team`` into the existing empty ``folder``: ``agent_{i}`` folders with their cards, the
    team's card (``README.md``) and the run's options (``hparams.json``)."""
    layout: LoraLayout = "merged" if merge_lora else "adapter"
    written_as = "adapter" if team.is_lora and not merge_lora else "model"
    for index, (agent, tokenizer) in enumerate(zip(team.agents, team.tokenizers)):
        write_agent_folder(agent, tokenizer, folder / f"agent_{index}", layout)
        card = agent_card(run, index, written_as, _base_of(agent))
        (folder / f"agent_{index}" / "README.md").write_text(card, encoding="utf-8")
    (folder / "README.md").write_text(team_card(run, team.num_agents, team.is_lora, merge_lora), encoding="utf-8")
    options = json.dumps({"model": run.model, "data": run.data}, indent=2, default=str)
    (folder / "hparams.json").write_text(options + "\n", encoding="utf-8")


def _base_of(agent: Any) -> Optional[str]:
    """The model a LoRA agent's adapter sits on (its folder or hub id), ``None`` for a full model."""
    base = agent.get_base_model() if hasattr(agent, "get_base_model") and hasattr(agent, "adapter") else None
    return None if base is None else str(base.config.name_or_path)


def _run_lines(run: TrainedRun) -> List[str]:
    """The card's lines naming the run: algorithm, run id, checkpoint, progress, log."""
    logs = (run.record or {}).get("logs")
    where = log_folder(logs["save_dir"], logs.get("name"), logs["version"]) if logs else None
    lines = [
        f"- trained by: `{run.trained_by}` (comlrl-lightning)",
        f"- run id: `{run.run_id or 'not recorded'}`",
        f"- checkpoint: `{run.checkpoint}`",
        f"- progress: epochs {run.progress.epochs}, updates {run.progress.step}",
    ]
    if where is not None:
        lines.append(f"- the run's log folder (metrics.csv; config.yaml and plots from the command line): `{where}`")
    return lines


def _evaluation_lines(run: TrainedRun) -> List[str]:
    if not run.evaluation:
        return ["No evaluation recorded at or before this checkpoint (no metrics.csv of the run found)."]
    lines = [f"Last evaluation logged at or before this checkpoint (metrics.csv, step {run.evaluation_step}):", ""]
    lines += ["| metric | value |", "|---|---|"] + [
        f"| `{key}` | {value:.4f} |" for key, value in run.evaluation.items()
    ]
    return lines


def _sampling_line(run: TrainedRun) -> str:
    sampling = run.model.get("sampling") or {}
    shown = {k: sampling[k] for k in ("max_new_tokens", "temperature", "top_p", "top_k") if sampling.get(k) is not None}
    words = ", ".join(f"{key}={value}" for key, value in shown.items())
    return f"The run sampled with `generate(do_sample=True, {words})`." if words else ""


def agent_card(run: TrainedRun, index: int, written_as: str, base: Optional[str]) -> str:
    """The ``README.md`` of agent ``index``'s folder: how to load it, the run, its evaluation."""
    if written_as == "adapter":
        library, load = (
            "peft",
            [
                "from peft import AutoPeftModelForCausalLM",
                "from transformers import AutoTokenizer",
                "",
                'model = AutoPeftModelForCausalLM.from_pretrained("<this folder>")',
                'tokenizer = AutoTokenizer.from_pretrained("<this folder>")',
            ],
        )
        what = f"A LoRA adapter (peft) on `{base}`: agent {index} of a team of cooperating agents."
    else:
        library, load = (
            "transformers",
            [
                "from transformers import AutoModelForCausalLM, AutoTokenizer",
                "",
                'model = AutoModelForCausalLM.from_pretrained("<this folder>")',
                'tokenizer = AutoTokenizer.from_pretrained("<this folder>")',
            ],
        )
        merged = f" (its LoRA adapter merged into `{base}`)" if base else ""
        what = f"A causal language model{merged}: agent {index} of a team of cooperating agents."
    front = ["---", f"library_name: {library}", "tags: [comlrl-lightning, multi-agent]", "---", ""]
    body = [f"# agent_{index}", "", what, "", "## Load it", "", "```python", *load, "```", ""]
    sampling = _sampling_line(run)
    body += [sampling, ""] if sampling else []
    body += ["## The run", "", *_run_lines(run), "", "## Evaluation", "", *_evaluation_lines(run), ""]
    return "\n".join(front + body)


def team_card(run: TrainedRun, num_agents: int, lora: bool, merged: bool) -> str:
    """The top ``README.md``: the team, how its folders were written, the run, its evaluation, options."""
    form = "LoRA adapters merged into full models" if lora and merged else "LoRA adapters" if lora else "full models"
    layout = "one model writing every role" if run.centralized else "one model per agent"
    lines = ["---", "tags: [comlrl-lightning, multi-agent]", "---", "", f"# A team of {num_agents} agent(s)", ""]
    lines += [f"Trained with comlrl-lightning ({run.algorithm}, {layout}); written as {form}:"]
    lines += [""] + [f"- `agent_{i}/`" for i in range(num_agents)] + [""]
    lines += ["## The run", "", *_run_lines(run), "", "## Evaluation", "", *_evaluation_lines(run), ""]
    options = json.dumps(run.model, indent=2, default=str)
    lines += [
        "## Options",
        "",
        "The module's options as the checkpoint records them (with the data's: `hparams.json`):",
    ]
    return "\n".join(lines + ["", "```json", options, "```", ""])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="comlrl-lightning export",
        description="Write a trained team as Hugging Face folders (agent_0, agent_1, ...), each with a model card.",
    )
    parser.add_argument(
        "--ckpt_path",
        required=True,
        help="a checkpoint a run wrote (a .ckpt file), or a folder of them (the newest is taken)",
    )
    parser.add_argument("--out_dir", required=True, help="a new (or empty) folder to write the team into")
    parser.add_argument(
        "--merge_lora",
        action="store_true",
        help="a LoRA team: write full models with each agent's adapter merged in (default: peft adapter folders)",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``comlrl-lightning export --ckpt_path CKPT --out_dir DIR [--merge_lora]``; returns the exit status.
    A missing checkpoint or a refused folder is a :class:`~comlrl_lightning.errors.ComlrlError`
    (the command line prints it as one ``error:`` line)."""
    options = build_parser().parse_args(argv)
    written = export_team(options.ckpt_path, options.out_dir, merge_lora=options.merge_lora)
    print(f"exported the team to {written}: " + ", ".join(sorted(p.name for p in written.glob("agent_*"))))
    return 0


__all__ = ["TrainedRun", "agent_card", "check_out_dir", "export_team", "last_evaluation", "main", "team_card"]
