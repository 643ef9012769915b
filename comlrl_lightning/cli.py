"""The ``comlrl-lightning`` command: a LightningCLI over the modules and data modules.

``comlrl-lightning fit --config configs/madpo.yaml``. The model and data sections take a
``class_path`` (``comlrl_lightning.MADPOModule``, ``comlrl_lightning.PreferenceDataModule``...) so one
command runs every algorithm. ``trainer.max_epochs`` is the data section's total epochs
(``num_train_epochs x num_iterations``), and the model's ``team.num_agents`` is shared with the data module.

Resuming: ``--ckpt_path`` takes a checkpoint file or a folder of checkpoints (the one with the most
progress); the run continues in the CSV log folder and the W&B run of the checkpoint. Every run
records itself in its checkpoints (:class:`~comlrl_lightning.callbacks.CheckpointRecord`), and
Lightning's default ``ModelCheckpoint`` is a :class:`~comlrl_lightning.callbacks.ResumableCheckpoint`.
A logger without a ``save_dir`` (or with its class's default, ``"."`` for ``WandbLogger``) writes under
``trainer.default_root_dir``; one given is used.

``validate``, ``test`` and ``predict`` with ``--ckpt_path`` evaluate its weights into a log version of
their own (not a resume; the run's log, W&B run and checkpoints are left as they are): ``validate``
the items fit evaluates (``eval/...``), ``test`` every evaluation item (``test/...``), ``predict``
writes each agent's completions and the rewards to ``predictions.jsonl``; all with the seeds fit's
evaluation of the same weights used (:mod:`comlrl_lightning.modules.evaluation_runs`). A run refused
before it logged anything leaves no version folder (:class:`~comlrl_lightning.callbacks.refused_runs.RefusedRunLogs`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.callbacks.checkpoints import CheckpointRecord, ResumableCheckpoint
from comlrl_lightning.callbacks.completions_writer import CompletionsWriter
from comlrl_lightning.callbacks.csv_logger import ResumableCSVLogger, same_log_folder
from comlrl_lightning.callbacks.refused_runs import RefusedRunLogs
from comlrl_lightning.checkpoints.io import atomic_checkpoint_plugins, read_checkpoint
from comlrl_lightning.checkpoints.metadata import resolve_checkpoint, resumable, run_record
from comlrl_lightning.checkpoints.resume_rule import apply_resume_rule, changes_text, resume_changes
from comlrl_lightning.comparators.credentials import check_config_has_no_key
from comlrl_lightning.datamodules.task_data import dataloader_reload, total_epochs
from comlrl_lightning.errors import TRACEBACK_VARIABLE, ComlrlError, ConfigurationError
from comlrl_lightning.generation.vllm import VLLMGenerator
from comlrl_lightning.runtime.command_line import parse_with_nulls
from comlrl_lightning.runtime.distributed import close_process_group
from comlrl_lightning.runtime.files import own_copy
from comlrl_lightning.runtime.import_paths import working_directory_first
from comlrl_lightning.runtime.parse_errors import short_parse_errors
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.runtime.progress import progress_callbacks
from comlrl_lightning.runtime.quiet import install_noise_filters
from comlrl_lightning.runtime.sharding import check_mesh_plan
from comlrl_lightning.runtime.threads import ThreadDefaults

DESCRIPTION = (
    "Train and use teams of cooperating LLM agents. fit: train (--ckpt_path resumes). With --ckpt_path "
    "a checkpoint, each into a log version of its own: validate evaluates the items fit evaluates; test "
    "evaluates every evaluation item (metrics test/...); predict writes each agent's completion and the "
    "reward per item to predictions.jsonl. Also: export (a trained team as Hugging Face folders) and env "
    "(versions, threads, devices); each takes --help."
)
"""What ``comlrl-lightning --help`` says first: every command, LightningCLI's and this library's own."""

CSV_LOGGER = "comlrl_lightning.callbacks.ResumableCSVLogger"
MODEL_PARALLEL = (
    "lightning.pytorch.strategies.ModelParallelStrategy",
    "lightning.pytorch.strategies.model_parallel.ModelParallelStrategy",
)
ATOMIC_MODEL_PARALLEL = "comlrl_lightning.checkpoints.io.AtomicModelParallelStrategy"


def data_total_epochs(data_options) -> int:
    """The data section's :func:`~comlrl_lightning.datamodules.task_data.total_epochs` (one round
    for a data module without ``num_iterations``)."""
    return total_epochs(data_options.num_train_epochs, getattr(data_options, "num_iterations", 1))


def data_dataloader_reload(data_options) -> int:
    """The data section's :func:`~comlrl_lightning.datamodules.task_data.dataloader_reload`."""
    return dataloader_reload(getattr(data_options, "num_iterations", None))


