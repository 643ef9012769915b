"""Before and after on the held-out problems of a cooperative coding run, with bootstrap intervals.

    python benchmarks/coding_evidence.py runs/coding_madpo_iter [more run folders: one per seed]
        [--plot docs/assets/coding_evidence.png] [--markdown evidence.md]
    python benchmarks/coding_evidence.py runs/two_turns --turn 1 --against runs/one_turn    # arm - arm

Reads what a run of ``configs/coding_madpo_iter.yaml`` (or ``coding_marlhf.yaml``) writes:

* ``lightning_logs/version_*/evaluation_programs.jsonl``: every evaluated joint program (the configs
  log all 32 held-out problems at each evaluation), from which each problem's pass (every test
  passed), reward (0 to 4), parse and calls-``aux`` outcomes are read; parse and calls-``aux`` are
  recomputed from the two completions with the task's own :func:`combine`, so older files work too;
* ``preference_replay/iteration_NNNN.json``: each round's pairs, their raw rewards (both sides).

For each evaluation it prints the four shares with a 95% percentile bootstrap interval over problems
(10,000 resamples, seeded), and the after-minus-before difference with a paired bootstrap interval
(the same problems resampled on both sides). With several runs (seeds) the problems of all runs are
pooled per evaluation and the per-seed values are listed too. Per round: pairs, pairs per item,
the share of the item's comparisons that were ties (dropped), and the raw rewards of the pairs.
``--against`` another run: the first run minus it at their first and last evaluations, paired by
problem (two arms of one comparison; ``--against-turn`` picks the other run's turn).

The newest log version is the highest number (``version_10`` after ``version_9``). With one
evaluation (none after training) no change is printed, only that there is none to compare. Only the
run's own files are read: a samples or round file that is a symbolic link, or that resolves outside
the run folder (another run's), is refused by name; a torn line or a missing or mistyped field is
one line naming the file, the line and the field.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

METRICS = ("pass_at_1", "code_reward_mean", "parse_rate", "calls_aux_rate")
RESAMPLES = 10_000


def bootstrap_interval(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = lambda v: sum(v) / len(v),
    resamples: int = RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> Tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values``.

    Draws ``resamples`` samples of ``len(values)`` with replacement (a seeded ``random.Random``),
    computes the statistic of each, and returns the ``(1 - level) / 2`` and ``(1 + level) / 2``
    quantiles of those statistics (nearest rank).
    """
    if not values:
        raise ValueError("bootstrap_interval needs at least one value")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    low = stats[int((1 - level) / 2 * (resamples - 1))]
    high = stats[int(round((1 + level) / 2 * (resamples - 1)))]
    return low, high


def paired_difference_interval(
    before: Sequence[float], after: Sequence[float], resamples: int = RESAMPLES, level: float = 0.95, seed: int = 0
) -> Tuple[float, float, float]:
    """Mean of ``after - before`` over paired problems and its percentile bootstrap interval.

    The differences ``d_j = after_j - before_j`` are resampled (the same problem on both sides), so
    the interval reflects the change on the problems, not the spread between them.
    """
    if len(before) != len(after):
        raise ValueError(f"paired samples differ in length: {len(before)} and {len(after)}")
    differences = [a - b for a, b in zip(after, before)]
    low, high = bootstrap_interval(differences, resamples=resamples, level=level, seed=seed)
    return sum(differences) / len(differences), low, high


RECORD_FIELDS: Dict[str, Union[type, Tuple[type, ...]]] = {
    "step": int,
    "task_id": (str, int),
    "status": str,
    "passed": int,
    "total": int,
    "reward": (int, float),
}
"""The fields every evaluated program's record holds, and their JSON types."""
COMPLETION_FIELDS: Dict[str, Union[type, Tuple[type, ...]]] = {"aux_completion": str, "main_completion": str}
"""The fields the parse and calls-``aux`` outcomes are recomputed from (where the problem is known)."""


def version_order(folder: Path) -> Tuple[int, str]:
    """Sort key of a Lightning log folder: ``version_<n>`` by the number ``n`` (``version_10`` after
    ``version_9``), before them any folder whose name has no number, by name."""
    suffix = folder.name[len("version_") :]
    return (int(suffix), folder.name) if suffix.isascii() and suffix.isdigit() else (-1, folder.name)


def own_file(run: Path, path: Path) -> Path:
    """``path``, a file the run ``run`` wrote itself: a symbolic link, or a path that resolves outside
    the run folder (another run's samples), is refused naming it."""
    if path.is_symlink():
        raise SystemExit(f"{path}: a symbolic link (to {os.readlink(path)}); only the run's own files are read.")
    resolved, root = path.resolve(), run.resolve()
    if not resolved.is_relative_to(root):
        raise SystemExit(
            f"{path}: resolves to {resolved}, outside the run folder {root}; only the run's own files are read."
        )
    return path


