"""``comlrl-lightning env``: every section printed, each value the one the machine and the installation have."""

from __future__ import annotations

import platform
from importlib import metadata

import pytest
import torch

from comlrl_lightning.cli import main
from comlrl_lightning.environment_report import cpu_flags, isolation_section, package_versions, render

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme sse sse2 avx avx2 fma avx512f avx512_vnni
bugs\t\t: spectre_v1
processor\t: 1
flags\t\t: fpu
"""
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm sve\n"


def _sections(text: str) -> dict:
    """``{title: {name: value}}`` of a rendered report."""
    sections: dict = {}
    for line in text.splitlines():
        if line.startswith("## "):
            rows = sections[line[3:]] = {}
        elif line:
            assert line.startswith("- ")
            name, value = line[2:].split(": ", 1)
            rows[name] = value
    return sections


def test_the_command_prints_versions_threads_cpu_and_devices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["env", "--no_isolation"])
    assert exit_info.value.code == 0
    sections = _sections(capsys.readouterr().out)
    assert list(sections) == ["Versions", "Threads", "CPU", "Devices"]
    versions = sections["Versions"]
    assert versions[f"python ({platform.python_implementation()})"] == platform.python_version()
    for name in ("torch", "lightning", "transformers", "peft", "datasets", "jsonargparse"):
        assert versions[name] == metadata.version(name)
    try:
        vllm = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        vllm = "not installed"
    assert versions["vllm"] == vllm
    assert sections["Threads"]["torch.get_num_threads()"] == str(torch.get_num_threads())
    assert sections["Threads"]["torch.get_num_interop_threads()"] == str(torch.get_num_interop_threads())
    cpu = sections["CPU"]
    assert cpu["torch CPU capability"] == torch.backends.cpu.get_cpu_capability()
    assert int(cpu["cores this process may use"]) <= int(cpu["cores"])
    assert sections["Devices"]["CUDA"].startswith(
        "not available" if not torch.cuda.is_available() else torch.version.cuda
    )


def test_the_help_names_the_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["env", "--help"])
    assert exit_info.value.code == 0 and "comlrl-lightning env" in capsys.readouterr().out


def test_cpu_flags_are_read_from_the_first_flags_line_of_cpuinfo():
    assert cpu_flags(X86) == ["avx", "avx2", "fma", "avx512f", "avx512_vnni"]
    assert cpu_flags(ARM) == ["asimd", "sve"]
    assert cpu_flags("processor\t: 0\n") == []


def test_a_missing_distribution_is_named_not_installed():
    assert package_versions(["torch", "no-such-distribution-anywhere"]) == [
        ("torch", metadata.version("torch")),
        ("no-such-distribution-anywhere", "not installed"),
    ]


def test_an_isolation_probe_that_fails_is_reported_not_raised():
    def failing():
        raise OSError("no user namespaces here")

    title, rows = isolation_section(failing)
    assert title == "Test runner isolation" and rows == [("detection failed", "OSError: no user namespaces here")]
    assert render([isolation_section(lambda: {"landlock": True, "spare_uid": False})]).splitlines() == [
        "## Test runner isolation",
        "",
        "- landlock: on",
        "- spare_uid: OFF",
    ]


@pytest.mark.slow  # the runner's probe starts a sandboxed process
def test_the_report_shows_the_runners_isolation_as_the_runner_detects_it(capsys):
    import importlib

    runner = importlib.import_module("comlrl_lightning.tasks.coding.runner")
    with pytest.raises(SystemExit):
        main(["env"])
    shown = _sections(capsys.readouterr().out)["Test runner isolation"]
    assert shown == {name: "on" if on else "OFF" for name, on in runner.active_isolation().items()}
