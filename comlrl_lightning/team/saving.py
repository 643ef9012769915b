"""A team's agents as Hugging Face folders (the seed API's ``save_model``, the ``export`` command),
each written atomically."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.files import ensure_writable_folder, swap_folder
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.runtime.quiet import transformers_bars_off
from comlrl_lightning.team.lora import LoraAgent

LoraLayout = Literal["merged", "adapter", "merged_and_adapter"]
"""How a LoRA agent is written: its base with the adapter merged in (a plain model folder), the adapter
alone (a peft folder naming its base), or the merged model with the adapter alone in ``adapter/``."""


def write_agent_folder(agent: Any, tokenizer: Any, folder: Path, lora_layout: LoraLayout = "merged") -> None:
    """Write ``folder`` (which must not exist yet): the agent's ``save_pretrained`` folder (weights,
    config, generation config) and its tokenizer. A LoRA agent as ``lora_layout`` says; its adapter
    folder holds the base's generation config too, so every folder says how its model samples."""
    with transformers_bars_off():  # no "Writing model shards" bar per agent
        if isinstance(agent, LoraAgent) and lora_layout == "adapter":
            agent.save_adapter(folder)  # adapter_config.json names the base (its folder or hub id)
            agent.get_base_model().generation_config.save_pretrained(folder)
        else:
            agent.save_pretrained(folder)
            if isinstance(agent, LoraAgent) and lora_layout == "merged_and_adapter":
                agent.save_adapter(folder / "adapter")  # for peft's AutoPeftModelForCausalLM
        tokenizer.save_pretrained(folder)


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
            write_agent_folder(agent, tokenizer, staging / "agent", "merged_and_adapter")
            swap_folder(staging / "agent", target)  # a previous agent folder is replaced as a whole
        finally:
            shutil.rmtree(staging, ignore_errors=True)
