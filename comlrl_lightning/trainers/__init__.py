"""The seed's (CoMLRL's) Python API on top of the Lightning modules: ``comlrl_lightning.trainers.preference``."""
