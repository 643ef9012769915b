"""Cooperative coding: HumanEval-format items and the test runner that scores programs against them.

The test runner (:mod:`.runner`): :func:`run_tests` and :func:`run_tests_batch` give a
:class:`TestReport` per program; :func:`active_isolation` says which kernel layers it uses here.

Imports: :mod:`comlrl_lightning.data`, :mod:`comlrl_lightning.runtime` and
:mod:`comlrl_lightning.errors`; nothing above.
"""

from comlrl_lightning.tasks.coding.runner import TestReport, active_isolation, run_tests, run_tests_batch
from comlrl_lightning.tasks.coding.sandbox import RunLimits

__all__ = ["RunLimits", "TestReport", "active_isolation", "run_tests", "run_tests_batch"]
