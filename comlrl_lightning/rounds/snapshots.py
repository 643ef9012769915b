"""Policy snapshots: the team's weights at the start of each round, for the history comparator.

Layout (the reference's): ``<dir>/initial/agent_{i}`` is the policy before round 0 and
``<dir>/iteration_{r:04d}/agent_{i}`` the policy after round ``r`` (0-based), each written with
``save_pretrained`` (weights + the agent's tokenizer). The policy at the start of round ``r`` is
therefore ``initial`` for ``r = 0`` and ``iteration_{r-1:04d}`` otherwise.

Snapshots are written atomically (a staging folder renamed into place), so a crash never leaves a
half-written snapshot under its final name. The sha256 of every file is taken as it is written and
kept in the index, so a checkpoint carries the snapshots it names (:meth:`PolicySnapshots.assets`)
and a resume puts back, verified, any that are missing (:meth:`PolicySnapshots.load_state_dict`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, cast

from comlrl_lightning.checkpoints.assets import (
    AssetError,
    CheckpointAssets,
    asset,
    checked_name,
    tree_digests,
)
from comlrl_lightning.errors import DataError, MissingRunFileError, RunStateError
from comlrl_lightning.runtime.paths import resolves_inside
from comlrl_lightning.runtime.quiet import transformers_bars_off
from comlrl_lightning.runtime.sharding import full_state_dict
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import OptionError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

_SNAPSHOT_NAME = re.compile(r"initial|iteration_\d{4,}")


def snapshot_name(round_start: int) -> str:
    """Folder name of the policy at the start of round ``round_start`` (0-based)."""
    return "initial" if round_start <= 0 else f"iteration_{round_start - 1:04d}"


def round_start_of(name: str) -> int:
    """Inverse of :func:`snapshot_name`."""
    return 0 if name == "initial" else int(name.rsplit("_", 1)[1]) + 1


class PolicySnapshots:
    """Saves, finds and prunes round-start snapshots of a team.

    Args:
        directory: where snapshots live.
        keep_all: never delete a snapshot (a folder the user chose with ``policy_checkpoint_dir``);
            otherwise :meth:`prune` removes snapshots no later round can use.
    """

    def __init__(self, directory: str | os.PathLike, keep_all: bool = False) -> None:
        self.directory = Path(directory)
        self.keep_all = keep_all
        self.saved: List[str] = []
        self.files: Dict[str, Dict[str, Dict[str, Any]]] = {}  # per snapshot: {file: {"sha256", "size"}}
        self.unrestorable: Dict[str, str] = {}  # snapshots a restored checkpoint names but cannot put back

    def path(self, round_start: int) -> Path:
        return self.directory / snapshot_name(round_start)

    def save(self, round_start: int, team: Team, write: bool = True) -> Path:
        """Write the team's current weights as the snapshot of ``round_start`` (Hugging Face folders).

        Every rank calls it; only the one with ``write`` writes. Sharded agents are gathered into
        whole state dicts first, a collective every rank takes part in.
        """
        target = self.path(round_start)
        if team.synced and team.is_lora:
            raise OptionError(
                "policy snapshots (HistoryComparator, policy_checkpoint_dir) of a LoRA team are not "
                "supported under ModelParallelStrategy; use another comparator, or DDP for this team."
            )
        states = [full_state_dict(agent) for agent in team.agents] if team.synced else None
        if not write:
            return target
        if target.is_symlink() or target.exists() and not target.is_dir():
            raise RunStateError(
                f"{target} is {'a symbolic link' if target.is_symlink() else 'not a folder'}; policy snapshots "
                "are folders the run writes itself, never through a link. Remove it."
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=self.directory))
        try:
            with transformers_bars_off():  # a snapshot every round: no per-file bars
                for index, (agent, tokenizer) in enumerate(zip(team.agents, team.tokenizers)):
                    folder = staging / f"agent_{index}"
                    saving = cast("PreTrainedModel", agent)  # a transformers model, or a LoRA view's save_pretrained
                    if states is None:
                        saving.save_pretrained(folder)
                    else:  # a sharded team's gathered weights (never a LoRA team: refused above)
                        saving.save_pretrained(folder, state_dict=states[index])
                    tokenizer.save_pretrained(folder)
            files = tree_digests(staging)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            if staging.is_dir() and not staging.is_symlink():  # the fresh staging folder, if not renamed
                shutil.rmtree(staging)
        if target.name not in self.saved:
            self.saved.append(target.name)
        self.files[target.name] = files
        return target

    def load(self, round_start: int, tokenizers: list, agent_indices: Optional[List[int]] = None) -> Team:
        """The snapshot of ``round_start`` as a frozen team that shares the actors' tokenizers.

        ``agent_indices`` loads only those agents (one tokenizer each, in that order).
        """
        path = self.path(round_start)
        indices = list(agent_indices) if agent_indices is not None else list(range(len(tokenizers)))
        sources = [str(path / f"agent_{i}") for i in indices]
        missing = [source for source in sources if not (Path(source) / "config.json").exists()]
        if missing:
            raise MissingRunFileError(f"Missing comparator history snapshot agent directories: {missing}")
        team = Team(sources, tokenizers=list(tokenizers))
        team.requires_grad_(False).eval()
        return team

    def prune(self, oldest_needed: int) -> None:
        """Delete snapshots of round starts before ``oldest_needed`` (unless ``keep_all``)."""
        if self.keep_all:
            return
        for name in list(self.saved):
            if round_start_of(name) < oldest_needed:
                _remove_snapshot(self.directory / name)
                self.saved.remove(name)
                self.files.pop(name, None)

    def assets(self) -> List[Dict[str, Any]]:
        """Every file of every indexed snapshot, for a checkpoint to carry (group ``policy_snapshots``)."""
        return [
            asset("policy_snapshots", f"{name}/{file}", self.directory / name / file, info["sha256"], info["size"])
            for name in self.saved
            for file, info in self.files.get(name, {}).items()
        ]

    def state_dict(self) -> Dict[str, Any]:
        return {"saved": list(self.saved), "files": {name: dict(files) for name, files in self.files.items()}}

    def load_state_dict(self, state: Dict[str, Any], assets: Optional[CheckpointAssets] = None) -> None:
        """Restore the index, putting back from ``assets`` every file of an indexed snapshot that is
        missing from the folder or differs from its recorded sha256.

        A checkpoint is data: every name must be a snapshot of this folder (``initial`` or
        ``iteration_NNNN``, since :meth:`prune` deletes what the index names) and every file a plain
        relative path inside it; a snapshot that is a link leading out of the folder is dropped with a
        warning naming it (never loaded, restored into or pruned).
        """
        files = {str(name): dict(listing) for name, listing in (state.get("files") or {}).items()}
        for name in list(state["saved"]) + list(files):
            if not _SNAPSHOT_NAME.fullmatch(str(name)):
                raise DataError(
                    f"The checkpoint's snapshot index names {str(name)!r}, which is not a policy snapshot "
                    f"of {self.directory}; refusing to use (or prune) it."
                )
        for listing in files.values():
            for file in listing:
                checked_name(file)
        # Snapshots pruned after a checkpoint without assets was written are simply gone;
        # require() checks the ones a resumed run actually needs.
        self.saved, self.unrestorable = [], {}
        for name in [str(name) for name in state["saved"]]:
            if (self.directory / name).exists() and not resolves_inside(name, self.directory):
                warnings.warn(
                    f"Policy snapshot {self.directory / name} leads outside {self.directory} (a link); dropped from "
                    "the snapshot index, never loaded or pruned.",
                    stacklevel=2,
                )
                continue
            try:
                for file, info in files.get(name, {}).items():
                    if assets is not None:
                        assets.ensure("policy_snapshots", f"{name}/{file}", str(info["sha256"]), self.directory)
            except AssetError as error:  # an error only if a resumed run needs it (require)
                self.unrestorable[name] = str(error)
                continue
            if (self.directory / name).is_dir():
                self.saved.append(name)
        self.files = {name: files[name] for name in self.saved if name in files}

    def require(self, round_start: int) -> None:
        """Fail now, naming the folder, if the snapshot of ``round_start`` is missing."""
        path = self.path(round_start)
        if path.name in self.unrestorable:
            raise MissingRunFileError(f"Policy snapshot {path} is needed to resume: {self.unrestorable[path.name]}")
        if not path.is_dir() or not resolves_inside(path.name, self.directory):
            raise MissingRunFileError(
                f"Policy snapshot {path} is missing: the history comparator needs it to resume. "
                "Set policy_checkpoint_dir to keep every snapshot."
            )


def _remove_snapshot(path: Path) -> None:
    """Remove a snapshot folder of the run: a link in its place goes as a link (its target stays),
    a folder as a whole; a failure is raised, never ignored."""
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
