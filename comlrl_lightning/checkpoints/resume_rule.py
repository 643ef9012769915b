"""The resume rule: a resumed run uses the options it was given.

One rule for every way in (the ``comlrl-lightning fit --ckpt_path`` command, the seed API's
``train(resume_from_checkpoint=...)``, a plain ``Trainer.fit(..., ckpt_path=...)``):

* **refused** (:data:`FIXED`): the options a checkpoint's state only means something with: the
  module class (the algorithm, and ``rl_algorithm``), the team's models, tokenizers, added special
  tokens, size and layout (centralized or not), its LoRA adapters' shape, the data module's kind,
  its training items and reward function. One that differs is a
  :class:`~comlrl_lightning.errors.ConfigurationError` before training, one line naming each option
  with the checkpoint's and the given value.
* **changed**: every other option that differs is listed in one line (``resumed with changed
  options: model.sampling.temperature: 0.6 -> 0.9, ...``) and takes effect: the sampling settings
  (never restored from the checkpoint), the learning rates (set on the restored optimizer's
  parameter groups, :func:`set_learning_rates`), the data module's options, the seeds of the draws
  still to come.
* **kept**: what the checkpoint carries as state: the weights, the optimizer's moments, the loop
  position, the data module's state (the pairs, the replay history, the rounds done, the
  comparator's state).

With rounds (an iterative data module) ``data.num_train_epochs`` is fixed too: the loop position
counts epochs, and the epochs per round say which round it is in (raise ``num_iterations`` to
extend a run).

Options are compared as plain values (:mod:`comlrl_lightning.runtime.hparams`), named as in a config
(``model.team.num_agents``, ``data.train_batch_size``); an option that is an object (a model given
as an object, a reward function given as a callable) is not recorded, so it cannot be compared: a
change to or from one is listed as ``(not given)``, never refused.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.tasks.held_out import HELD_OUT

NOT_GIVEN = "(not given)"
"""How the line shows an option one side does not have."""

TEAM_KEY = "comlrl_lightning.team"
"""Top-level checkpoint key of the module's layout (its class, centralized or not, agents and roles)."""

DATA_STATE_KEY = "comlrl_lightning.data"

FIXED: Tuple[str, ...] = (
    "model.class",
    "model.collaboration",
    "model.roles",
    "model.rl_algorithm",
    "model.team.agent_model",
    "model.team.agents",
    "model.team.num_agents",
    "model.team.tokenizers",
    "model.team.special_tokens",
    "model.team.lora",
    "model.team.lora.class_path",
    "model.team.lora.r",
    "model.team.lora.target_modules",
    "model.team.lora.modules_to_save",
    "model.team.lora.layers_to_transform",
    "model.team.lora.use_dora",
    "model.team.lora.bias",
    "data.kind",
    "data.num_agents",
    "data.task.train_dataset",
    "data.task.dataset_split",
    "data.task.reward_func",
)
"""The options a resume cannot change: the checkpoint's state would mean nothing with another value."""

FIXED_WITH_ROUNDS: Tuple[str, ...] = ("data.num_train_epochs",)
"""Fixed for a data module with rounds (``data.kind`` ``iterative``): the loop position counts epochs,
and epochs per round say which round it is in (raise ``num_iterations`` to extend a run)."""

FIXED_WITH_HELD_OUT: Tuple[str, ...] = ("data.task.eval_dataset", "data.task.held_out_size", "data.task.held_out_seed")
"""Fixed when either side evaluates on held-out items (``eval_dataset: held_out``): those items are
taken out of ``train_dataset``, so these options say which items the run trains on."""

IGNORED_PREFIXES = ("model.generation_kwargs",)
"""Options shown elsewhere: the seed API's ``train(**generation_kwargs)`` are listed as the sampling
settings they make (``model.sampling.*``)."""

Change = Tuple[str, Any, Any]


def flat_options(options: Any, prefix: str = "") -> Dict[str, Any]:
    """Nested options as ``{"a.b": value}`` (a namespace or a mapping; a ``class_path`` object's
    ``init_args`` under its own name; an empty mapping has no entries), so two configs compare
    option by option."""
    if hasattr(options, "as_dict"):
        options = options.as_dict()
    if not isinstance(options, Mapping):
        return {prefix.rstrip("."): options} if prefix else {}
    flat: Dict[str, Any] = {}
    for name, value in options.items():
        flat.update(flat_options(value, prefix if name == "init_args" else f"{prefix}{name}."))
    return flat


