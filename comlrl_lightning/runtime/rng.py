"""Seeded random streams that a component owns and checkpoints.

Lightning does not checkpoint global RNG state, and Hugging Face ``generate()`` samples from the
global torch generator. A :class:`RandomStream` keeps its own torch state (CPU and each CUDA device
it touched) plus a ``random.Random`` for Python-level choices; ``with stream.active(device):``
swaps its state into the global generator for the duration of the block and takes the advanced
state back afterwards. Streams therefore never consume each other's randomness, and their state
goes into ``state_dict()`` so that a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from typing import Any, Dict, Iterator

import torch


class RandomStream:
    """An independent, seedable, checkpointable source of randomness."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self.python = random.Random(self.seed)
        self._torch_states: Dict[str, torch.Tensor] = {}

    def _initial_state(self, device: torch.device) -> torch.Tensor:
        generator = torch.Generator(device=device)
        generator.manual_seed(self.seed)
        return generator.get_state()

    @contextlib.contextmanager
    def active(self, device: torch.device | str = "cpu") -> Iterator[None]:
        """Make this stream the global torch generator of ``device`` (and the CPU) inside the block."""
        device = torch.device(device)
        keys = ["cpu"] + ([str(device)] if device.type == "cuda" else [])
        saved = {key: _get_global_state(key) for key in keys}
        try:
            for key in keys:
                state = self._torch_states.get(key)
                _set_global_state(key, state if state is not None else self._initial_state(torch.device(key)))
            yield
        finally:
            for key in keys:
                self._torch_states[key] = _get_global_state(key)
                _set_global_state(key, saved[key])

    @classmethod
    def derive(cls, seed: int, *keys: object) -> "RandomStream":
        """A fresh stream whose seed is a hash of ``seed`` and ``keys`` (e.g. ``"collect", round, rank``).

        Deriving a stream from the progress counters instead of carrying one stream's state through
        the run means there is nothing to checkpoint, and every process of a multi-process run can
        rebuild its own stream after a resume (Lightning keeps only rank 0's data-module state).
        """
        return cls(derived_seed(seed, *keys))

    def reseed(self, seed: int) -> None:
        """Start over from ``seed`` (a stream shared by several objects is re-seeded in place)."""
        self.seed = int(seed)
        self.python = random.Random(self.seed)
        self._torch_states = {}

    def state_dict(self) -> Dict[str, Any]:
        return {
            "seed": self.seed,
            "python": self.python.getstate(),
            "torch": {key: state.clone() for key, state in self._torch_states.items()},
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.python.setstate(_as_python_state(state["python"]))
        self._torch_states = {key: value.clone() for key, value in state["torch"].items()}


def derived_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed from a hash of ``seed`` and ``keys``."""
    digest = hashlib.sha256(repr((int(seed),) + keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def epoch_order_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s shuffle of a loader seeded with ``seed``.

    Linear in the epoch, unlike :func:`derived_seed`: it predates it, and keeping it keeps every
    recorded run's batch order (the documented numbers and the round files of the shipped configs).
    Every other stream of a run comes from :func:`derived_seed`, so none starts where an epoch's does.
    """
    return seed * 1_000_003 + epoch


def _as_python_state(state: Any) -> tuple:
    # Checkpoints may turn the nested tuples of random.getstate() into lists.
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _get_global_state(key: str) -> torch.Tensor:
    if key == "cpu":
        return torch.get_rng_state()
    return torch.cuda.get_rng_state(torch.device(key))


def _set_global_state(key: str, state: torch.Tensor) -> None:
    if key == "cpu":
        torch.set_rng_state(state)
    else:
        torch.cuda.set_rng_state(state, torch.device(key))
