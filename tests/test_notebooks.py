"""The notebooks in ``notebooks/`` run top to bottom, and every notebook is stored without outputs.

Each notebook runs in a fresh temporary working directory (whatever it writes stays out of the
repository), on a kernel started by the interpreter that runs the tests, with this checkout first
on its import path. A cell that raises fails the test with that cell's error.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any, List

import nbformat
import pytest
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from traitlets import default

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
KERNEL_NAME = "python3"
CELL_TIME_LIMIT_S = 180
NOTEBOOK_TIME_LIMIT_S = 240
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ThisInterpreterKernelSpecs(KernelSpecManager):
    """Only the ``python3`` kernel, always run by this interpreter: a ``python3`` kernel spec
    installed elsewhere on the machine (user or system Jupyter folders) may name another Python."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name != KERNEL_NAME:
            raise NoSuchKernel(kernel_name)
        return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())  # its argv starts with sys.executable


class ThisInterpreterKernelManager(AsyncKernelManager):
    @default("kernel_spec_manager")
    def _default_kernel_spec_manager(self) -> KernelSpecManager:
        return ThisInterpreterKernelSpecs()


def kernel_environment() -> dict:
    """The test process's environment with this checkout first on the kernel's import path, and
    torch on one thread unless the caller chose (as the suite's own process runs, see conftest):
    the notebooks' tiny models run faster so, above all on a busy two-core machine."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))
    environment.setdefault("OMP_NUM_THREADS", "1")
    return environment


def notebook_client(notebook: nbformat.NotebookNode, working_dir: Path, deadline: float) -> NotebookClient:
    """A client that stops at the first error; each cell may take the per-cell limit or what is left
    of the notebook's limit, whichever is less."""

    def cell_timeout(cell: Any) -> int:
        return max(1, min(CELL_TIME_LIMIT_S, int(deadline - time.monotonic())))

    return NotebookClient(
        notebook,
        kernel_name=KERNEL_NAME,
        kernel_manager_class=ThisInterpreterKernelManager,
        timeout_func=cell_timeout,
        resources={"metadata": {"path": str(working_dir)}},  # the kernel's working directory
        allow_errors=False,
    )


def execute(notebook: nbformat.NotebookNode, working_dir: Path, limit_s: float = NOTEBOOK_TIME_LIMIT_S) -> None:
    """Run every cell in order; a failing or overlong cell fails the test with what it printed."""
    client = notebook_client(notebook, working_dir, time.monotonic() + limit_s)
    try:
        client.execute(env=kernel_environment())
    except CellExecutionError as error:
        pytest.fail(f"a cell raised:\n{ANSI_ESCAPE.sub('', str(error))}", pytrace=False)
    except CellTimeoutError as error:
        pytest.fail(
            f"over the time limit ({CELL_TIME_LIMIT_S} s a cell, {limit_s:.0f} s the notebook): {error}", pytrace=False
        )


RUN_OUTPUT_FOLDERS = {"runs", "lightning_logs", "wandb", "build", "dist", "__pycache__"}  # ignored by git


def stored_notebooks() -> List[Path]:
    """Every notebook git would hold: outside hidden folders (.git, virtual environments, notebook
    checkpoints) and the run-output folders that git ignores."""
    found = []
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = [name for name in subfolders if not name.startswith(".") and name not in RUN_OUTPUT_FOLDERS]
        found += [Path(folder) / name for name in files if name.endswith(".ipynb")]
    return sorted(found)


STORED_NOTEBOOKS = stored_notebooks()


def notebook_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_notebook_folder_has_notebooks():
    assert NOTEBOOKS, f"no notebooks in {REPO / 'notebooks'}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=notebook_id)
def test_notebook_runs_top_to_bottom(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    execute(notebook, tmp_path)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code_cells)  # every code cell ran


@pytest.mark.parametrize("path", STORED_NOTEBOOKS, ids=notebook_id)
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    kernelspec = notebook.metadata.get("kernelspec", {})
    assert kernelspec.get("name") == KERNEL_NAME and kernelspec.get("language") == "python", kernelspec
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"cells {dirty} hold outputs or execution counts: strip them before committing"


@pytest.mark.slow
def test_the_kernel_runs_on_this_interpreter_in_the_working_directory(tmp_path):
    """The runner itself: the kernel's Python and folder, a raising cell's error, the notebook's limit."""
    probe = nbformat.v4.new_notebook(  # one kernel for the probe and the raising cell after it
        cells=[
            nbformat.v4.new_code_cell(
                # where the package would be imported from, found without importing it (12 s of CPU here)
                "import importlib.util, os, sys\nprint(sys.executable)\nprint(os.getcwd())\n"
                "print(importlib.util.find_spec('comlrl_lightning').origin)"
            ),
            nbformat.v4.new_code_cell("raise ValueError('reader-visible')"),
        ]
    )
    with pytest.raises(pytest.fail.Exception, match="a cell raised:(.|\n)*ValueError: reader-visible"):
        execute(probe, tmp_path)
    printed = "".join(output.text for output in probe.cells[0].outputs if output.get("name") == "stdout").split()
    assert printed == [sys.executable, str(tmp_path), str(REPO / "comlrl_lightning" / "__init__.py")]
    slow = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(30)")])
    with pytest.raises(pytest.fail.Exception, match="over the time limit"):
        execute(slow, tmp_path, limit_s=2)
