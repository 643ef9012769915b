"""Sharded training (FSDP2 through Lightning's ``ModelParallelStrategy``) and the strategies the modules support.

Under ``ModelParallelStrategy`` every agent is sharded with ``torch.distributed.fsdp.fully_shard``
over the data-parallel mesh: each decoder layer is its own unit (all-gathered for its forward,
resharded after) and the rest of the model (embeddings, LM head, final norm) forms the root unit.
Trainable critics are sharded the same way; frozen models (the KL reference, the reward model
between its fits) stay whole on every rank. A forward of a sharded model is a collective: every
rank must run it, so sampling keeps the ranks in lockstep (see ``Team.generate``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from torch import nn

from comlrl_lightning.runtime.compat import model_parallel_sizes
from comlrl_lightning.validation import OptionError

SUPPORTED_STRATEGIES = ("SingleDeviceStrategy", "DDPStrategy", "ModelParallelStrategy")
"""What the team modules run under: one device, data parallel (``ddp``, ``ddp_spawn``, ``ddp_fork``...),
and FSDP2 sharding. Other strategies (FSDP1's ``FSDPStrategy``, DeepSpeed) would run without the
lockstep sampling and sharded snapshots the modules need, so they are refused by name."""


def check_strategy(strategy: Any) -> None:
    """Raise :class:`OptionError` naming ``strategy`` unless the modules support it."""
    from lightning.pytorch.strategies import (
        DDPStrategy,
        ModelParallelStrategy,
        SingleDeviceStrategy,
    )

    if isinstance(strategy, ModelParallelStrategy):
        mesh = strategy.device_mesh
        if mesh["tensor_parallel"].size() != 1:
            raise OptionError(
                f"trainer.strategy: ModelParallelStrategy with data_parallel_size={mesh['data_parallel'].size()} and "
                f"tensor_parallel_size={mesh['tensor_parallel'].size()}: the team modules shard with FSDP2 over data "
                f"parallelism only; set data_parallel_size to the number of processes ({mesh.size()}) and "
                "tensor_parallel_size to 1."
            )
        return
    if isinstance(strategy, (SingleDeviceStrategy, DDPStrategy)):
        return
    raise OptionError(
        f"trainer.strategy: {type(strategy).__name__} is not supported by the team modules (they run under "
        f"{', '.join(SUPPORTED_STRATEGIES)}). For sharded training use "
        "lightning.pytorch.strategies.ModelParallelStrategy (FSDP2)."
    )


def check_mesh_plan(strategy: Any) -> None:
    """Before any process starts (and any model loads): ``ModelParallelStrategy``'s mesh must be data
    parallel over exactly the processes the trainer runs (``devices x num_nodes``), with tensor
    parallelism 1; otherwise :class:`OptionError` names the options and their values (Lightning
    would only fail later, in every process, with a traceback)."""
    if not is_sharded(strategy):
        return
    processes = strategy.num_nodes * strategy.num_processes
    # the strategy keeps its configured sizes privately; "auto" resolves as Lightning resolves it
    data, tensor = model_parallel_sizes(strategy)
    data = strategy.num_nodes if data == "auto" else int(data)
    tensor = strategy.num_processes if tensor == "auto" else int(tensor)
    if data != processes or tensor != 1:
        raise OptionError(
            f"trainer.strategy: ModelParallelStrategy with data_parallel_size={data} and tensor_parallel_size="
            f"{tensor}, but the trainer runs {processes} process(es) (devices={strategy.num_processes} x num_nodes="
            f"{strategy.num_nodes}): the team modules shard with FSDP2 over data parallelism only; set "
            f"data_parallel_size to {processes} and tensor_parallel_size to 1 (or change trainer.devices)."
        )


def is_sharded(strategy: Any) -> bool:
    """Whether ``strategy`` shards the modules (FSDP2 through ``ModelParallelStrategy``)."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    return isinstance(strategy, ModelParallelStrategy)


def decoder_layers(model: nn.Module) -> List[nn.Module]:
    """The repeated blocks of ``model``: the ``nn.ModuleList`` of same-typed children holding the most
    parameters (GPT-2's ``transformer.h``, Llama's ``model.layers``...); empty if there is none."""
    best: List[nn.Module] = []
    best_size = 0
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 1 and len({type(child) for child in module}) == 1:
            size = sum(p.numel() for p in module.parameters())
            if size > best_size:
                best, best_size = list(module), size
    return best


def mixed_precision_policy(precision: str) -> Optional[Any]:
    """FSDP2's ``MixedPrecisionPolicy`` for Lightning's ``trainer.precision`` (``bf16-mixed``: bf16
    parameters in forward/backward, float32 gradient reduction; ``16-mixed`` likewise with float16)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtypes = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
    if precision not in dtypes:
        return None
    return MixedPrecisionPolicy(param_dtype=dtypes[precision], reduce_dtype=torch.float32)


def shard_model(model: nn.Module, mesh: Any, precision: str = "32-true") -> None:
    """``fully_shard`` every decoder layer of ``model``, then the model (the root unit) over ``mesh``."""
    from torch.distributed.fsdp import fully_shard

    options: Dict[str, Any] = {"mesh": mesh}
    policy = mixed_precision_policy(precision)
    if policy is not None:
        options["mp_policy"] = policy
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)


def full_state_dict(model: nn.Module) -> Dict[str, Any]:
    """The whole (unsharded) state dict of a sharded ``model`` on the CPU; a collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def max_over_ranks(value: int, device: torch.device) -> int:
    """The largest ``value`` of all ranks (``value`` itself outside a process group); ``device`` is
    where the process group's backend takes tensors (the model's device)."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


__all__ = [
    "SUPPORTED_STRATEGIES",
    "check_mesh_plan",
    "check_strategy",
    "decoder_layers",
    "full_state_dict",
    "is_sharded",
    "max_over_ranks",
    "mixed_precision_policy",
    "shard_model",
]
