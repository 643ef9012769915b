"""Checkpoints: what a run writes so that it can continue exactly, and how it continues.

**The save path**, step by step:

1. *When*: Lightning's ``ModelCheckpoint`` (the CLI's :class:`~comlrl_lightning.callbacks.ResumableCheckpoint`),
   ``trainer.save_checkpoint(path)``, or the seed API's commits
   (:class:`~comlrl_lightning.callbacks.CommitCheckpoints`, arguments from
   :mod:`comlrl_lightning.trainers.checkpoints`).
2. *What*: Lightning gathers weights, optimizer and loop state; the module adds its team's layout;
   :class:`~comlrl_lightning.callbacks.CheckpointRecord` adds the run record (:mod:`.metadata`: the
   run, its branch and forks from :mod:`.lineage`); the data module's ``DataStateCallback``
   (:mod:`comlrl_lightning.datamodules.data_state`) adds its state (replay index, snapshot index,
   comparator, random streams) and, as :mod:`.assets` entries, every file that state names.
3. *Written*: :class:`~.io.AtomicCheckpointIO` first builds the checkpoint's asset folder
   (:mod:`.assets`: each file copied once from the live file, verified by its sha256, hard-linked
   between checkpoints, staged in a fresh folder and swapped in whole), then writes the ``.ckpt``
   bytes to a temporary file beside it, fsyncs and renames it (a sharded checkpoint folder:
   :class:`~.io.AtomicModelParallelStrategy`, replaced whole).
4. *Kept*: the seed API's ``checkpoint-{N}`` folders (:mod:`.folders`): written through fresh
   staging with an owner file, pruned to ``save_total_limit``, removed only by what the run wrote.

**The resume path**, step by step:

1. *Which checkpoint*: a file, or the folder's checkpoint with the most progress
   (:func:`~.metadata.resolve_checkpoint`; a folder holding several lines of a run is refused,
   :mod:`.lineage`); the seed API resolves ``resume_from_checkpoint`` the same way.
2. *Read without running code*: ``torch.load(weights_only=True)``, local paths only
   (:func:`~.io.checked_checkpoint`, :func:`~.metadata.read_checkpoint_metadata`).
3. *The options*: :mod:`.resume_rule` compares the given options with the saved hyperparameters:
   what the state only means with its own value is refused, what may change is listed in one line
   and takes effect, the rest is kept (one rule for the CLI, the seed API and a plain
   ``Trainer.fit(ckpt_path=...)``).
4. *Restored*: Lightning loads weights, optimizers and loops; the data module loads its state, and
   the replay buffer and snapshots put back the files it names from the asset folder, verified
   (:class:`~.assets.CheckpointAssets`); the run record starts a new branch forked at the
   checkpoint's progress and the CSV log continues.

Imports: the runtime, the task definition (the held-out option the resume rule fixes) and the
foundation modules; the callbacks, the data modules, the seed API and the CLI use it.
"""
