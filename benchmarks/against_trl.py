"""Ours against Hugging Face TRL on one agent: DPO step, DPO in its trainer, GRPO step (run.py's TRL rows).

Both sides load the same model folders, take the same pairs and prompts (``dpo_check`` first
proves that TRL's collated batch holds our token ids and that the two sides' margins agree), run
float32 on 1 thread with the same AdamW, learning rate and weight decay. TRL's side runs in its
own venv (``refenv.py``), its differing defaults pinned in ``trl_jobs.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import common
from report import _f, _ratio, _rss

SIDES = ("ours", "trl")


def measure(
    run: Callable[[str, Dict[str, Any]], Dict[str, Any]],
    models: Dict[str, Dict],
    quick: bool,
    plan: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Every TRL row for the plan's models (default: ``TRL_QUICK`` or ``TRL_FULL``; the real model's
    plan sets its own pair sizes); raises when the two sides do not see the same batch."""
    plan = plan or (common.TRL_QUICK if quick else common.TRL_FULL)
    results: Dict[str, Any] = {"plan": plan, "versions": run("trl", {"job": "versions"})}
    for key in ("check", "dpo_step", "dpo_fit", "grpo_step"):
        results[key] = {}
    full = dict(common.FULL if not quick else common.QUICK, **plan.get("pairs", {}))
    for name in plan["models"]:
        model = {"model": models[name]["path"], "model_name": name}
        pairs = dict(
            model,
            agents=1,
            score_last_token=True,
            batch_size=plan["dpo_batch_size"],
            pair_pool=full["pair_pool"],
            completion_lengths=full["completion_lengths"],
            words=full.get("words", False),
            context_words=full.get("context_words", 0),
            pairs_per_prompt=full.get("pairs_per_prompt", 1),
        )
        check = {side: run(side, dict(pairs, job="dpo_check")) for side in SIDES}
        problems = common.dpo_disagreements(check["ours"], check["trl"])
        if problems:
            raise RuntimeError(f"ours and TRL do not see the same batch ({name}): " + "; ".join(problems[:5]))
        results["check"][name] = {side: {"positions": check[side]["positions"]} for side in SIDES}
        step = dict(pairs, min_pairs=plan["dpo_min_pairs"][name], min_seconds=full["step_min_seconds"])
        results["dpo_step"][name] = {
            side: run(side, dict(step, job="dpo_step" if side == "trl" else "madpo_step")) for side in SIDES
        }
        rows = plan.get("rows", ("dpo_step", "dpo_fit", "grpo_step"))
        fit = dict(pairs, min_pairs=3 * plan["dpo_min_pairs"][name])
        if "dpo_fit" in rows:
            results["dpo_fit"][name] = {
                side: run(side, dict(fit, job="dpo_fit" if side == "trl" else "madpo_fit")) for side in SIDES
            }
        grpo = dict(model, job="grpo_step", **{k: v for k, v in plan["grpo"].items() if k != "steps"})
        if "grpo_step" in rows:
            steps = plan["grpo"]["steps"][name]
            results["grpo_step"][name] = {side: run(side, dict(grpo, steps=steps)) for side in SIDES}
    return results


def _speedup(results: Dict[str, Any], row: str, model: str) -> Optional[float]:
    sides = results[row].get(model) or {}
    key = "steps_per_s" if row == "grpo_step" else "pairs_per_s"
    return _ratio((sides.get("ours") or {}).get(key), (sides.get("trl") or {}).get(key))


def summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    """``trl_<row>_speedup_<model>``: ours / TRL (higher is better)."""
    return [
        (f"trl_{row}_speedup_{model}", _speedup(results, row, model))
        for row in ("dpo_step", "dpo_fit", "grpo_step")
        for model in results["plan"]["models"]
    ]


def real_summary(results: Dict[str, Any]) -> List[Tuple[str, Optional[float]]]:
    """``real_trl_<row>_speedup``: ours / TRL on the real model (the real plan's one model)."""
    (model,) = results["plan"]["models"]
    return [(f"real_trl_{row}_speedup", _speedup(results, row, model)) for row in ("dpo_step", "dpo_fit", "grpo_step")]