def json_records(path: Path) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(line number, record)`` of every non-blank line of a JSONL file; a line that is not a JSON
    object (torn, not UTF-8, nested too deep, a number too long) is one line naming the file and line."""
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise SystemExit(f"{path}: line {number}: not a JSON record (nested too deep).") from None
        except ValueError as error:  # a JSONDecodeError, a UnicodeDecodeError, an integer past Python's digit limit
            reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error).split(";")[0]
            raise SystemExit(f"{path}: line {number}: not a JSON record ({reason}); a torn or damaged line?") from None
        if not isinstance(record, dict):
            raise SystemExit(f"{path}: line {number}: a JSON {type(record).__name__}, not a record.")
        yield number, record


def check_fields(record: Mapping[str, Any], fields: Mapping[str, Union[type, Tuple[type, ...]]], where: str) -> None:
    """Every field of ``fields`` is in ``record`` with its type (a bool is not a number), else one line
    naming ``where`` and the field."""
    for name, kind in fields.items():
        if name not in record:
            raise SystemExit(f"{where}: no field {name!r}.")
        value = record[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            kinds = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise SystemExit(f"{where}: field {name!r} is a {type(value).__name__}, not {kinds}.")


def problem_outcomes(record: Mapping, item: Optional[Mapping]) -> Dict[str, float]:
    """One evaluated program's four outcomes: passed every test, reward, parses, calls ``aux``."""
    passed = float(record["status"] == "finished" and record["total"] > 0 and record["passed"] == record["total"])
    outcome = {"pass_at_1": passed, "code_reward_mean": float(record["reward"])}
    if item is not None:
        from comlrl_lightning.tasks.coding.program import combine

        joint = combine(record["aux_completion"], record["main_completion"], item)
        outcome.update(parse_rate=float(joint.parses), calls_aux_rate=float(joint.calls_aux))
    else:
        outcome.update(parse_rate=float(record.get("parses", 0)), calls_aux_rate=float(record.get("calls_aux", 0)))
    return outcome


def evaluations(
    run: Path, items: Mapping[str, Mapping], turn: Optional[int] = None
) -> Dict[int, Dict[str, Dict[str, float]]]:
    """``{step: {task_id: outcomes}}`` of every evaluation a run logged (the newest log version).

    A multi-turn run's records say their ``turn``: ``turn`` picks the answers after that turn,
    ``None`` the final answers (the last turn's records; a single-turn run's only ones)."""
    files = sorted(
        run.glob("lightning_logs/version_*/evaluation_programs.jsonl"), key=lambda f: version_order(f.parent)
    )
    if not files:
        raise SystemExit(f"{run}: no lightning_logs/version_*/evaluation_programs.jsonl")
    path = own_file(run, files[-1])
    chosen: Dict[Tuple[int, str], Tuple[int, Mapping]] = {}
    for number, record in json_records(path):
        where = f"{path}: line {number}"
        check_fields(record, {**RECORD_FIELDS, "turn": int} if "turn" in record else RECORD_FIELDS, where)
        if record["task_id"] in items:
            check_fields(record, COMPLETION_FIELDS, where)
        key, record_turn = (record["step"], record["task_id"]), record.get("turn", 1)
        if turn is not None and record_turn != turn:
            continue
        if key not in chosen or record_turn >= chosen[key][0]:
            chosen[key] = (record_turn, record)
    if not chosen:
        raise SystemExit(f"{path}: no evaluated program" + (f" of turn {turn}." if turn is not None else "."))
    found: Dict[int, Dict[str, Dict[str, float]]] = {}
    for (step, task_id), (_, record) in chosen.items():
        found.setdefault(step, {})[task_id] = problem_outcomes(record, items.get(task_id))
    return found


def raw_reward(pair: Mapping, side: str) -> float:
    """A pair's winner's or loser's raw reward (before the reward processor), else its training reward."""
    target, comparator = pair.get("target_raw_reward"), pair.get("comparator_raw_reward")
    if target is None or comparator is None:
        return float(pair[side + "_reward"])
    return max(target, comparator) if side == "winner" else min(target, comparator)


