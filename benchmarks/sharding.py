"""Per-rank memory and step time of FSDP2 sharding (``comlrl_lightning.runtime.sharding.shard_model``) against DDP.

Two CPU processes (gloo) train the same GPT-2 of about 30M parameters on the same token batches,
once sharded per decoder layer and root exactly as the team modules shard an agent, once
replicated under ``DistributedDataParallel``. Per rank it reports the bytes of the parameters and
of the AdamW state this rank holds after a step, and the mean time of a training step (forward,
backward, optimizer step). ``python benchmarks/sharding.py`` prints a markdown table and writes it
to ``benchmarks/SHARDING.md``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS, WARMUP, BATCH, LENGTH = 6, 2, 4, 128


def build_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=8192, n_positions=LENGTH, n_embd=512, n_layer=8, n_head=8))


def local_bytes(tensors) -> int:
    """Bytes this rank holds: a sharded (DTensor) tensor counts only its local shard."""
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total


def worker(rank: int, world: int, kind: str, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = build_model()
    parameters = sum(p.numel() for p in model.parameters())
    if kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh

        from comlrl_lightning.runtime.sharding import shard_model

        shard_model(model, init_device_mesh("cpu", (world,)))
        trained = model
    else:
        trained = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(rank)
    times = []
    for step in range(STEPS):
        tokens = torch.randint(0, 8192, (BATCH, LENGTH), generator=generator)
        started = time.perf_counter()
        loss = trained(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= WARMUP:
            times.append(time.perf_counter() - started)
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    result = {
        "kind": kind,
        "rank": rank,
        "parameters": parameters,
        "param_bytes": local_bytes(model.parameters()),
        "optimizer_bytes": local_bytes(state),
        "step_seconds": sum(times) / len(times),
    }
    Path(out, f"{kind}_{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def main() -> None:
    world = 2
    with tempfile.TemporaryDirectory() as out:
        for offset, kind in enumerate(("ddp", "fsdp")):
            mp.spawn(worker, args=(world, kind, 29_611 + offset, out), nprocs=world, join=True)
        results = {
            kind: [json.loads(Path(out, f"{kind}_{r}.json").read_text()) for r in range(world)]
            for kind in ("ddp", "fsdp")
        }
    mib = 2**20
    rows = [
        "| strategy | parameters + AdamW state per rank | ratio to DDP | step time (s) | ratio to DDP |",
        "|---|---|---|---|---|",
    ]
    ddp = results["ddp"][0]
    for kind in ("ddp", "fsdp"):
        r = results[kind][0]
        memory = (r["param_bytes"] + r["optimizer_bytes"]) / mib
        ratio = (r["param_bytes"] + r["optimizer_bytes"]) / (ddp["param_bytes"] + ddp["optimizer_bytes"])
        label = "DDP (replicated)" if kind == "ddp" else f"FSDP2 over {world} ranks"
        rows.append(
            f"| {label} | {memory:.1f} MiB | {ratio:.3f} | {r['step_seconds']:.3f} | {r['step_seconds'] / ddp['step_seconds']:.2f} |"
        )
    text = (
        f"GPT-2 with {ddp['parameters'] / 1e6:.1f}M parameters, float32, {world} CPU processes (gloo), "
        f"batch {BATCH} x {LENGTH} tokens, mean of {STEPS - WARMUP} steps after {WARMUP} warm-up steps.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    print(text)
    Path(__file__).with_name("SHARDING.md").write_text(text)


if __name__ == "__main__":
    main()