def _pairs_text(plan: Dict[str, Any]) -> str:
    pairs = plan.get("pairs")
    if not pairs:
        return "agent 0's share of the MADPO pairs above"
    low, high = pairs["completion_lengths"]
    text = f"{pairs['pair_pool']} pairs of a short prompt and {low}-{high} random whole words (then EOS)"
    if pairs.get("context_words"):
        text += (
            f", {pairs['context_words']} random words before each prompt and {pairs['pairs_per_prompt']} "
            "consecutive pairs per prompt (the coding task's layout)"
        )
    return text


def markdown(results: Dict[str, Any], parameters: Dict[str, Dict]) -> str:
    plan, versions = results["plan"], results["versions"]
    grpo = plan["grpo"]
    out = [
        "### Against Hugging Face TRL (one agent)",
        "",
        f"TRL {versions.get('trl')} in its own venv (torch {versions.get('torch')}, transformers "
        f"{versions.get('transformers')}), the same model folders, float32, 1 thread, AdamW (torch's fused kernel) "
        f"lr {common.LEARNING_RATE:g}, weight decay {common.WEIGHT_DECAY:g}, constant learning rate, no clipping, no "
        f"gradient checkpointing, no logging on either side. DPO: {_pairs_text(plan)}, batch "
        f"{plan['dpo_batch_size']}, beta {common.DPO_BETA:g}, every completion token scored (EOS included) on both "
        "sides; TRL has no reference-free DPO, so it runs with `precompute_ref_log_probs=True` (the reference "
        "log-probs computed once before training, not timed) and its step costs what ours does, one forward and "
        "backward of the policy on winners and losers. Before timing, both sides collate the first batch: TRL's "
        "batch holds exactly our token ids and the two sides' margins agree (`dpo_check`). Step: TRL's collator + "
        "`DPOTrainer.training_step` + the optimizer step against ours as in the MADPO rows; fit: `DPOTrainer.train()` "
        "against `Trainer.fit`, the same batches in the same order. GRPO: one agent rewarded by the vowel share of "
        f"its completion, {grpo['items']} prompts x {grpo['generations']} samples per step, max_new_tokens "
        f"{grpo['max_new_tokens']}, temperature 1, top_p 1, no top-k, no KL term (TRL `beta=0`, one iteration per "
        "generation), `GRPOTrainer.train()` against our `MAGRPOModule` in `Trainer.fit`; the median step time after "
        "two warm-up steps.",
        "",
        "| against TRL | params | TRL | ours | speedup | peak RSS TRL / ours (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for row, label, key, unit in (
        ("dpo_step", "DPO step", "pairs_per_s", "pairs/s"),
        ("dpo_fit", "DPO in the trainer", "pairs_per_s", "pairs/s"),
        ("grpo_step", "GRPO step", "steps_per_s", "steps/s"),
    ):
        for model in [m for m in plan["models"] if m in results[row]]:
            sides = results[row][model]
            trl, ours = sides["trl"], sides["ours"]
            out.append(
                f"| {label}, {model} | {parameters[model]['parameters'] / 1e6:.2f}M | {_f(trl[key], 2)} {unit} | "
                f"{_f(ours[key], 2)} {unit} | {_f(_speedup(results, row, model), 2, 'x')} | "
                f"{_f(_rss(trl), 0)} / {_f(_rss(ours), 0)} |"
            )
    positions = ", ".join(
        f"{model}: TRL {results['check'][model]['trl']['positions']:,}, ours {results['check'][model]['ours']['positions']:,}"
        for model in plan["models"]
    )
    shares = ", ".join(
        f"{model}: TRL {_f(100 * results['grpo_step'][model]['trl']['sampling_share'], 0, '%')}, ours "
        f"{_f(100 * results['grpo_step'][model]['ours']['sampling_share'], 0, '%')}"
        for model in plan["models"]
        if model in results["grpo_step"]
    )
    if shares:
        out += [
            "",
            f"Sampling's share of the timed GRPO steps ({shares}): TRL's `generate()` over every prompt repeated "
            f"{grpo['generations']} times against our sampling, which prefills each prompt once for its samples.",
        ]
    out += [
        "",
        f"Token positions one DPO batch of {plan['dpo_batch_size']} pairs computes ({positions}): TRL pads "
        "`[prompt + chosen; prompt + rejected]` to the longest row, so every prompt runs twice and short completions "
        "carry padding; ours runs each distinct prompt once and no padding (packed scoring).",
    ]
    return "\n".join(out) + "\n"
