"""benchmarks/busy_machine.py: the default run on an idle and a busy machine, its rows and table."""

from __future__ import annotations

import importlib


def test_the_busy_machine_rows_read_the_final_reward_and_set_only_the_old_default(bench):
    busy = importlib.import_module("busy_machine")
    output = "evaluation (after training, 0 updates): eval/turn_1/reward_mean = -0.2775\n"
    output += "evaluation (after training, 320 updates): eval/turn_1/reward_mean = 0.0880\n"
    assert busy.final_reward(output) == 0.0880 and busy.final_reward("no run") is None
    environ = {"OMP_NUM_THREADS": "4", "COMLRL_LIGHTNING_THREADS": "3", "PATH": "/bin"}
    assert busy.row_environment("busy-old", 2, environ) == {"PATH": "/bin", "COMLRL_LIGHTNING_THREADS": "2"}
    assert busy.row_environment("idle-new", 2, environ) == {"PATH": "/bin"}
    rows = [
        dict(
            row="idle-new",
            wall_s=20.0,
            cpu_s=19.0,
            reward=0.088,
            timed_out=False,
            threads="threads: 1 (x)",
            load_before=0.1,
            load_after=1.0,
        ),
        dict(
            row="busy-new",
            wall_s=30.0,
            cpu_s=20.0,
            reward=0.088,
            timed_out=False,
            threads="threads: 1 (x)",
            load_before=1.0,
            load_after=2.0,
        ),
        dict(
            row="busy-old",
            wall_s=900.0,
            cpu_s=800.0,
            reward=None,
            timed_out=True,
            threads="threads: 2 (y)",
            load_before=1.0,
            load_after=2.0,
        ),
    ]
    assert busy.busy_over_idle(rows, "new") == 1.5 and busy.busy_over_idle(rows, "old") is None
    table = busy.markdown_table(rows, "today", "2 cores")
    assert "| busy-old | `threads: 2 (y)` | > 900 (stopped) | 800 | n/a | 1.0 / 2.0 |" in table
    assert "Busy over idle, new default: 1.50x wall time." in table and "old default" not in table
    assert busy.summary_lines(rows)[:3] == [
        "busy_machine_idle_new_wall_s: 20.0",
        "busy_machine_idle_new_cpu_s: 19.0",
        "busy_machine_idle_new_reward: 0.0880",
    ]
    assert busy.summary_lines(rows)[-1] == "busy_machine_busy_over_idle_new: 1.50"