class PreferenceCLI(LightningCLI):
    """LightningCLI with the links between the model, data and trainer sections."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.init_args", "trainer.max_epochs", compute_fn=data_total_epochs)
        parser.link_arguments(
            "data.init_args", "trainer.reload_dataloaders_every_n_epochs", compute_fn=data_dataloader_reload
        )
        parser.link_arguments("model.init_args.team.num_agents", "data.init_args.num_agents")
        # A CSV logger that a resumed run continues, unless the config names one: Lightning's default
        # (logger: true) would print a notice about TensorBoard not being installed.
        # Its save_dir, ROOT_DIR, carries over to a logger chosen without one (TensorBoardLogger needs one).
        parser.set_defaults({"trainer.logger": {"class_path": CSV_LOGGER, "init_args": {"save_dir": ROOT_DIR}}})
        # The modules evaluate before the first update themselves: a sanity validation would evaluate nothing.
        parser.set_defaults({"trainer.num_sanity_val_steps": 0})
        # Set once here, not in every shipped config: ParameterSummary (a callback the configs list) prints
        # one line of parameters in place of Lightning's table.
        parser.set_defaults({"trainer.enable_model_summary": False})

    def parse_arguments(self, parser, args) -> None:
        """The arguments, with ``null`` meaning ``None``; a resume's ``ckpt_path`` is resolved and read
        here and set aside until the classes are built (:meth:`resolve_checkpoint_path`)."""
        with short_parse_errors(parser, args):  # the message in two lines, not the usage and a type dump
            self.config = parse_with_nulls(parser, args)  # null means None, nested too
        self.resolve_checkpoint_path()

    def before_instantiate_classes(self) -> None:
        """No key's value in the config; ``ModelParallelStrategy`` built as
        :class:`~comlrl_lightning.checkpoints.io.AtomicModelParallelStrategy` (the same options);
        a logger without a ``save_dir`` writes under
        ``trainer.default_root_dir`` (one given is kept); W&B loggers get a CSV log beside them
        (:func:`with_csv_log`); a resumed run continues the CSV log folder and the W&B run of its checkpoint."""
        # the whole config is saved (config.yaml, hparams, checkpoints, loggers): no key's value anywhere in it
        config = self.config[self.config.subcommand] if self.config.get("subcommand") else self.config
        if self.resumed_path is not None:  # set aside in resolve_checkpoint_path
            config["ckpt_path"] = str(self.resumed_path)
        check_config_has_no_key(config.as_dict())
        strategy = config["trainer"].get("strategy")
        if hasattr(strategy, "get") and strategy.get("class_path") in MODEL_PARALLEL:
            strategy["class_path"] = ATOMIC_MODEL_PARALLEL  # FSDP2 checkpoint folders replaced whole
        root = config["trainer"].get("default_root_dir")
        # an evaluation of a checkpoint logs into a version of its own: the run's log and W&B run are not continued
        record = self.resumed_record if self.config.get("subcommand") in (None, "fit") else {}
        logs, identity = record.get("logs") or {}, record.get("wandb") or {}
        config["trainer"]["logger"] = with_csv_log(config["trainer"].get("logger"))
        for logger in _logger_sections(config["trainer"].get("logger")):
            init = logger.get("init_args")
            if init is None:
                continue
            kind = _class_of(logger["class_path"])
            if init.get("save_dir") == ROOT_DIR:  # the default, or carried over to a logger chosen without one
                init["save_dir"] = _unset_save_dir(kind, root)
            if root is not None and _save_dir_not_given(init, kind):
                init["save_dir"] = str(root)
            if (
                issubclass(kind, ResumableCSVLogger)
                and init.get("version") is None
                and same_log_folder(init.get("save_dir"), init.get("name"), logs)
            ):
                init["version"] = logs["version"]
            if issubclass(kind, WandbLogger) and identity and not (init.get("id") or init.get("version")):
                init["id"] = identity["id"]

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, built with a :class:`CheckpointRecord`, a :class:`ResumableCheckpoint` where
        Lightning would add its default ``ModelCheckpoint`` (a configured checkpoint callback is kept,
        unless ``enable_checkpointing`` is false: then none is), and checkpoints written atomically
        with their files (an ``AtomicCheckpointIO`` plugin, unless the config names a checkpoint IO of
        its own)."""
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer = config["trainer"]
        given = trainer.get("callbacks") or []
        callbacks: List[Callback] = list(given) if isinstance(given, list) else [given]
        callbacks.append(RefusedRunLogs())
        if not any(isinstance(callback, ThreadDefaults) for callback in callbacks):
            callbacks.append(ThreadDefaults())  # one thread for a small model (runtime/threads.py)
        callbacks += progress_callbacks(trainer.get("enable_progress_bar") is not False, callbacks)  # lines in a log
        if self.subcommand not in (None, "fit"):
            return super().instantiate_trainer(**evaluation_trainer(self.subcommand, callbacks, kwargs))
        if not any(isinstance(callback, CheckpointRecord) for callback in callbacks):
            callbacks.insert(0, CheckpointRecord())
        checkpointing = trainer.get("enable_checkpointing") is not False
        if checkpointing and not any(isinstance(callback, ModelCheckpoint) for callback in callbacks):
            callbacks.append(ResumableCheckpoint())
        if not checkpointing:  # the flag wins over a config's checkpoint callback (Lightning would refuse the pair)
            left_out = [type(callback).__name__ for callback in callbacks if isinstance(callback, ModelCheckpoint)]
            if left_out:
                callbacks = [callback for callback in callbacks if not isinstance(callback, ModelCheckpoint)]
                rank_zero_info(f"enable_checkpointing is false: no checkpoint files ({', '.join(left_out)} left out)")
        kwargs.setdefault("plugins", atomic_checkpoint_plugins(trainer.get("plugins")))
        return super().instantiate_trainer(**dict(kwargs, callbacks=callbacks))

    def instantiate_classes(self) -> None:
        with warnings.catch_warnings():
            # jsonargparse fills peft.LoraConfig's loftq_config with LoftQConfig's defaults, which
            # peft then reports as given (and ignores) unless init_lora_weights is "loftq"
            warnings.filterwarnings("ignore", message="`loftq_config` specified but will be ignored")
            super().instantiate_classes()

    def before_fit(self) -> None:
        # before Lightning starts any process or loads any model: a mesh that does not fit the processes
        check_mesh_plan(self.trainer.strategy)
        resumed = self.resumed_checkpoint
        if resumed is not None:  # the resume rule: these options; a fixed one changed is refused now
            apply_resume_rule(resumed, self.model, self.datamodule, self.resumed_path)

    def check_evaluated_checkpoint(self) -> None:
        """Before an evaluation loads a checkpoint (its weights only; it is not a resume): a checkpoint
        of another team is refused, naming the options; the model options that differ are listed."""
        self.model.resume_checked = True  # the module's own hook would apply the resume rule
        if self.resumed_checkpoint is None:
            return
        changes = resume_changes(self.resumed_checkpoint, self.model, None, self.resumed_path, "evaluate")
        if changes:
            rank_zero_info(f"evaluating {self.resumed_path} with changed options: {changes_text(changes)}")

    before_validate = before_test = before_predict = check_evaluated_checkpoint

    def report_evaluation(self) -> None:
        """One line: what was evaluated (the checkpoint and its updates) and where its metrics are."""
        weights = f"{self.resumed_path}" if self.resumed_path is not None else "the configured weights"
        updates = getattr(self.model, "trained_updates", 0)
        where = f"{self.trainer.log_dir}/metrics.csv" if self.trainer.loggers else "no logger"
        rank_zero_info(f"{self.subcommand}: {weights} ({updates} updates); metrics in {where}")

    after_validate = after_test = report_evaluation  # predict's CompletionsWriter says where its file is

    resumed_record: Dict[str, Any] = {}
    resumed_checkpoint: Optional[Dict[str, Any]] = None
    resumed_path: Optional[Path] = None

    def resolve_checkpoint_path(self) -> None:
        """Resuming keeps the options of this command line and config, and says what changed.

        A folder is resolved to its checkpoint with the most progress. LightningCLI, given a
        checkpoint file as ``ckpt_path``, would overwrite the options silently with the
        hyperparameters saved in it (``--model.init_args.dpo_beta 7`` would train on with 0.1); so
        the resolved path is set aside here and handed back to the subcommand in
        :meth:`before_instantiate_classes`. The given options are the run's
        (:mod:`comlrl_lightning.checkpoints.resume_rule`): once the classes are built, before training,
        the options a resume cannot change are refused if they differ, and every other difference
        is listed in one line and takes effect (sampling, learning rates, data options). A remote
        checkpoint (a URL, an fsspec chain) is refused: Lightning would load it with
        ``weights_only=False``, i.e. run code from the network.
        """
        if not self.config.get("subcommand"):
            return
        section = self.config[self.config.subcommand]
        ckpt_path = section.get("ckpt_path")
        if not ckpt_path or ckpt_path in ("last", "best", "hpc", "registry"):
            return
        require_local(ckpt_path, "ckpt_path", "a local checkpoint file")
        self.resumed_path = resolve_checkpoint(ckpt_path)
        section["ckpt_path"] = None  # back in before_instantiate_classes
        if not self.resumed_path.is_file():  # a sharded checkpoint (a folder): Lightning reads it
            return
        # a corrupt field or a newer version's: one line naming the file and the field, now
        self.resumed_checkpoint = resumable(read_checkpoint(self.resumed_path), self.resumed_path)
        self.resumed_record = run_record(self.resumed_checkpoint, self.resumed_path) or {}