def option_changes(saved: Mapping[str, Any], given: Mapping[str, Any]) -> List[Change]:
    """``(name, saved value, given value)`` of every option whose values differ, by name; an option
    one side lacks has :data:`NOT_GIVEN` there."""
    names = sorted(set(saved) | set(given))
    changes = [(name, saved.get(name, NOT_GIVEN), given.get(name, NOT_GIVEN)) for name in names]
    changes = [c for c in changes if not _same(c[1], c[2]) and not c[0].startswith(IGNORED_PREFIXES)]
    # an option that is null on one side and a mapping on the other shows as the mapping's entries
    nested = {name.rsplit(".", 1)[0] for name, _, _ in changes if "." in name}
    return [c for c in changes if not (c[0] in nested and _absent(c[1]) and _absent(c[2]))]


def _absent(value: Any) -> bool:
    return value is None or value is NOT_GIVEN


def _same(saved: Any, given: Any) -> bool:
    """Equal as plain values (a tuple and a list of the same items are the same; two import paths of
    the package that name one object, such as a class path saved before the package was split by job
    and its new path, are the same)."""
    if isinstance(saved, (list, tuple)) and isinstance(given, (list, tuple)):
        return len(saved) == len(given) and all(_same(a, b) for a, b in zip(saved, given))
    if type(saved) is type(given) and saved == given or (_number(saved) and _number(given) and saved == given):
        return True
    return _one_object(saved, given)


def _one_object(saved: Any, given: Any) -> bool:
    """Whether two import paths of the package (``comlrl_lightning.models.SharedCritic`` and
    ``comlrl_lightning.critics.SharedCritic``) name the same object; ``False`` for anything else."""
    if not all(isinstance(value, str) and value.startswith("comlrl_lightning.") for value in (saved, given)):
        return False
    found = _named_object(saved)
    return found is not None and found is _named_object(given)


def _named_object(path: str) -> Any:
    """The object at the import path ``path`` of the package, ``None`` where there is none."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _known(name: str, flat: Mapping[str, Any]) -> bool:
    """Whether ``flat`` says what option ``name`` is: it has it, or a null above it (``lora: null``
    says there is no ``lora.r``). An option left out as an object (a callable reward function) is
    not known, so a resume cannot tell whether it changed."""
    parts = name.split(".")
    return name in flat or any(flat.get(".".join(parts[:i]), NOT_GIVEN) is None for i in range(1, len(parts)))


def is_fixed(name: str, kind: Optional[str] = None, held_out: bool = False) -> bool:
    """Whether a resume refuses a change of option ``name`` (:data:`FIXED`; with rounds, ``kind``
    ``"iterative"``, also :data:`FIXED_WITH_ROUNDS`; when either side holds items out of the
    training data, ``held_out``, also :data:`FIXED_WITH_HELD_OUT`)."""
    return (
        name in FIXED
        or (kind == "iterative" and name in FIXED_WITH_ROUNDS)
        or (held_out and name in FIXED_WITH_HELD_OUT)
    )


def _shown(value: Any) -> str:
    text = value if value is NOT_GIVEN else repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def changes_text(changes: Sequence[Change]) -> str:
    """``a: old -> new, b: old -> new``."""
    return ", ".join(f"{name}: {_shown(old)} -> {_shown(new)}" for name, old, new in changes)


def module_layout(module: Any) -> Dict[str, Any]:
    """What :data:`TEAM_KEY` records of a team module: its class, collaboration and role count."""
    return {
        "class": type(module).__name__,
        "collaboration": "centralized" if module.collaboration.centralized else "decentralized",
        "roles": int(module.num_roles),
    }


def _options(hparams: Mapping[str, Any]) -> Dict[str, Any]:
    """Hyperparameters without LightningCLI's own entries (``_class_path``, ``_instantiator``)."""
    return {key: value for key, value in hparams.items() if not str(key).startswith("_")}


