"""A team's agents as Hugging Face folders (the seed API's ``save_model``), each written atomically."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.files import ensure_writable_folder, swap_folder
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.team.lora import LoraAgent


def save_team_folders(team: Any, output_dir: str) -> None:
    """Write ``output_dir/agent_{i}``: each agent's ``save_pretrained`` folder and tokenizer; a LoRA
    agent's holds its base with the adapter merged in, and the adapter alone in ``adapter/`` (for
    peft's ``AutoPeftModelForCausalLM``). Each folder is written beside its final name and renamed
    into place; an ``output_dir`` that is a file, or an ``agent_{i}`` there that is a link or a file,
    is refused before anything is written."""
    root = Path(require_local(output_dir, "save_model output_dir", "a local folder"))
    targets = [root / f"agent_{index}" for index in range(len(team.agents))]
    for path in (root, *targets):
        if path.is_symlink() and path != root or path.exists() and not path.is_dir():
            kind = "a symbolic link" if path.is_symlink() else "a file"
            raise ConfigurationError(f"save_model: {path} is {kind}; it writes agent folders only into folders.")
    ensure_writable_folder(root, "save_model's output folder")
    for agent, tokenizer, target in zip(team.agents, team.tokenizers, targets):
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
        try:
            agent.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            if isinstance(agent, LoraAgent):  # and its adapter alone, for peft's AutoPeftModelForCausalLM
                agent.save_adapter(staging / "adapter")
            swap_folder(staging, target)  # a previous agent folder is replaced as a whole
        finally:
            shutil.rmtree(staging, ignore_errors=True)
