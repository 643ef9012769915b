"""Peak memory of a 4-agent team: one base with 4 LoRA adapters vs 4 full model copies.

    python benchmarks/lora_memory.py            # writes benchmarks/LORA_MEMORY.md and prints it

Each configuration runs in its own process (so peaks do not mix): build the team from a ~30M
parameter GPT-2 saved locally, then take 3 MADPO steps (one batched forward of winners and
losers per agent, one backward, AdamW). Peak = the process's maximum resident set size.
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
AGENTS, STEPS, PAIRS = 4, 3, 2


def build_base(folder: Path) -> int:
    from transformers import GPT2Config, GPT2LMHeadModel

    from comlrl_lightning.defaults import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = GPT2Config(
        vocab_size=8192,
        n_positions=256,
        n_embd=512,
        n_layer=8,
        n_head=8,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def measure(folder: str, lora: bool) -> dict:
    torch.set_num_threads(1)
    from peft import LoraConfig

    from comlrl_lightning import MADPOModule, TeamOptions, madpo_loss
    from comlrl_lightning.rounds.pairs import PreferencePair

    adapters = LoraConfig(r=8, lora_alpha=16, target_modules=["c_attn", "c_proj"]) if lora else None
    module = MADPOModule(
        team=TeamOptions(agent_model=folder, num_agents=AGENTS, lora=adapters), agent_learning_rate=1e-4
    )
    module.configure_model()
    optimizer = module.configure_optimizers()
    generator = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(2, 40, (n,), generator=generator).tolist()

    pairs = [
        PreferencePair(
            prompts=["p"] * AGENTS,
            winner_completions=["w"] * AGENTS,
            loser_completions=["l"] * AGENTS,
            winner_reward=1.0,
            loser_reward=0.0,
            candidate_reward_mean=0.5,
            prompt_ids=[ids(16) for _ in range(AGENTS)],
            winner_ids=[ids(16) for _ in range(AGENTS)],
            loser_ids=[ids(16) for _ in range(AGENTS)],
        )
        for _ in range(PAIRS)
    ]
    started = time.perf_counter()
    for _ in range(STEPS):
        loss = madpo_loss(module.margins(module.collate_pairs(pairs)), 0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trainable = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
    return {
        "parameters": sum(p.numel() for p in module.team.parameters()),
        "trainable": trainable,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds_per_step": (time.perf_counter() - started) / STEPS,
    }


def main() -> None:
    if len(sys.argv) == 3:  # child: one measurement
        print(json.dumps(measure(sys.argv[1], sys.argv[2] == "lora")))
        return
    with tempfile.TemporaryDirectory() as folder:
        base_parameters = build_base(Path(folder))
        results = {}
        for kind in ("full", "lora"):
            output = subprocess.run(
                [sys.executable, __file__, folder, kind], capture_output=True, text=True, check=True
            )
            results[kind] = json.loads(output.stdout.strip().splitlines()[-1])
    full, lora = results["full"], results["lora"]
    lines = [
        f"4 agents on one base of {base_parameters / 1e6:.1f}M parameters (GPT-2, 8 layers, 512 wide, vocab 8192), "
        f"{STEPS} MADPO steps of {PAIRS} pairs (prompt 16 + completion 16 tokens), 1 CPU thread, "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}.",
        "",
        "| team | parameters in memory | trained parameters | peak RSS (MiB) | s / step |",
        "|---|---|---|---|---|",
        f"| 4 full copies | {full['parameters'] / 1e6:.1f}M | {full['trainable'] / 1e6:.1f}M | {full['peak_rss_mib']:.0f} | {full['seconds_per_step']:.2f} |",
        f"| 1 base + 4 LoRA adapters (r=8) | {lora['parameters'] / 1e6:.1f}M | {lora['trainable'] / 1e6:.2f}M | {lora['peak_rss_mib']:.0f} | {lora['seconds_per_step']:.2f} |",
        "",
        f"LoRA peak / full peak: {lora['peak_rss_mib'] / full['peak_rss_mib']:.2f}",
    ]
    text = "\n".join(lines)
    (HERE / "LORA_MEMORY.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
