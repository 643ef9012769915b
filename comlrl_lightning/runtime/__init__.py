"""Runtime plumbing every layer may use: processes, sharding, devices, random streams, files.

Collective operations across processes (:mod:`.distributed`), FSDP2 sharding and the supported
strategies (:mod:`.sharding`), device specs (:mod:`.devices`), seeded and checkpointed random
streams (:mod:`.rng`), atomic file and folder writes (:mod:`.files`), one-run-per-folder locks
(:mod:`.folder_lock`), removing a tree someone else made without failing (:mod:`.tree_removal`),
progress bars (:mod:`.progress`), the silencing of third-party noise (:mod:`.quiet`), and the one door to Lightning's, transformers' and torch's private attributes
(:mod:`.compat`). Nothing here knows about agents, pairs or rounds; checkpoints are
:mod:`comlrl_lightning.checkpoints`.

Imports: only the foundation module :mod:`comlrl_lightning.validation`; every other layer sits above.
"""
