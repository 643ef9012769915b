"""tests/helpers/suite_order.py: files' seconds read from a --durations=0 report, longest first."""

from __future__ import annotations

import json

from tests.helpers import suite_order

REPORT = """
============================= slowest durations =============================
160.64s call     tests/trainers/test_real_model_seed_api.py::test_by_name[x::y]
99.24s setup    tests/runtime/test_sharding.py::test_sharded_madpo_equals_data_parallel
0.50s call     tests/runtime/test_sharding.py::test_decoder_layers
0.25s teardown tests/runtime/test_sharding.py::test_decoder_layers
3.00s call     tests/test_cli.py::test_help
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def test_a_files_seconds_add_its_tests_setup_call_and_teardown():
    assert suite_order.file_seconds(REPORT) == {
        "tests/trainers/test_real_model_seed_api.py": 160.64,
        "tests/runtime/test_sharding.py": 99.99,
        "tests/test_cli.py": 3.0,
    }


def test_only_the_first_report_of_a_log_of_several_runs_counts():
    later = "\n".join(["=== 14 passed in 176.52s ===", "=" * 29 + " slowest 15 durations " + "=" * 29])
    later += "\n44.46s call     tests/generation/test_vllm.py::test_sampling\n=== 14 passed ==="
    log = "ci: the default run done\n" + REPORT + "== 2708 passed, 17 skipped in 1192.90s ==\n" + later
    assert suite_order.file_seconds(log) == suite_order.file_seconds(REPORT)
    assert "tests/generation/test_vllm.py" not in suite_order.file_seconds(log)


def test_longest_first_puts_an_unmeasured_file_at_the_guess_and_keeps_ties_in_order():
    seconds = {"a.py": 1.0, "b.py": 50.0, "c.py": 50.0, "d.py": 9.0}
    order = suite_order.longest_first(["a.py", "b.py", "new.py", "c.py", "d.py", "b.py"], seconds)
    assert order == ["b.py", "c.py", "d.py", "new.py", "a.py"]


def test_the_suites_items_keep_each_files_tests_together_in_their_order(monkeypatch, tmp_path):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/x.py": 1.0, "tests/y.py": 30.0}))
    monkeypatch.setattr(suite_order, "DURATIONS", durations)

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    items = [Item(n) for n in ("tests/x.py::a", "tests/y.py::b", "tests/x.py::c", "tests/y.py::d[1]")]
    suite_order.order_items(items)
    assert [i.nodeid for i in items] == ["tests/y.py::b", "tests/y.py::d[1]", "tests/x.py::a", "tests/x.py::c"]


def test_recording_writes_the_table_longest_first(monkeypatch, tmp_path, capsys):
    log, durations = tmp_path / "suite.log", tmp_path / "durations.json"
    log.write_text(REPORT)
    monkeypatch.setattr(suite_order, "DURATIONS", durations)
    assert suite_order.main([str(log)]) == 0
    assert list(json.loads(durations.read_text()).items()) == [
        ("tests/trainers/test_real_model_seed_api.py", 160.6),
        ("tests/runtime/test_sharding.py", 100.0),
        ("tests/test_cli.py", 3.0),
    ]
    log.write_text("no durations here")
    assert suite_order.main([str(log)]) == 1 and "no '--durations=0' lines" in capsys.readouterr().err