def saved_options(checkpoint: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The model's and the data module's options a checkpoint records (each empty when it records none)."""
    hyper = checkpoint.get("hyper_parameters")
    model = flat_options(_options(hyper), "model.") if isinstance(hyper, Mapping) else {}
    layout = checkpoint.get(TEAM_KEY)
    if isinstance(layout, Mapping):
        model.update(flat_options(dict(layout), "model."))
    data_hyper = checkpoint.get("datamodule_hyper_parameters")
    data = flat_options(_options(data_hyper), "data.") if isinstance(data_hyper, Mapping) else {}
    callbacks = checkpoint.get("callbacks")
    state = callbacks.get(DATA_STATE_KEY) if isinstance(callbacks, Mapping) else None
    if isinstance(state, Mapping) and "kind" in state:
        data["data.kind"] = state["kind"]
    return model, data


def given_options(module: Any, datamodule: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The options this run was given, named as :func:`saved_options` names them."""
    model = flat_options(_options(getattr(module, "hparams", None) or {}), "model.")
    if hasattr(module, "collaboration"):
        model.update(flat_options(module_layout(module), "model."))
    data = flat_options(_options(getattr(datamodule, "hparams", None) or {}), "data.") if datamodule is not None else {}
    kind = getattr(datamodule, "state_kind", None)
    if kind is not None:
        data["data.kind"] = kind
    return model, data


def resume_changes(
    checkpoint: Mapping[str, Any], module: Any, datamodule: Any, path: Any, action: str = "resume"
) -> List[Change]:
    """The options that differ between the checkpoint at ``path`` and this run; a
    :class:`~comlrl_lightning.errors.ConfigurationError` naming every :data:`FIXED` one that differs
    (``cannot <action> <path> with other ...``; the evaluation commands pass ``"evaluate"``).

    A side the checkpoint does not record (one written before the data module recorded its
    options) is not compared.
    """
    saved_model, saved_data = saved_options(checkpoint)
    given_model, given_data = given_options(module, datamodule)
    if not isinstance(checkpoint.get(TEAM_KEY), Mapping):  # written before the layout was recorded
        given_model = {
            k: v for k, v in given_model.items() if k not in ("model.class", "model.collaboration", "model.roles")
        }
    changes = option_changes(saved_model, given_model) if saved_model else []
    if set(saved_data) - {"data.kind"} and set(given_data) - {"data.kind"}:  # both record their options
        changes += option_changes(saved_data, given_data)
    elif "data.kind" in saved_data and "data.kind" in given_data:  # else the kinds only
        changes += option_changes({"data.kind": saved_data["data.kind"]}, {"data.kind": given_data["data.kind"]})
    saved_all, given_all = {**saved_model, **saved_data}, {**given_model, **given_data}
    kind = saved_data.get("data.kind")
    held_out = HELD_OUT in (saved_all.get("data.task.eval_dataset"), given_all.get("data.task.eval_dataset"))
    refused = [
        c for c in changes if is_fixed(c[0], kind, held_out) and _known(c[0], saved_all) and _known(c[0], given_all)
    ]
    if refused:
        raise ConfigurationError(
            f"cannot {action} {path} with other {', '.join(name for name, _, _ in refused)} "
            f"({changes_text(refused)}; the checkpoint's state is meaningless with them): give the checkpoint's "
            "values, or start a new run."
        )
    return changes


def apply_resume_rule(checkpoint: Mapping[str, Any], module: Any, datamodule: Any, path: Any) -> List[Change]:
    """:func:`resume_changes`, and one line listing them (nothing when none differs); marks the module
    as checked so its own hook does not check again."""
    changes = resume_changes(checkpoint, module, datamodule, path)
    if changes:
        rank_zero_info(f"resumed with changed options: {changes_text(changes)}")
    module.resume_checked = True
    return changes


def set_learning_rates(
    optimizers: Sequence[Any], schedulers: Sequence[Any], rates: Mapping[str, float]
) -> List[Change]:
    """Give the restored optimizers' named parameter groups the learning rates of this run (``rates``
    by group name); returns ``(group, old, new)`` of those that changed.

    A group whose base rate (``initial_lr`` where a scheduler keeps one, else ``lr``) differs from
    its rate here gets it: without a scheduler ``lr`` is the new rate; with one, the scheduled rate
    is scaled by ``new / old`` and the scheduler's base rate becomes the new one, so the schedule
    continues from the same point with the new base.
    """
    changed: List[Change] = []
    for optimizer in optimizers:
        for index, group in enumerate(optimizer.param_groups):
            new = rates.get(group.get("name"))
            old = group.get("initial_lr", group["lr"])
            if new is None or old == new:
                continue
            if "initial_lr" in group:
                group["lr"] = group["lr"] * new / old
                group["initial_lr"] = new
                for scheduler in schedulers:
                    if getattr(scheduler, "optimizer", None) is optimizer and hasattr(scheduler, "base_lrs"):
                        scheduler.base_lrs[index] = new
            else:
                group["lr"] = new
            changed.append((group["name"], old, new))
    return changed


def use_learning_rates(module: Any) -> List[Change]:
    """After a resume restored the optimizer: its groups get ``module``'s learning rates (by group
    name, :meth:`~comlrl_lightning.modules.TeamModule.parameter_groups`), see :func:`set_learning_rates`."""
    trainer = module.trainer
    rates = {group["name"]: group["lr"] for group in module.parameter_groups() if "name" in group}
    schedulers = [getattr(config, "scheduler", config) for config in trainer.lr_scheduler_configs or []]
    module.resume_checked = False
    return set_learning_rates(trainer.optimizers, schedulers, rates)


__all__ = [
    "FIXED",
    "FIXED_WITH_ROUNDS",
    "NOT_GIVEN",
    "TEAM_KEY",
    "apply_resume_rule",
    "changes_text",
    "flat_options",
    "given_options",
    "is_fixed",
    "module_layout",
    "option_changes",
    "resume_changes",
    "saved_options",
    "set_learning_rates",
    "use_learning_rates",
]
