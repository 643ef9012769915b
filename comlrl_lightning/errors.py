"""The library's one error family: every mistake a user can make is a :class:`ComlrlError`.

::

    ComlrlError
    ├── ConfigurationError (ValueError)   an option, a path or a part that cannot work
    │   ├── ConfigurationTypeError (TypeError)   an option of the wrong type
    │   └── MissingPathError (FileNotFoundError) a path an option names does not exist
    ├── DataError (ValueError)            task items, datasets, checkpoints that are not what they claim
    └── RunStateError (RuntimeError)      the run's folders, locks and files: in use, not writable, gone
        └── MissingRunFileError (FileNotFoundError)

Each class keeps the builtin base the library raised before (``except ValueError`` still catches
a bad option), and the other modules' own errors derive from these (``OptionError``,
``FolderInUseError``, ``ReplayIndexError``, ``ComparatorApiError``...). The ``comlrl-lightning``
command prints any of them as one ``error: ...`` line (the variable ``COMLRL_LIGHTNING_TRACEBACK=1`` shows
the traceback too). Messages name the option, file, line or item, and never a secret.
"""

from __future__ import annotations


class ComlrlError(Exception):
    """The root of every error this library raises for a user's mistake or a run's state."""


class ConfigurationError(ComlrlError, ValueError):
    """An option, a path or a part of the configuration that cannot work as given."""


class ConfigurationTypeError(ConfigurationError, TypeError):
    """An option (or a part given as an option) of the wrong type."""


class MissingPathError(ConfigurationError, FileNotFoundError):
    """A path an option names does not exist."""


class DataError(ComlrlError, ValueError):
    """Task items, datasets, files or checkpoints that are not what they claim to be."""


class RunStateError(ComlrlError, RuntimeError):
    """The run's folders, locks and files: in use by another run, not writable, moved or gone."""


class MissingRunFileError(RunStateError, FileNotFoundError):
    """A file or folder the run's state refers to is gone."""


TRACEBACK_VARIABLE = "COMLRL_LIGHTNING_TRACEBACK"
"""Set it to ``1`` and the ``comlrl-lightning`` command prints the traceback of an error, not just its line."""


__all__ = [
    "TRACEBACK_VARIABLE",
    "ComlrlError",
    "ConfigurationError",
    "ConfigurationTypeError",
    "DataError",
    "MissingPathError",
    "MissingRunFileError",
    "RunStateError",
]
