"""Built-in tasks: ready-made task items, prompts and rewards a config names by import path.

:mod:`.coding` is cooperative code generation on HumanEval (or any problems in its format): agent
0 writes a helper ``aux``, agent 1 the problem's function, which may call it; the two are combined
into one program, run against the problem's tests and scored in levels.

Imports: :mod:`comlrl_lightning.data`, :mod:`comlrl_lightning.runtime`, the error family and, for
types only, :mod:`comlrl_lightning.modules`; nothing in the package imports a task (a task is chosen
by import path, as a user's own would be).
"""