def round_file(path: Path) -> Dict[str, Any]:
    """A round file's ``iteration`` and ``pairs``, each pair with the rewards :func:`raw_reward` reads;
    a torn file or a missing or mistyped field is one line naming the file (and the pair)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except RecursionError:
        raise SystemExit(f"{path}: not a JSON round file (nested too deep).") from None
    except ValueError as error:
        where = f" (line {error.lineno}: {error.msg})" if isinstance(error, json.JSONDecodeError) else ""
        raise SystemExit(f"{path}: not a JSON round file{where}; a torn or damaged file?") from None
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: a JSON {type(data).__name__}, not a round file.")
    check_fields(data, {"iteration": int, "pairs": list}, str(path))
    for index, pair in enumerate(data["pairs"]):
        if not isinstance(pair, dict):
            raise SystemExit(f"{path}: pair {index}: a JSON {type(pair).__name__}, not a pair.")
        raw = {"target_raw_reward": (int, float), "comparator_raw_reward": (int, float)}
        trained = {"winner_reward": (int, float), "loser_reward": (int, float)}
        both_raw = all(pair.get(name) is not None for name in raw)
        check_fields(pair, raw if both_raw else trained, f"{path}: pair {index}")
    return data


def round_summary(run: Path, items_per_round: int, comparisons_per_item: int) -> List[Dict[str, float]]:
    """Per round: pairs, items with a pair, the tie share and the mean raw reward of each side of the pairs.

    Each item makes ``comparisons_per_item`` comparisons (candidate j of the team against candidate j
    of the comparator); a tie makes no pair, so the tie share is
    ``1 - pairs / (items_per_round * comparisons_per_item)`` when every non-tie is kept.
    """
    rows = []
    for path in sorted((run / "preference_replay").glob("iteration_*.json")):
        data = round_file(own_file(run, path))
        pairs = data["pairs"]
        items = {json.dumps(pair.get("prompts", pair.get("prompt")), sort_keys=True) for pair in pairs}
        winners = [raw_reward(p, "winner") for p in pairs]
        losers = [raw_reward(p, "loser") for p in pairs]
        rows.append(
            {
                "round": data["iteration"],
                "pairs": len(pairs),
                "items_with_pairs": len(items),
                "winner_raw_mean": sum(winners) / max(len(winners), 1),
                "loser_raw_mean": sum(losers) / max(len(losers), 1),
                "tie_share": 1 - len(pairs) / (items_per_round * comparisons_per_item),
            }
        )
    return rows


def common_steps(runs: List[Dict[int, Dict[str, Dict[str, float]]]]) -> List[int]:
    """The evaluation steps every run logged, in order; none in common is an error."""
    steps = sorted(set.intersection(*(set(run) for run in runs)))
    if not steps:
        logged = "; ".join(f"run {number}: {sorted(run)}" for number, run in enumerate(runs))
        raise SystemExit(f"the runs share no evaluation step (steps logged: {logged}).")
    return steps


def summarize(runs: List[Dict[int, Dict[str, Dict[str, float]]]]) -> List[Dict]:
    """Per evaluation step (pooled over runs): each metric's mean and bootstrap interval, and per run."""
    steps = common_steps(runs)
    rows = []
    for step in steps:
        row: Dict = {"step": step, "problems": sum(len(run[step]) for run in runs)}
        for metric in METRICS:
            values = [outcome[metric] for run in runs for outcome in run[step].values()]
            row[metric] = (sum(values) / len(values), *bootstrap_interval(values))
            row[metric + "_per_run"] = [sum(o[metric] for o in run[step].values()) / len(run[step]) for run in runs]
        rows.append(row)
    return rows


def change(runs: List[Dict[int, Dict[str, Dict[str, float]]]]) -> Optional[Dict[str, Tuple[float, float, float]]]:
    """After (the last evaluation) minus before (the first), paired by run and problem, per metric;
    ``None`` with one evaluation (nothing after training to compare, not a change of zero)."""
    steps = common_steps(runs)
    if len(steps) < 2:
        return None
    first, last = steps[0], steps[-1]
    result = {}
    for metric in METRICS:
        before, after = [], []
        for run in runs:
            for task_id in sorted(set(run[first]) & set(run[last])):
                before.append(run[first][task_id][metric])
                after.append(run[last][task_id][metric])
        result[metric] = paired_difference_interval(before, after)
    return result


def against(
    run: Dict[int, Dict[str, Dict[str, float]]], other: Dict[int, Dict[str, Dict[str, float]]]
) -> List[Tuple[str, Dict[str, Tuple[float, float, float]]]]:
    """``run`` minus ``other`` at their first evaluations and at their last (where both logged more than
    one), paired by problem, per metric (two arms of one comparison, e.g. one turn against two at the
    same token budget)."""
    compared = []
    # with one evaluation in an arm its "last" is its first (before training): only "first" is compared
    labels = (("first", min), ("last", max)) if len(run) > 1 and len(other) > 1 else (("first", min),)
    for label, pick in labels:
        mine, theirs = run[pick(run)], other[pick(other)]
        problems = sorted(set(mine) & set(theirs))
        values = {
            m: paired_difference_interval([theirs[p][m] for p in problems], [mine[p][m] for p in problems])
            for m in METRICS
        }
        compared.append((label, values))
    return compared


