"""The seed's (CoMLRL's) Python API on top of the Lightning modules: ``comlrl_lightning.trainers.preference``.

Beside it, the reference's ``comlrl.utils`` modules under their names (:mod:`.reward_processor`,
:mod:`.reward_utils`), which :mod:`comlrl_lightning.utils` re-exports for CoMLRL scripts.

Imports: every layer below (modules, data modules, callbacks, comparators, rounds, tasks); nothing
imports it but the top-level package's users and :mod:`comlrl_lightning.utils`.
"""
