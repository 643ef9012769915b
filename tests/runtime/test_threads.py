"""Thread defaults: one thread for a small model, torch's default for a real one, the user's count always."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.runtime.threads import (
    THREADS_VARIABLE,
    TINY_MODEL_PARAMETERS,
    ThreadDefaults,
    choose_threads,
    physical_cores,
    requested_threads,
    set_thread_default,
    torch_default_threads,
)


def test_a_small_model_runs_on_one_thread_and_a_real_one_keeps_torchs_default():
    small = choose_threads(271_000, current=2, default=2, environ={})
    assert small.count == 1
    assert small.line() == f"threads: 1 (a small model, 271 K parameters; {THREADS_VARIABLE}=N to change)"
    real = choose_threads(TINY_MODEL_PARAMETERS, current=8, default=8, environ={})
    assert real.count == 8 and real.line().startswith("threads: 8 (one per core, 20.0 M parameters")


def test_the_users_count_wins_in_its_order():
    assert choose_threads(10, 2, 2, {THREADS_VARIABLE: "2", "OMP_NUM_THREADS": "3"}).line() == (
        f"threads: 2 ({THREADS_VARIABLE}=2)"
    )
    assert choose_threads(10, 2, 2, {"OMP_NUM_THREADS": "3,1"}).count == 3  # one count per nesting level
    assert choose_threads(10, 2, 2, {THREADS_VARIABLE: " "}).count == 1  # empty: not set
    kept = choose_threads(10, current=2, default=4, environ={})  # torch.set_num_threads(2) on 4 cores
    assert kept.count == 2 and "torch.set_num_threads" in kept.reason
    with pytest.raises(ConfigurationError, match=f"^{THREADS_VARIABLE}='two': give a positive whole number"):
        requested_threads({THREADS_VARIABLE: "two"})
    with pytest.raises(ConfigurationError, match="^OMP_NUM_THREADS='0'"):
        requested_threads({"OMP_NUM_THREADS": "0"})


def test_torchs_default_is_its_variables_else_one_per_physical_core(tmp_path):
    assert torch_default_threads({}, physical_cores=4) == 4
    assert torch_default_threads({"OMP_NUM_THREADS": "3"}, 4) == 3
    assert torch_default_threads({"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "2"}, 4) == 2  # torch reads MKL's last
    # two cores with two hardware threads each, and a CPU this process may not use
    for cpu, core in enumerate([0, 0, 1, 1, 2]):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert physical_cores([0, 1, 2, 3], tmp_path) == 2
    assert physical_cores([1, 4], tmp_path) == 2
    assert physical_cores([0, 7], tmp_path) == 2  # a CPU without topology: the CPUs are counted


def test_the_callback_sets_the_count_once_and_says_so(monkeypatch, caplog):
    import logging

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    try:
        callback = ThreadDefaults()
        with caplog.at_level(logging.INFO):
            callback.on_fit_start(None, nn.Linear(4, 4))  # type: ignore[arg-type]
            callback.on_validation_start(None, nn.Linear(4, 4))  # type: ignore[arg-type]
        assert torch.get_num_threads() == 1
        assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("threads:")] == [
            f"threads: 1 ({THREADS_VARIABLE}=1)"
        ]
        monkeypatch.setenv(THREADS_VARIABLE, "2")
        assert set_thread_default(nn.Linear(4, 4)).count == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