def _signed(mean: float, low: float, high: float) -> str:
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


NO_CHANGE = "no evaluation after training: one evaluation was logged, so there is no change to compare"
"""The after-minus-before row of a run with one evaluation (in place of a change of zero)."""


def markdown(rows: List[Dict], difference: Optional[Dict], rounds: List[List[Dict]]) -> str:
    """The tables the docs page quotes (``difference`` ``None``: :data:`NO_CHANGE`)."""
    lines = ["| step | problems | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 2) + "|"]
    for row in rows:
        cells = [f"{row[m][0]:.3f} [{row[m][1]:.3f}, {row[m][2]:.3f}]" for m in METRICS]
        lines.append(f"| {row['step']} | {row['problems']} | " + " | ".join(cells) + " |")
    if difference is None:
        lines.append(f"| after - before (paired) | | {NO_CHANGE} |" + " |" * (len(METRICS) - 1))
    else:
        cells = [_signed(*difference[m]) for m in METRICS]
        lines.append("| after - before (paired) | | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| run | round | pairs | items with pairs | ties | winner raw reward | loser raw reward |",
        "|---" * 7 + "|",
    ]
    for number, run_rounds in enumerate(rounds):
        for r in run_rounds:
            lines.append(
                f"| {number} | {r['round']} | {r['pairs']} | {r['items_with_pairs']} | {r['tie_share']:.0%} | "
                f"{r['winner_raw_mean']:.3f} | {r['loser_raw_mean']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def plot(rows: List[Dict], path: Path) -> None:
    """Four panels, one per metric: the value at each evaluation step with its bootstrap interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {
        "pass_at_1": "pass@1",
        "code_reward_mean": "reward (0-4)",
        "parse_rate": "parses",
        "calls_aux_rate": "calls aux",
    }
    figure, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    steps = [row["step"] for row in rows]
    for axis, metric in zip(axes, METRICS):
        means = [row[metric][0] for row in rows]
        errors = [
            [m - row[metric][1] for m, row in zip(means, rows)],
            [row[metric][2] - m for m, row in zip(means, rows)],
        ]
        axis.errorbar(steps, means, yerr=errors, marker="o", capsize=4, color="tab:blue")
        axis.set_title(titles[metric])
        axis.set_xlabel("optimizer step")
        axis.grid(alpha=0.3)
    figure.suptitle("Held-out HumanEval problems 0-31 (95% bootstrap interval over problems)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (trainer.default_root_dir), one per seed")
    parser.add_argument("--plot", type=Path, default=None, help="write the four-panel figure here (PNG)")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    parser.add_argument("--comparisons-per-item", type=int, default=4, help="preference_num_candidates")
    parser.add_argument("--items-per-round", type=int, default=16, help="training problems per round (limit)")
    parser.add_argument(
        "--turn", type=int, default=None, help="a multi-turn run's answers after this turn (default: final)"
    )
    parser.add_argument(
        "--against", type=Path, default=None, help="another arm's run folder: the first run minus it, paired by problem"
    )
    parser.add_argument("--against-turn", type=int, default=None, help="the other arm's turn (default: final)")
    args = parser.parse_args(argv)
    from comlrl_lightning.tasks.coding.humaneval import load_humaneval

    items = {item["task_id"]: item for item in load_humaneval()}
    runs = [evaluations(run, items, args.turn) for run in args.runs]
    rows, difference = summarize(runs), change(runs)
    text = markdown(
        rows, difference, [round_summary(run, args.items_per_round, args.comparisons_per_item) for run in args.runs]
    )
    print(text)
    for row in rows:
        print(f"step {row['step']}: " + ", ".join(f"{m} per run {row[m + '_per_run']}" for m in METRICS))
    if args.against is not None:
        other = evaluations(args.against, items, args.against_turn)
        lines = [f"| {args.runs[0].name} - {args.against.name} (paired) | evaluation | " + " | ".join(METRICS) + " |"]
        lines.append("|---|---|" + "---|" * len(METRICS))
        for label, values in against(runs[0], other):
            lines.append(f"| | {label} | " + " | ".join(_signed(*values[m]) for m in METRICS) + " |")
        text += "\n" + "\n".join(lines) + "\n"
        print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
