"""How rows of token ids are laid out for scoring: padded batches, stacked agents, packed groups.

A scoring batch (:func:`pack_sequences`) puts every completion at the same columns: prompts
left-padded to width ``P``, completions right-padded to width ``C``. A one-pass LoRA team stacks
its agents' batches into one (:func:`stack_batches`, undone by :func:`unstack_rows`). Packed
scoring attends completions in a few groups of alike length (:func:`completion_groups`).
"""

from __future__ import annotations

from typing import List, Sequence

import torch
import torch.nn.functional as F

COMPLETION_GROUPS = 3
"""Completions are attended in at most this many SDPA calls, grouped by length (less padding per call)."""


def _as_list(tokens) -> List[int]:
    return tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(input_ids, attention_mask)``."""
    rows = [_as_list(s) for s in sequences]
    width = max(len(s) for s in rows)
    input_ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in rows], dtype=torch.long)
    attention_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in rows], dtype=torch.long)
    return input_ids.view(len(rows), width), attention_mask.view(len(rows), width)


def stack_batches(batches: Sequence[dict], pad_id: int) -> tuple[dict, torch.Tensor]:
    """:func:`pack_sequences` batches of several agents as one batch, and the agent of each row.

    Prompts are left-padded to the widest prompt, completions right-padded to the widest
    completion (the layout stays: every completion at the same columns). Returns the stacked
    ``input_ids``, ``attention_mask``, ``score_mask`` and ``[rows]`` agent indices, agent by agent.
    """
    completion_width = max(batch["score_mask"].shape[1] for batch in batches)
    prompt_width = max(batch["input_ids"].shape[1] - batch["score_mask"].shape[1] for batch in batches)
    parts: dict = {"input_ids": [], "attention_mask": [], "score_mask": []}
    for batch in batches:
        width = batch["score_mask"].shape[1]
        prompt = batch["input_ids"].shape[1] - width
        for key, fill in (("input_ids", pad_id), ("attention_mask", 0)):
            tensor = batch[key]
            parts[key].append(
                torch.cat(
                    [
                        F.pad(tensor[:, :prompt], (prompt_width - prompt, 0), value=fill),
                        F.pad(tensor[:, prompt:], (0, completion_width - width), value=fill),
                    ],
                    dim=1,
                )
            )
        parts["score_mask"].append(F.pad(batch["score_mask"], (0, completion_width - width)))
    device = batches[0]["input_ids"].device
    groups = torch.cat(
        [torch.full((b["input_ids"].shape[0],), i, dtype=torch.long, device=device) for i, b in enumerate(batches)]
    )
    return {key: torch.cat(tensors) for key, tensors in parts.items()}, groups


def unstack_rows(values: torch.Tensor, batches: Sequence[dict]) -> List[torch.Tensor]:
    """``[rows, C]`` values of :func:`stack_batches` back into each batch's ``[M_i, C_i]``."""
    out, start = [], 0
    for batch in batches:
        rows, width = batch["score_mask"].shape
        out.append(values[start : start + rows, :width])
        start += rows
    return out


def pack_sequences(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    scored_lengths: Sequence[int],
    pad_id: int,
) -> dict:
    """Lay out prompt/completion pairs for :meth:`Team.score`.

    Returns ``input_ids`` and ``attention_mask`` of shape ``[M, P + C]`` (prompt left-padded to
    ``P``, completion right-padded to ``C >= 1``) and ``score_mask`` ``[M, C]``.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("Scoring a completion requires a non-empty tokenized prompt.")
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    completion_rows = [_as_list(c) for c in completions]
    width = max(1, max(len(c) for c in completion_rows))
    rows = len(completion_rows)
    completion_ids = torch.tensor([c + [pad_id] * (width - len(c)) for c in completion_rows], dtype=torch.long)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completion_rows], dtype=torch.long)
    scored = [min(max(int(n), 0), width) for n in scored_lengths]
    score_mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in scored], dtype=torch.float32)
    completion_ids, completion_mask, score_mask = (
        t.view(rows, width) for t in (completion_ids, completion_mask, score_mask)
    )
    return {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "score_mask": score_mask,
    }


def completion_groups(spans: List[int], groups: int = COMPLETION_GROUPS) -> List[List[int]]:
    """Rows with completion tokens to feed, split by length into at most ``groups`` groups of
    consecutive lengths that minimise the padded query positions.

    Dynamic programming over the distinct lengths (at most the longest completion, usually far
    fewer than the rows): ``cost[g][e]`` is the least padding of the rows of the ``e`` shortest
    lengths in ``g`` groups, a group padding its rows to its longest length.
    """
    rows = sorted((r for r, n in enumerate(spans) if n > 0), key=lambda r: spans[r])
    if not rows:
        return []
    widths = sorted({spans[r] for r in rows})
    upto = [0] * (len(widths) + 1)  # upto[e]: rows whose length is among the e shortest widths
    for e, width in enumerate(widths, start=1):
        upto[e] = upto[e - 1] + sum(1 for r in rows if spans[r] == width)
    count = len(widths)
    cost = [[0.0] + [float("inf")] * count] + [[float("inf")] * (count + 1) for _ in range(groups)]
    cut = [[0] * (count + 1) for _ in range(groups + 1)]
    for g in range(1, groups + 1):
        for end in range(1, count + 1):
            for begin in range(end):
                value = cost[g - 1][begin] + (upto[end] - upto[begin]) * widths[end - 1]
                if value < cost[g][end]:
                    cost[g][end], cut[g][end] = value, begin
    best = min(range(1, groups + 1), key=lambda g: cost[g][count])
    bounds, end = [], count
    for g in range(best, 0, -1):
        bounds.append((cut[g][end], end))
        end = cut[g][end]
    return [rows[upto[begin] : upto[end]] for begin, end in reversed(bounds) if end > begin]


__all__ = ["COMPLETION_GROUPS", "completion_groups", "left_pad", "pack_sequences", "stack_batches", "unstack_rows"]
