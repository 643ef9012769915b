"""A 4-agent LoRA team: one pass for all agents against one pass per agent (our side only).

``lora_team_step``: one MADPO step (collate, margins, loss, one backward, AdamW) of a team of four
LoRA adapters on one base, every agent's pairs scored in one forward (``team.lora_one_pass: true``, the
default) or agent by agent (``false``). ``lora_team_collection``: ``PreferenceDataModule.collect``
of the same team, all agents' prompts in the same ``generate()`` calls or one agent after another.
``lora_team_sampling``: one sample per agent and item, as evaluation samples. Both settings
sample the same tokens (per-request seeds), so they do the same work.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List

import common

common.limit_threads()

import torch  # noqa: E402, F401 - imported before the threads are limited again

common.limit_threads()

AGENTS = 4
LORA_R = 8
ROLES = ("writer", "matcher", "editor", "critic")
FULL = dict(batch_sizes=[1, 4, 16], sampling=dict(items=16, samples=1, max_new_tokens=32))
QUICK = dict(batch_sizes=[1, 4], sampling=dict(items=2, samples=1, max_new_tokens=8))


def role_prompt(role: str):
    def prompt(item: Dict[str, Any]) -> str:
        return f"topic: {item['prompt']}\n{role}:"

    prompt.__name__ = f"{role}_prompt"
    return prompt


FORMATTERS = [role_prompt(role) for role in ROLES]


def team_reward(writer: List[str], matcher: List[str], editor: List[str], critic: List[str]) -> List[float]:
    """The toy reward of the writer/matcher pair plus that of the editor/critic pair."""
    return [a + b for a, b in zip(common.reward(writer, matcher), common.reward(editor, critic))]


def _module(job: Dict[str, Any], **options):
    from peft import LoraConfig

    from comlrl_lightning import MADPOModule, TeamOptions

    adapters = LoraConfig(r=LORA_R, lora_alpha=16)  # peft's default targets for the model type
    module = MADPOModule(
        team=TeamOptions(agent_model=job["model"], num_agents=AGENTS, lora=adapters, lora_one_pass=job["one_pass"]),
        dpo_beta=common.DPO_BETA,
        agent_learning_rate=common.LEARNING_RATE,
        **options,
    )
    module.configure_model()
    return module


def _sampling(job: Dict[str, Any]):
    from comlrl_lightning import GenerationSettings

    return GenerationSettings(max_new_tokens=job["max_new_tokens"], **common.GENERATION)


def _pairs(job: Dict[str, Any], tokenizer) -> list:
    """Pairs of four agents: each role's prompt ids, random completions ending in EOS (as sampled)."""
    import random

    from comlrl_lightning.rounds.pairs import PreferencePair

    rng = random.Random(0)
    specials = set(tokenizer.all_special_ids)
    vocabulary = [i for i in range(len(tokenizer)) if i not in specials]

    def completion() -> List[int]:
        return [rng.choice(vocabulary) for _ in range(rng.randint(*job["completion_lengths"]))] + [
            tokenizer.eos_token_id
        ]

    pairs = []
    for item in common.items(job["pair_pool"]):
        prompts = [f(item) for f in FORMATTERS]
        winners, losers = [completion() for _ in prompts], [completion() for _ in prompts]
        pairs.append(
            PreferencePair(
                prompts=prompts,
                winner_completions=[tokenizer.decode(ids, skip_special_tokens=True) for ids in winners],
                loser_completions=[tokenizer.decode(ids, skip_special_tokens=True) for ids in losers],
                winner_reward=1.0,
                loser_reward=0.0,
                candidate_reward_mean=0.5,
                prompt_ids=[tokenizer(p, add_special_tokens=True)["input_ids"] for p in prompts],
                winner_ids=winners,
                loser_ids=losers,
            )
        )
    return pairs


def lora_team_step(job: Dict[str, Any]) -> Dict[str, Any]:
    from comlrl_lightning.losses import madpo_loss

    module = _module(job)
    optimizer = module.configure_optimizers()
    pool = _pairs(job, module.team.tokenizers[0])

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        madpo_loss(module.margins(module.collate_pairs(batch)), module.dpo_beta).backward()
        optimizer.step()

    return common.time_steps(step, pool, job["batch_size"], job["min_pairs"], job["min_seconds"])


def lora_team_collection(job: Dict[str, Any]) -> Dict[str, Any]:
    from comlrl_lightning import PreferenceDataModule, TaskOptions

    module = _module(job, sampling=_sampling(job))
    data = PreferenceDataModule(
        task=TaskOptions(
            train_dataset=common.items(job["items"]), formatters=list(FORMATTERS), reward_func=team_reward
        ),
        num_agents=AGENTS,
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=16,
        pair_selection="reward_gap",
        eval_num_samples=0,
    )
    data.setup("fit")
    items = data.train_items
    data.train_items = items[:1]
    data.collect(module)  # warm-up
    data.train_items = items
    seconds, result = common.best_of(lambda: data.collect(module))
    sequences = len(items) * job["candidates"] * AGENTS
    digest = hashlib.sha256(repr([(pair.winner_ids, pair.loser_ids) for pair in result.pairs]).encode())
    return {
        "sequences": sequences,
        "seconds": seconds,
        "sequences_per_s": sequences / seconds,
        "pairs": len(result.pairs),
        "digest": digest.hexdigest()[:16],
    }


