"""Built-in tasks: items, prompts and rewards of real problems (cooperative coding on HumanEval).

Imports: :mod:`comlrl_lightning.data`, :mod:`comlrl_lightning.runtime` and the foundation modules
(:mod:`comlrl_lightning.errors`); nothing above. Nothing in the package imports a task but the
configurations, the command line and users' scripts.
"""
