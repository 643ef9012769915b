"""The seed's (CoMLRL's) Python API on top of the Lightning modules: ``comlrl_lightning.trainers.preference``.

Imports: every layer below (modules, data modules, callbacks, comparators, data); nothing imports it
but the top-level package's users.
"""