def evaluation_trainer(subcommand: str, callbacks: List[Callback], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The Trainer options of an evaluation subcommand (``validate``, ``test``, ``predict``): no
    checkpoint callbacks (they write only in ``fit``, and would read the evaluated checkpoint's as
    their own) and no checkpointing; ``predict`` writes its samples with a :class:`CompletionsWriter`
    (one given in the config is kept)."""
    kept = [c for c in callbacks if not isinstance(c, (ModelCheckpoint, CheckpointRecord))]
    if subcommand == "predict" and not any(isinstance(c, CompletionsWriter) for c in kept):
        kept.append(CompletionsWriter())
    return dict(kwargs, callbacks=kept, enable_checkpointing=False)


class SaveConfigInPlace(SaveConfigCallback):
    """LightningCLI's ``config.yaml``, written only over a regular file: a link or a folder under that
    name is refused, never followed, and a hard link gets a copy of its own first (the file is
    rewritten in place at every run in the folder)."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if not self.already_saved and self.save_to_log_dir:
            log_dir = trainer.log_dir  # a broadcast: every rank asks
            if log_dir is not None and trainer.is_global_zero:
                own_copy(Path(log_dir) / self.config_filename, "the run's config")
        super().setup(trainer, pl_module, stage)


def _logger_sections(logger: Any) -> List[Any]:
    """The ``class_path`` / ``init_args`` sections of ``trainer.logger`` (one, a list, or none)."""
    sections = logger if isinstance(logger, list) else [logger]
    return [section for section in sections if hasattr(section, "get") and section.get("class_path")]


def _class_of(class_path: str) -> type:
    module, _, name = str(class_path).rpartition(".")
    found = getattr(importlib.import_module(module), name, None) if module else None
    return found if isinstance(found, type) else object


ROOT_DIR = "<trainer.default_root_dir>"
"""The default logger's ``save_dir``: replaced by ``trainer.default_root_dir`` before the logger is
built. jsonargparse carries it over to a logger chosen on the command line or in a config without a
``save_dir`` (``--trainer.logger TensorBoardLogger``), whose class may require one."""


def _unset_save_dir(kind: type, root: Any) -> Any:
    """A logger section's ``save_dir`` when none was given: its class's own default (``None``, or
    ``"."`` for W&B, which the root then replaces), else the root folder (the working directory
    without one, as Lightning's ``default_root_dir``)."""
    parameter = inspect.signature(kind.__init__).parameters.get("save_dir")  # type: ignore[misc]  # kind is a class: its own __init__
    if parameter is not None and parameter.default is not inspect.Parameter.empty:
        return parameter.default
    return str(root) if root is not None else os.getcwd()


def with_csv_log(logger: Any) -> Any:
    """``trainer.logger`` with a :class:`~comlrl_lightning.callbacks.ResumableCSVLogger` first where it
    names W&B loggers and no CSV logger: the run has its ``metrics.csv``, and its ``config.yaml``, plots
    and checkpoints go to that log's version folder (Lightning puts them in the first logger's), not
    to a W&B run id's folder apart from them; W&B keeps its own files. Other choices are unchanged."""
    sections = _logger_sections(logger)
    kinds = [_class_of(section["class_path"]) for section in sections]
    if not any(issubclass(kind, WandbLogger) for kind in kinds) or any(issubclass(kind, CSVLogger) for kind in kinds):
        return logger
    parameters = inspect.signature(ResumableCSVLogger.__init__).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    return [Namespace(class_path=CSV_LOGGER, init_args=Namespace(**{**defaults, "save_dir": ROOT_DIR})), *sections]


def _save_dir_not_given(init: Any, kind: type) -> bool:
    """Whether a logger section leaves its folder to the trainer: a ``save_dir`` that is ``None`` or the
    class's own default (``"."`` for ``WandbLogger``), and no W&B-style ``dir`` given instead."""
    if "save_dir" not in init or init.get("dir") is not None:
        return False
    parameter = inspect.signature(kind.__init__).parameters.get("save_dir")  # type: ignore[misc]  # kind is a class: its own __init__
    default = parameter.default if parameter is not None else inspect.Parameter.empty
    return init["save_dir"] is None or (default is not inspect.Parameter.empty and init["save_dir"] == default)


def library_error(error: BaseException) -> Optional[ComlrlError]:
    """The :class:`~comlrl_lightning.errors.ComlrlError` that ``error`` is or was raised from (jsonargparse
    and Lightning re-raise our errors inside their own), else ``None``."""
    seen = set()
    cause: Optional[BaseException] = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ComlrlError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Any :class:`~comlrl_lightning.errors.ComlrlError` (while the config is parsed, the objects are built,
    or the run sets up and trains) becomes one ``error: ...`` line on stderr and exit status 2 for a
    configuration error, 1 for the others; ``COMLRL_LIGHTNING_TRACEBACK=1`` shows the traceback as well."""
    try:
        yield
    except Exception as error:
        found = library_error(error)
        if found is None:
            raise
        if os.environ.get(TRACEBACK_VARIABLE, "").strip() not in ("", "0"):
            traceback.print_exception(error, file=sys.stderr)
        print(f"error: {found}", file=sys.stderr)
        raise SystemExit(2 if isinstance(found, ConfigurationError) else 1) from None


def main(args: Optional[List[str]] = None) -> None:
    """The console script: run the command line (``args``: the words after the program name).

    Returns nothing: a console script's return value becomes the process's exit status. A
    distributed run's process group is closed before the process exits, unless vLLM engines run in
    this process: their own shutdown at exit tears the groups down (twice would raise).
    """
    working_directory_first(sys.path)  # as python -m: a reward_func or part beside the config imports
    install_noise_filters()  # the command owns its process: Lightning's harmless notices off (runtime/quiet.py)
    words = sys.argv[1:] if args is None else list(args)
    if words and words[0] in OWN_COMMANDS:  # this library's commands beside LightningCLI's (export, env)
        with one_line_errors():
            raise SystemExit(_own_command(words[0])(words[1:]))
    cli = run_cli(args)
    trainer = getattr(cli, "trainer", None)
    generator = getattr(getattr(cli, "model", None), "generator", None)
    if trainer is not None and trainer.world_size > 1:
        if not (isinstance(generator, VLLMGenerator) and generator.holds_engines):
            close_process_group()


OWN_COMMANDS = ("export", "env")
"""Subcommands this library runs itself (each with its own ``--help``), not through LightningCLI."""


def _own_command(name: str) -> Callable[[List[str]], int]:
    """The ``main`` of this library's subcommand ``name``, imported only when it runs."""
    if name == "export":
        from comlrl_lightning.export import main as command
    else:
        from comlrl_lightning.environment_report import main as command
    return command


def run_cli(args: Optional[List[str]] = None) -> PreferenceCLI:
    """Run the command line and return the CLI object (its ``model``, ``datamodule`` and ``trainer``).

    A :class:`~comlrl_lightning.errors.ComlrlError` ends it with one ``error:`` line (``SystemExit``).
    Lightning's harmless notices are filtered from here on (:func:`~comlrl_lightning.runtime.quiet.install_noise_filters`).
    """
    install_noise_filters()
    with one_line_errors():
        return PreferenceCLI(
            LightningModule,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,  # the modules take optimizer / lr_scheduler classes themselves
            save_config_callback=SaveConfigInPlace,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"description": DESCRIPTION},
            args=args,
        )


if __name__ == "__main__":
    main()
