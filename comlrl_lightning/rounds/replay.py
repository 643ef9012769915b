"""Round files, the replay buffer of the iterative trainers, and the replay rules.

Every round writes ``<directory>/iteration_{ν:04d}.json`` (``ν`` 1-based) holding
``{"iteration": ν, "num_pairs": n, "pairs": [records]}``, serialised with
``json.dumps(..., ensure_ascii=False)`` as UTF-8 without indentation; records are
:meth:`comlrl_lightning.rounds.PreferencePair.to_record` dicts. The file is written for every
round, also an empty one (``num_pairs`` 0).

Atomicity: the bytes go to ``<path>.tmp`` in the same folder, are flushed and fsynced, and only
then ``os.replace``-d onto the final name (then the folder is fsynced where the OS allows it). A
crash therefore leaves either the previous file or the complete new one, never a torn file.

The buffer samples only from its *index*: the list of non-empty rounds this run wrote (or a
checkpoint restored), each with the sha256 of its bytes. Files that merely sit in the folder,
e.g. from an older run pointed at the same directory, are never imported: history comes only
from a checkpoint, and every indexed file is verified on resume and on every read, so a moved,
edited or truncated file fails loudly instead of silently changing what is trained on (unless the
checkpoint carries the file: :meth:`ReplayBuffer.assets`, then a resume puts it back, verified).

All randomness comes from the ``random.Random`` the caller passes in (the reference draws from the
unseeded global ``random``), so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from jsonargparse.typing import ClosedUnitInterval, PositiveInt

from comlrl_lightning.checkpoints.assets import AssetError, CheckpointAssets, asset
from comlrl_lightning.rounds.round_records import (
    RecordIndex,
    ReplayIndexError,
    decode_round,
    encode_round,
    read_round_file,
)
from comlrl_lightning.runtime.files import write_atomically
from comlrl_lightning.runtime.paths import resolves_inside
from comlrl_lightning.validation import at_least, require


def lambda_decay_weights(num_rounds: int, lam: float) -> List[float]:
    """Shard weights for ``lambda_decay``, listed OLDEST first (as in the reference).

    With ``K_d = num_rounds`` and age ``a = 0`` for the newest shard::

        w_a = (1-λ) λ^a / Σ_{b=0}^{K_d-1} (1-λ) λ^b  =  (1-λ) λ^a / (1 - λ^{K_d})

    ``λ = 1`` gives the uniform ``1/K_d``; ``λ = 0`` gives 1 to the newest shard (``0^0 = 1``) and 0
    to the rest; a normaliser ``<= 0`` falls back to newest-only. Examples for ``K_d = 4``:
    ``λ = 0.5 → [0.0667, 0.1333, 0.2667, 0.5333]``, ``λ = 0.8 → [0.1734, 0.2168, 0.2710, 0.3388]``.
    """
    if num_rounds <= 0:
        return []
    if lam == 1.0:
        return [1.0 / num_rounds] * num_rounds
    by_age = [(1.0 - lam) * lam**age for age in range(num_rounds)]
    total = sum(by_age)
    if not total > 0.0:
        by_age, total = [1.0] + [0.0] * (num_rounds - 1), 1.0
    return [weight / total for weight in reversed(by_age)]


class ReplayRule:
    """Which indexed rounds a round's training draw comes from, with what weights and how many pairs.

    Chosen in the config as ``data.init_args.replay`` (``class_path`` + ``init_args``); subclass it
    for your own rule (override :meth:`eligible` and :meth:`weights`).

    Args:
        sample_size: pairs drawn per round (``None``: this round's pair count, else the newest
            non-empty round's).
    """

    uses_history = True
    """``False``: the round trains on its own pairs directly, without reading any round file."""

    def __init__(self, sample_size: Optional[PositiveInt] = None) -> None:
        at_least("sample_size", sample_size, 1, allow_none=True)
        self.sample_size = sample_size

    def eligible(self, shards: List["Shard"]) -> List["Shard"]:
        """Shards a draw may come from, oldest first (here: every indexed round)."""
        return list(shards)

    def weights(self, count: int) -> List[float]:
        """Draw probability of each of ``count`` eligible shards, oldest first (here: uniform)."""
        return [1.0 / count] * count if count else []

    def shard_weights(self, shards: List["Shard"]) -> List[Tuple["Shard", float]]:
        """The shards a draw may pick (:meth:`eligible`, oldest first), each with its draw
        probability (:meth:`weights`): what :meth:`ReplayBuffer.sample` draws with."""
        window = self.eligible(shards)
        return list(zip(window, self.weights(len(window))))

    def round_weights(self, round_sizes: Sequence[int]) -> List[float]:
        """The probability with which one draw picks each round of a history, oldest first, when
        training at the history's last round (``round_sizes[i]``: pairs of round ``i + 1``).

        A round without pairs is never indexed, so it gets 0; the non-empty rounds go through
        :meth:`shard_weights`, the same call the draw makes, so with ``W`` the rule's window::

            p_i = weights(|W|)[position of round i in W]   if round i is in W,   else 0

        e.g. over four non-empty rounds ``NearestKReplay(k=2)`` gives ``[0, 0, 0.5, 0.5]`` and
        ``LambdaDecayReplay(lam=0.5)`` ``[0.0667, 0.1333, 0.2667, 0.5333]``.
        """
        shards = [
            Shard(number, f"iteration_{number:04d}.json", size, "")
            for number, size in enumerate(round_sizes, start=1)
            if size > 0
        ]
        by_round = [0.0] * len(round_sizes)
        for shard, weight in self.shard_weights(shards):
            by_round[shard.iteration - 1] = float(weight)
        return by_round

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class CurrentReplay(ReplayRule):
    """Train on this round's pairs only (the seed's ``current`` mode; no draw)."""

    uses_history = False

    def __init__(self) -> None:
        super().__init__(None)

    def eligible(self, shards: List["Shard"]) -> List["Shard"]:
        return list(shards[-1:])

    def round_weights(self, round_sizes: Sequence[int]) -> List[float]:
        """1 for the last round if it has pairs, else nothing: a round trains on its own pairs
        without a draw, so an empty round trains on nothing (it never falls back to an older one)."""
        if not round_sizes:
            return []
        return [0.0] * (len(round_sizes) - 1) + [1.0 if round_sizes[-1] > 0 else 0.0]


class NearestKReplay(ReplayRule):
    """A uniform draw from the last ``k`` non-empty rounds (``nearest_k``).

    Args:
        k: window in non-empty rounds (>= 1).
        sample_size: pairs drawn per round (``None``: this round's pair count).
    """

    def __init__(self, k: PositiveInt, sample_size: Optional[PositiveInt] = None) -> None:
        at_least("k", k, 1)
        super().__init__(sample_size)
        self.k = k

    def eligible(self, shards: List["Shard"]) -> List["Shard"]:
        return list(shards[-self.k :])


class AllHistoryReplay(ReplayRule):
    """A uniform draw from every non-empty round so far (``all_history``).

    Args:
        sample_size: pairs drawn per round (``None``: this round's pair count).
    """


def check_lambda(name: str, lam: Optional[float]) -> None:
    """A decay ``lam`` in [0, 1] (``None`` and NaN are not): an error naming ``name`` otherwise."""
    # Written as a positive range test so that NaN fails too.
    require(lam is not None and 0.0 <= float(lam) <= 1.0, f"{name} must be in [0, 1].")


class LambdaDecayReplay(ReplayRule):
    """A draw from every round, weighted ``(1-lam) lam^age`` (newest age 0), normalised (``lambda_decay``).

    Args:
        lam: decay in [0, 1]: 1 is uniform, 0 is the newest round only.
        sample_size: pairs drawn per round (``None``: this round's pair count).
    """

    def __init__(self, lam: ClosedUnitInterval, sample_size: Optional[PositiveInt] = None) -> None:
        check_lambda("lam", lam)
        super().__init__(sample_size)
        self.lam = float(lam)

    def weights(self, count: int) -> List[float]:
        return lambda_decay_weights(count, self.lam)


@dataclass
class Shard:
    """One non-empty round in the replay index.

    ``iteration`` is 1-based; ``filename`` is relative to the buffer directory; ``sha256`` is the
    hex digest of the file's bytes as written.
    """

    iteration: int
    filename: str
    num_pairs: int
    sha256: str


class ReplayBuffer:
    """Index of this run's non-empty rounds, their files, and the replay draw under ``rule``."""

    def __init__(self, directory: Union[str, os.PathLike], rule: Optional[ReplayRule] = None) -> None:
        self.rule = rule if rule is not None else CurrentReplay()
        self._records: Dict[str, RecordIndex] = {}  # per indexed file: where each record is, and its digest
        self.directory = Path(directory)  # created on the first write
        self.shards: List[Shard] = []

    @property
    def total_pairs(self) -> int:
        return sum(shard.num_pairs for shard in self.shards)

    def round_path(self, iteration: int) -> Path:
        return self.directory / f"iteration_{iteration:04d}.json"

    def write_round(self, iteration: int, records: List[Dict[str, Any]], publish: bool = True) -> Path:
        """Atomically write the round file of ``iteration`` and update the index.

        With ``publish=False`` the index is updated exactly as if the file had been written, but
        nothing is written: the other processes of a multi-process run, whose rank 0 writes the
        (identical) file.

        Shards of ``iteration`` and of every LATER iteration are dropped first: writing a round
        again means it is being redone after a resume, so later shards belong to a discarded
        future (their files stay on disk, unindexed, and get overwritten when those rounds run).
        A non-empty round then appends its shard; an empty one only leaves its file.
        """
        require(iteration >= 1, "iteration must be >= 1.")
        path = self.round_path(iteration)
        data, index = encode_round(iteration, records)
        if publish:
            write_atomically(path, data)
        # The index changes only once the file is in place, so a failed write leaves it untouched.
        self.shards = [shard for shard in self.shards if shard.iteration < iteration]
        if records:
            self.shards.append(Shard(iteration, path.name, len(records), hashlib.sha256(data).hexdigest()))
            self._records[path.name] = index
        return path

    def sample_size_for(self, current_count: int) -> int:
        """``S``: the rule's ``sample_size``; else this round's pair count; else the newest shard's; else 0."""
        if self.rule.sample_size is not None:
            return self.rule.sample_size
        if current_count > 0:
            return current_count
        return self.shards[-1].num_pairs if self.shards else 0

    def sample(self, current_count: int, rng: random.Random) -> List[Dict[str, Any]]:
        """Draw the round's training records (as the reference, with ``rng`` for its global ``random``).

        Multinomial allocation: each of the ``S`` draws picks one shard with probability ``w``.
        Then, oldest shard first, a count ``c`` of ``n`` records takes ``c`` without replacement
        if ``c <= n``, else ``⌊c/n⌋`` independently shuffled full copies plus ``c mod n`` without
        replacement; the combined list is shuffled. Repeated records are the same dict objects.
        """
        window = self.rule.shard_weights(self.shards)
        total = self.sample_size_for(current_count)
        if total <= 0 or not window:
            return []
        shards, weights = [shard for shard, _ in window], [weight for _, weight in window]
        counts = [0] * len(shards)
        # one choices() call with the cumulative weights computed once: the same random() calls and
        # picks as a call per draw, in O(draws log rounds) rather than O(draws x rounds)
        for picked in rng.choices(range(len(shards)), cum_weights=list(itertools.accumulate(weights)), k=total):
            counts[picked] += 1
        # Draw record positions (the same random calls as drawing the records themselves), then read
        # only the records drawn: a round's cost follows its sample size, not the history's.
        picks: List[Tuple[int, int]] = []
        for position, (shard, count) in enumerate(zip(shards, counts)):
            picks.extend((position, index) for index in _draw_positions(shard.num_pairs, count, rng))
        rng.shuffle(picks)
        wanted: Dict[int, set] = {}
        for position, index in picks:
            wanted.setdefault(position, set()).add(index)
        loaded = {position: self.read_some(shards[position], sorted(indices)) for position, indices in wanted.items()}
        return [loaded[position][index] for position, index in picks]

    def read_some(self, shard: Shard, indices: List[int]) -> Dict[int, Dict[str, Any]]:
        """Records ``indices`` of an indexed shard, each checked against its digest in the record index."""
        index = self._record_index(shard)
        path = os.path.abspath(self.directory / shard.filename)
        records: Dict[int, Dict[str, Any]] = {}
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ReplayIndexError(
                f"Replay round file {path} is missing: the replay index refers to it "
                f"(iteration {shard.iteration}, {shard.num_pairs} pairs)."
            ) from None
        try:
            for position in indices:
                data = os.pread(descriptor, index.lengths[position], index.offsets[position])
                if hashlib.sha256(data).digest() != index.digest(position):
                    raise ReplayIndexError(
                        f"Replay round file {path} is corrupt: record {position} differs from the replay index "
                        f"(iteration {shard.iteration})."
                    )
                records[position] = json.loads(data.decode("utf-8"))
        finally:
            os.close(descriptor)
        return records

    def _record_index(self, shard: Shard) -> "RecordIndex":
        if shard.filename not in self._records:  # a shard indexed by hand: verify the file once
            self.read_records(shard)
        return self._records[shard.filename]

    def read_records(self, shard: Shard) -> List[Dict[str, Any]]:
        """The records of an indexed shard, after checking its bytes against the index."""
        path = os.path.abspath(self.directory / shard.filename)
        if not resolves_inside(shard.filename, self.directory):
            raise ReplayIndexError(
                f"Replay round file {path} leads outside {self.directory} (a link); the replay index reads only "
                "round files of its own folder."
            )
        try:
            data = read_round_file(path, shard.sha256)  # verified before it is read whole
        except FileNotFoundError:
            raise ReplayIndexError(
                f"Replay round file {path} is missing: the replay index of the checkpoint refers to it "
                f"(iteration {shard.iteration}, {shard.num_pairs} pairs)."
            ) from None
        except OSError as error:
            raise ReplayIndexError(f"Replay round file {path} cannot be read: {error}.") from error
        pairs, self._records[shard.filename] = decode_round(data, path, shard.sha256, shard.num_pairs)
        return pairs

    def assets(self) -> List[Dict[str, Any]]:
        """The indexed round files, for a checkpoint to carry (group ``preference_replay``)."""
        return [
            asset("preference_replay", s.filename, self.round_path(s.iteration), s.sha256, self._record_index(s).size)
            for s in self.shards
        ]

    def state_dict(self) -> Dict[str, Any]:
        """The index as plain types (loadable with ``torch.load(weights_only=True)``)."""
        return {"version": 1, "directory": str(self.directory), "shards": [asdict(s) for s in self.shards]}

    def load_state_dict(self, state: Dict[str, Any], assets: Optional[CheckpointAssets] = None) -> None:
        """Restore the index and verify every shard file at once.

        The saved ``directory`` is informational: files are looked up in the directory given to
        ``__init__``, so a run folder that was moved still resumes; a file missing there or differing
        from the index is first put back from ``assets`` (the restored checkpoint's asset folder).
        A file found in neither raises :class:`ReplayIndexError` naming it; the index is then unchanged.
        """
        shards = [
            Shard(int(s["iteration"]), str(s["filename"]), int(s["num_pairs"]), str(s["sha256"]))
            for s in state["shards"]
        ]
        for shard in shards:  # a checkpoint is data: only round files of this folder, by their own name
            if shard.filename != self.round_path(shard.iteration).name:
                raise ReplayIndexError(
                    f"The checkpoint's replay index names {shard.filename!r} for iteration "
                    f"{shard.iteration}, which is not a round file of {self.directory}."
                )
        for shard in shards:
            if assets is not None:
                try:
                    assets.ensure("preference_replay", shard.filename, shard.sha256, self.directory)
                except AssetError as error:
                    raise ReplayIndexError(f"Replay round file of iteration {shard.iteration}: {error}") from None
            self.read_records(shard)
        self.shards = shards


def _draw_positions(size: int, count: int, rng: random.Random) -> List[int]:
    """Record positions of one shard's ``count`` draws: without replacement while ``count <= size``,
    else shuffled full copies plus a remainder (the random calls of drawing the records themselves)."""
    if count == 0:
        return []  # rng.sample(records, 0) draws nothing, so skipping it changes no stream
    if count <= size:
        return rng.sample(range(size), count)  # the same picks as from a list of ``size`` records
    population = list(range(size))
    drawn: List[int] = []
    remaining = count
    while remaining >= size:
        copy = list(population)
        rng.shuffle(copy)
        drawn.extend(copy)
        remaining -= size
    if remaining:
        drawn.extend(rng.sample(population, remaining))
    return drawn
