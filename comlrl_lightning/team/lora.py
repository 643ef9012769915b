"""LoRA teams: one base model with one LoRA adapter per agent (memory close to one model).

Each agent is a :class:`LoraAgent`, a thin view of the shared ``PeftModel`` that activates its own
adapter before every forward and ``generate()``. peft's ``set_adapter()`` marks every *other* adapter
``requires_grad=False``; since MADPO runs all agents' forwards before one backward, that would
silently train only the last agent (and, under DDP, let the replicas drift apart with no error).
The view therefore re-enables every adapter's parameters after switching, and activates its
adapter again for the recomputation of checkpointed layers in backward. Where it can, a team runs
all its agents in one pass instead, each row through its own adapter and no adapter switched
(:mod:`~comlrl_lightning.team.lora_routing`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, cast

import torch
from peft import LoraConfig, PeftModel
from torch import nn

from comlrl_lightning.runtime.quiet import peft_wrapping_quiet
from comlrl_lightning.team.activation_checkpointing import recomputed_inside
from comlrl_lightning.team.loading import ModelSource, load_model
from comlrl_lightning.validation import require

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def adapter_name(agent_index: int) -> str:
    return f"agent_{agent_index}"


class SharedModelView:
    """What every view of the shared peft model reports as its own: the config and the device."""

    shared: PeftModel

    @property
    def config(self):
        return self.shared.config

    @property
    def device(self) -> torch.device:
        return next(self.shared.parameters()).device

    def get_base_model(self) -> PreTrainedModel:
        """The transformers model under the adapters (its forward signature, generation config, LM head)."""
        return cast("PreTrainedModel", self.shared.get_base_model())  # peft types it as a torch Module


class LoraAgent(SharedModelView, nn.Module):
    """Agent ``adapter``'s view of a shared peft model."""

    def __init__(self, shared: PeftModel, adapter: str) -> None:
        super().__init__()
        self.shared = shared  # registered in every view; parameters() and state saving de-duplicate it
        self.adapter = adapter

    def activate(self) -> None:
        if self.shared.active_adapter != self.adapter:
            self.shared.set_adapter(self.adapter)
            train_every_adapter(self.shared)

    @contextlib.contextmanager
    def _active(self) -> Iterator[None]:
        self.activate()
        yield

    def forward(self, *args: Any, **kwargs: Any):
        # checkpointed layers recompute in backward, when another agent's adapter may be active
        with recomputed_inside(self.shared, self._active), self._active():
            return self.shared(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any):
        self.activate()
        return self.shared.generate(*args, **kwargs)

    def trainable_parameters(self) -> List[nn.Parameter]:
        """This agent's adapter parameters (its optimizer param group)."""
        return [p for name, p in self.shared.named_parameters() if f".{self.adapter}." in name]

    def base_model_view(self) -> "BaseModelView":
        """The shared base with every adapter disabled (the initial policy, for reference KL)."""
        return BaseModelView(self.shared)

    def save_pretrained(self, directory: str | Path) -> None:
        """The base with this agent's adapter merged in, as a plain model folder (loadable anywhere)."""
        self.activate()
        merged = _merged_copy(self.shared, self.adapter)
        merged.save_pretrained(directory)

    def save_adapter(self, directory: str | Path) -> None:
        """This agent's adapter alone as a peft folder at ``directory`` (``adapter_config.json``, whose
        ``base_model_name_or_path`` is the base's folder or hub id, and ``adapter_model.safetensors``):
        ``peft.AutoPeftModelForCausalLM.from_pretrained(directory)`` loads the base with it."""
        target = Path(directory)
        with tempfile.TemporaryDirectory(prefix=".adapter-", dir=target.parent) as staging:
            self.shared.save_pretrained(staging, selected_adapters=[self.adapter])
            os.replace(Path(staging) / self.adapter, target)  # peft writes a named adapter into its own subfolder


class BaseModelView(SharedModelView):
    """Calls the shared model with its adapters disabled."""

    def __init__(self, shared: PeftModel) -> None:
        self.shared = shared

    def __call__(self, *args: Any, **kwargs: Any):
        try:
            with self.shared.disable_adapter():
                return self.shared(*args, **kwargs)
        finally:
            # leaving disable_adapter() freezes every adapter but the active one
            train_every_adapter(self.shared)


def train_every_adapter(shared: nn.Module) -> None:
    """``requires_grad=True`` on every agent's adapter parameters (peft freezes the inactive ones)."""
    for parameter in adapter_parameters(shared):
        parameter.requires_grad_(True)


def adapter_parameters(shared: nn.Module) -> List[nn.Parameter]:
    """Every agent's adapter parameters: those peft files under an agent's adapter name (LoRA's A and
    B, and whatever else the config adds per adapter, such as DoRA magnitudes or ``modules_to_save`` copies)."""
    names = {f".{name}." for name in getattr(shared, "peft_config", {})}
    return [p for name, p in shared.named_parameters() if any(tag in name for tag in names)]


def _merged_copy(shared: PeftModel, adapter: str) -> PreTrainedModel:
    import copy

    clone = copy.deepcopy(shared)
    clone.set_adapter(adapter)
    for other in list(clone.peft_config):
        if other != adapter:
            clone.delete_adapter(other)
    return clone.merge_and_unload()


def lora_for_agents(config: LoraConfig) -> LoraConfig:
    """``config`` as every agent's adapter uses it: a copy (peft fills in what it finds on the model)
    for a causal LM (``task_type=None`` becomes ``CAUSAL_LM``; another task type is refused)."""
    task_type = getattr(config.task_type, "value", config.task_type)
    require(
        task_type in (None, "CAUSAL_LM"),
        f"lora.task_type: the agents are causal language models (CAUSAL_LM), not {task_type}.",
    )
    return dataclasses.replace(config, task_type="CAUSAL_LM")


def build_lora_agents(
    source: ModelSource,
    num_agents: int,
    config: LoraConfig,
    dtype: Optional[str] = None,
    attn_implementation: Optional[str] = None,
) -> List[LoraAgent]:
    """One base model (loaded once, frozen) with ``num_agents`` adapters ``agent_0 ... agent_{N-1}``
    made from ``config`` (see :func:`lora_for_agents`); every adapter's parameters are trainable."""
    from peft import get_peft_model

    config = lora_for_agents(config)
    base = load_model(source, dtype, attn_implementation)
    with peft_wrapping_quiet():
        shared = get_peft_model(base, config, adapter_name=adapter_name(0))
    for index in range(1, num_agents):
        shared.add_adapter(adapter_name(index), config)
    for parameter in shared.parameters():
        parameter.requires_grad_(False)
    train_every_adapter(shared)
    return [LoraAgent(shared, adapter_name(index)) for index in range(num_agents)]


def is_lora_team(agents: Sequence[nn.Module]) -> bool:
    """Whether every agent is a :class:`LoraAgent` of one shared model: the one test of a LoRA
    team (a built team answers it from its plan, :attr:`~comlrl_lightning.team.Team.is_lora`)."""
    agents = list(agents)
    if not agents or not all(isinstance(agent, LoraAgent) for agent in agents):
        return False
    return all(agent.shared is agents[0].shared for agent in agents)


def agent_parameters(agent: nn.Module) -> List[torch.nn.Parameter]:
    """The parameters an agent's optimizer group trains."""
    if isinstance(agent, LoraAgent):
        return agent.trainable_parameters()
    return [p for p in agent.parameters() if p.requires_grad]
