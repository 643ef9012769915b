"""Command-line sizes that keep CLI tests fast."""

TINY_CLI = [
    "--model.init_args.sampling.max_new_tokens",
    "6",
    "--data.init_args.preference_num_candidates",
    "4",
    "--data.init_args.preference_pairs_per_sample",
    "4",
    "--data.init_args.eval_num_samples",
    "4",
    "--trainer.val_check_interval",
    "3",
    "--trainer.enable_progress_bar",
    "false",
]


TWO_UPDATES = [
    "--model.init_args.sampling.max_new_tokens",
    "4",
    "--data.init_args.preference_num_candidates",
    "4",
    "--data.init_args.preference_pairs_per_sample",
    "4",
    "--data.init_args.num_train_epochs",
    "1",
    "--data.init_args.eval_num_samples",
    "4",
    "--trainer.max_steps",
    "2",
    "--trainer.enable_progress_bar",
    "false",
]
"""A fit of two updates on the embedded team: enough for a checkpoint and an evaluation to read back."""