def lora_team_sampling(job: Dict[str, Any]) -> Dict[str, Any]:
    """``sample_team`` of ``samples`` completions per agent and item (evaluation samples one)."""
    from comlrl_lightning.generation.base import sample_team
    from comlrl_lightning.runtime.rng import RandomStream

    module = _module(job, sampling=_sampling(job))
    prompts = [[f(item) for f in FORMATTERS] for item in common.items(job["items"])]

    def sample():
        return sample_team(module.generator, module.team, prompts, job["samples"], module.generation_settings, stream)

    stream = RandomStream(0)
    sample()  # warm-up
    seconds, completions = common.best_of(sample)
    sequences = len(prompts) * AGENTS * job["samples"]
    digest = hashlib.sha256(repr([[[c.ids for c in row] for row in agent] for agent in completions]).encode())
    return {
        "sequences": sequences,
        "seconds": seconds,
        "sequences_per_s": sequences / seconds,
        "digest": digest.hexdigest()[:16],
    }


# ------------------------------------------------------------------------------------------------
# Plan, report and summary lines (used by run.py)


def measure(run, plan: Dict[str, Any], models: Dict[str, Dict], quick: bool) -> Dict[str, Any]:
    """Both settings side by side for every model: the step at each batch size, then the collection."""
    sizes = QUICK if quick else FULL
    results: Dict[str, Any] = {
        "step": {},
        "collection": {},
        "sampling": {},
        "plan": sizes,
        "collection_settings": plan["collection"],
    }
    for name in plan["models"]:
        model = {"model": models[name]["path"], "model_name": name}
        step = dict(
            model,
            job="lora_team_step",
            pair_pool=plan["pair_pool"],
            completion_lengths=plan["completion_lengths"],
            min_pairs=plan["step_min_pairs"][name],
            min_seconds=plan["step_min_seconds"],
        )
        results["step"][name] = {
            batch: {
                setting: run("ours", dict(step, batch_size=batch, one_pass=setting == "one_pass"))
                for setting in ("per_agent", "one_pass")
            }
            for batch in sizes["batch_sizes"]
        }
        for key, job in (("collection", plan["collection"]), ("sampling", sizes["sampling"])):
            job = dict(model, job=f"lora_team_{key}", **job)
            results[key][name] = {
                setting: run("ours", dict(job, one_pass=setting == "one_pass")) for setting in ("per_agent", "one_pass")
            }
    return results


def _speedup(sides: Dict[str, Dict[str, Any]], key: str) -> float:
    return sides["one_pass"][key] / sides["per_agent"][key]


def summary(results: Dict[str, Any]) -> list:
    """``lora_team_step_speedup_<model>`` at the largest batch (as the other step rows), then at each
    batch; ``lora_team_collection_speedup_<model>``; ``lora_team_sampling_speedup_<model>`` (one per item)."""
    largest = max(results["plan"]["batch_sizes"])
    lines = []
    for name, batches in results["step"].items():
        lines.append((f"lora_team_step_speedup_{name}", _speedup(batches[largest], "pairs_per_s")))
        lines += [(f"lora_team_step_speedup_{name}_batch_{b}", _speedup(s, "pairs_per_s")) for b, s in batches.items()]
    for key in ("collection", "sampling"):
        for name, sides in results[key].items():
            lines.append((f"lora_team_{key}_speedup_{name}", _speedup(sides, "sequences_per_s")))
    return lines


def markdown(results: Dict[str, Any]) -> str:
    collection, sampling = results["collection_settings"], results["plan"]["sampling"]
    lines = [
        "### A LoRA team in one pass",
        "",
        f"A team of {AGENTS} LoRA adapters (r = {LORA_R}, peft's default targets `q_proj` and `v_proj`) on one base, "
        "with `team.lora_one_pass: true` (the default: every agent's rows in one forward of the base, each through its own "
        "adapter; all agents' prompts in the same `generate()` calls) against `false` (one pass per agent); the same "
        "pairs, prompts and seeds, in separate processes of this run. MADPO step as above (collate, margins, loss, "
        f"backward, AdamW); collection of {collection['items']} items, K = {collection['candidates']} per agent, "
        f"max_new_tokens {collection['max_new_tokens']}; sampling of {sampling['items']} items, one completion per agent "
        "and item (what evaluation samples). Both settings sample the same tokens (checked: the same digest), so they "
        "do the same work.",
        "",
        "| LoRA team, 4 agents | model | batch | one pass per agent | one pass | speedup | peak RSS per agent / one pass (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, batches in results["step"].items():
        for batch, sides in batches.items():
            per, one = sides["per_agent"], sides["one_pass"]
            lines.append(
                f"| MADPO step (pairs/s) | {name} | {batch} | {per['pairs_per_s']:.1f} | {one['pairs_per_s']:.1f} | "
                f"{_speedup(sides, 'pairs_per_s'):.2f}x | {_rss(per)} / {_rss(one)} |"
            )
    for key, label in (("collection", "collection"), ("sampling", "sampling, 1 per item")):
        for name, sides in results[key].items():
            per, one = sides["per_agent"], sides["one_pass"]
            same = "same tokens" if per["digest"] == one["digest"] else "tokens differ"
            lines.append(
                f"| {label} (sequences/s) | {name} | - | {per['sequences_per_s']:.1f} | {one['sequences_per_s']:.1f} | "
                f"{_speedup(sides, 'sequences_per_s'):.2f}x ({same}) | {_rss(per)} / {_rss(one)} |"
            )
    lines.append("")
    return "\n".join(lines)


def _rss(result: Dict[str, Any]) -> str:
    value = result.get("peak_rss_mb")
    return "-" if value is None else str(round(value))


JOBS = {f.__name__: f for f in (lora_team_step, lora_team_collection, lora_team_sampling)}

if __name__ == "__main__":
    common.worker_main(lambda job: JOBS[job["job"]](job))
