"""What a vLLM engine needs from an agent: which engine fits it, its weights, and whether they changed.

Nothing here imports vLLM: these are plain functions over the agents' torch modules, used by
:class:`~comlrl_lightning.generation.VLLMGenerator`.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, List, Optional, Tuple, cast

import torch
from torch import nn

from comlrl_lightning.runtime.compat import version_counter
from comlrl_lightning.team.lora import LoraAgent
from comlrl_lightning.validation import require

if TYPE_CHECKING:
    from transformers import PreTrainedModel

IGNORED_CONFIG_KEYS = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")
"""Config entries that do not change the network (where it was loaded from, the saved dtype's label)."""


def transformers_model(agent: nn.Module) -> PreTrainedModel:
    """The transformers model whose architecture an engine runs (a LoRA agent's shared base)."""
    return agent.get_base_model() if isinstance(agent, LoraAgent) else cast("PreTrainedModel", agent)


def parameter_dtype(agent: nn.Module) -> torch.dtype:
    """The dtype the engine runs in: the agent's (first floating-point) parameters'."""
    for parameter in transformers_model(agent).parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


def architecture_key(agent: nn.Module) -> str:
    """A key equal for agents one engine can run by swapping weights: same config, same dtype.

    Agents of one team, a copy of them, their snapshots and a fixed comparator model of the same
    architecture share one engine; a comparator model of another size gets its own.
    """
    model = transformers_model(agent)
    config = {k: v for k, v in model.config.to_dict().items() if k not in IGNORED_CONFIG_KEYS}
    return json.dumps({"config": config, "dtype": str(parameter_dtype(agent))}, sort_keys=True, default=str)


def agent_weights(agent: nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """The agent's weights under the names of its transformers checkpoint, produced lazily.

    A tied weight is sent under each of its names (an embedding tied to the LM head as
    ``lm_head.weight`` too): an engine built with placeholder weights may hold the head apart
    from the embedding, and a weight sent once would leave the head a placeholder.

    A full model yields its parameters as they are. A LoRA agent yields the shared base with its own
    adapter merged in (``W + scale * B @ A`` per adapted layer, computed one layer at a time), so
    the engine runs a plain model and no adapter is ever written to disk.
    """
    if not isinstance(agent, LoraAgent):
        for name, parameter in agent.named_parameters(remove_duplicate=False):
            yield name, parameter.detach()
        return
    yield from merged_lora_weights(agent)


MERGED_LORA_ONLY = ("use_dora", "modules_to_save", "trainable_token_indices")
"""LoraConfig fields whose adapters are more than ``W + scale * B @ A``: the merge below cannot send them."""


def merged_lora_weights(agent: LoraAgent) -> Iterator[Tuple[str, torch.Tensor]]:
    """``agent``'s adapter merged into the shared base, under the base model's parameter names."""
    config = agent.shared.peft_config[agent.adapter]
    for field in MERGED_LORA_ONLY:
        require(
            not getattr(config, field, None),
            f"lora.{field}: the vLLM generator sends plain LoRA adapters merged into the base "
            "(W + scale * B @ A); sample this team with HFGenerator.",
        )
    base = agent.get_base_model()
    modules = dict(base.named_modules())
    for name, parameter in base.named_parameters(remove_duplicate=False):
        if "lora_" in name:  # every agent's adapter matrices: merged below, never sent on their own
            continue
        if ".base_layer." not in name:
            yield name, parameter.detach()
            continue
        layer_name, _, leaf = name.partition(".base_layer.")
        layer = modules[layer_name]
        weight = parameter.detach()
        if leaf == "weight" and agent.adapter in getattr(layer, "lora_A", {}):
            weight = weight + layer.get_delta_weight(agent.adapter).to(weight.dtype)
        yield f"{layer_name}.{leaf}", weight


def tracked_parameters(agent: nn.Module) -> List[nn.Parameter]:
    """The parameters that decide the agent's weights: all of a full model's; for a LoRA agent the
    shared base and its own adapter (another agent's adapter changing must not count as a change)."""
    if not isinstance(agent, LoraAgent):
        return list(agent.parameters())
    own = f".{agent.adapter}."
    return [p for name, p in agent.shared.named_parameters() if "lora_" not in name or own in name]


@dataclass
class WeightsStamp:
    """Which weights an engine holds: the agent object, the update count when they were pushed,
    and each parameter's identity and in-place version counter.

    The update count is bumped by :meth:`VLLMGenerator.weights_updated` (the team module calls it
    after every training batch and checkpoint load): fused optimizers update parameters without
    bumping their version counters. The version counters catch what happens outside an optimizer
    step (``load_state_dict``, an in-place ``copy_``). The agent is held by a weak reference: an
    agent freed and another built at the same address never looks like the same weights.
    """

    agent: "weakref.ReferenceType[nn.Module]"
    updates: int
    versions: Tuple[Tuple[int, int], ...]

    @classmethod
    def of(cls, agent: nn.Module, updates: int) -> "WeightsStamp":
        return cls(weakref.ref(agent), updates, parameter_versions(agent))

    def matches(self, agent: nn.Module, updates: int) -> bool:
        return self.agent() is agent and self.updates == updates and self.versions == parameter_versions(agent)


def parameter_versions(agent: nn.Module) -> Tuple[Tuple[int, int], ...]:
    return tuple((id(p), version_counter(p)) for p in tracked_parameters(agent))


def agent_device(agent: nn.Module) -> Optional[torch.device]:
    parameter = next(iter(transformers_model(agent).parameters()), None)
    return parameter.device if parameter is not None else None
