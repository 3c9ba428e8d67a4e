"""Exceptions raised by hpctrain. Every user-facing error says what was expected."""
from __future__ import annotations

from typing import Any, Optional


class HpctrainError(Exception):
    """Base class for hpctrain errors."""


class ConfigError(HpctrainError, ValueError):
    """A configuration value is missing, unknown or of the wrong type.

    ``file`` and ``key`` name where the bad value came from, when known.
    """

    def __init__(self, message: str, *, file: Optional[str] = None, hint: Optional[str] = None):
        self.file = file
        self.hint = hint
        self.message = message
        text = f"{file}: {message}" if file else message
        if hint:
            text += f"\nHINT: {hint}"
        super().__init__(text)


class MissingFrameworkError(HpctrainError, ImportError):
    """The backend's framework (TensorFlow, Horovod, mpi4py, torch) is not importable;
    the message says what to install."""


class RunLockedError(HpctrainError):
    """Another process is running the same run directory."""


class RunNotFoundError(HpctrainError, ValueError, FileNotFoundError, RuntimeError):
    """A path given to ``Result.from_path``, ``Trainer.restore`` (or a sweep's
    ``ResultGrid.from_path``, ``Tuner.restore``) that is missing or is not such a
    directory. A ValueError (as Ray raises for an invalid restore path), a RuntimeError
    (as Ray's ``Result.from_path`` raises for a missing directory) and a
    FileNotFoundError."""

    def __init__(self, message: str, *, hint: Optional[str] = None):
        self.message = message
        self.hint = hint
        super().__init__(message + (f"\nHINT: {hint}" if hint else ""))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsafePathError(HpctrainError, PermissionError):
    """A file or directory that decides what a run does (its run directory, payload,
    callbacks, scripts…) is owned by another user, writable by group or other, a
    symbolic link or not a regular file: hpctrain refuses to read or reuse it, since
    another user could make your job run their code. ``path`` names it."""

    def __init__(self, message: str, *, path: str, hint: Optional[str] = None):
        self.path = path
        self.message = message
        self.hint = hint
        super().__init__(message + (f"\nHINT: {hint}" if hint else ""))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CheckpointError(HpctrainError):
    """A checkpoint could not be written or read."""


class TrainingFailedError(HpctrainError, RuntimeError):
    """Raised by ``Trainer.fit()`` when a worker failed and no restart was left (a
    RuntimeError, as Ray's ``ray.train.base_trainer.TrainingFailedError``).

    ``result`` is the :class:`~hpctrain.Result` of the run (its ``error`` is this
    exception), ``rank`` the first rank that failed, ``worker_traceback`` its traceback.

    ``__cause__`` is the worker's own exception object (unpickled from the run
    directory) when it could be pickled, else a :class:`WorkerTraceback` holding the
    text traceback. With the worker's exception at hand the error raised is also an
    instance of its class (``TrainingFailedError(KeyError)``, as Ray's
    ``RayTaskError(KeyError)``): ``except KeyError:`` around ``fit()`` catches it, and so
    does ``except TrainingFailedError:``. See :meth:`for_cause`.
    """

    def __init__(self, message: str, *, rank: Optional[int] = None,
                 worker_traceback: str = "", result: Any = None):
        # not super().__init__: in a class made by for_cause() the next __init__ in
        # the MRO is the worker exception's own, with its own signature
        BaseException.__init__(self, message)
        self.rank = rank
        self.worker_traceback = worker_traceback
        self.result = result

    def __str__(self) -> str:  # the message, also where the cause's class (KeyError) quotes it
        return str(self.args[0]) if self.args else ""

    @classmethod
    def for_cause(cls, message: str, cause: Optional[BaseException], *,
                  rank: Optional[int] = None, worker_traceback: str = "",
                  result: Any = None) -> "TrainingFailedError":
        """The error for a worker that raised ``cause``: an instance of a class derived
        from both TrainingFailedError and ``type(cause)`` (when that class can be
        derived from; else a plain TrainingFailedError), with ``__cause__`` set to
        ``cause``; or, without a cause, ``__cause__`` a :class:`WorkerTraceback` of
        ``worker_traceback``."""
        err = None
        if isinstance(cause, Exception) and not isinstance(cause, TrainingFailedError):
            try:
                dual = _dual_class(type(cause))
                err = type(cause).__new__(dual)  # the cause's layout (OSError's…)
            except Exception:  # noqa: BLE001 - a final class, a layout or __new__ conflict
                err = None
        if err is None:
            err = cls.__new__(cls)
        TrainingFailedError.__init__(err, message, rank=rank,
                                     worker_traceback=worker_traceback, result=result)
        err.__cause__ = cause if cause is not None else (
            WorkerTraceback(worker_traceback) if worker_traceback else None)
        return err

    def __reduce__(self):  # keep attributes (and a picklable cause) through pickling
        cause = self.__cause__
        if cause is not None:
            try:
                import pickle

                pickle.dumps(cause)
            except Exception:  # noqa: BLE001 - the text traceback still travels
                cause = None
        return (_rebuild_tfe, (str(self), self.rank, self.worker_traceback, cause))


class WorkerTraceback(HpctrainError):
    """The ``__cause__`` of a :class:`TrainingFailedError` whose worker exception could
    not be pickled (or left no record): its text is the worker's traceback, as
    ``concurrent.futures`` does for a process pool's errors."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _cause_attribute(self, name: str) -> Any:
    """Attributes of the worker's exception (``e.errno``, a custom field) read through
    the error raised around ``fit()``."""
    cause = self.__cause__
    if name.startswith("__") or cause is None:
        raise AttributeError(name)
    return getattr(cause, name)


_DUAL_CLASSES: dict = {}


def _dual_class(cause_cls: type) -> type:
    """``TrainingFailedError(<cause class>)``: one per class, made on first use."""
    dual = _DUAL_CLASSES.get(cause_cls)
    if dual is None:
        name = f"TrainingFailedError({cause_cls.__name__})"
        dual = type(name, (TrainingFailedError, cause_cls), {
            "__module__": __name__, "__qualname__": name,
            "__getattr__": _cause_attribute})
        _DUAL_CLASSES[cause_cls] = dual
    return dual


def _rebuild_tfe(message: str, rank: Optional[int], tb: str,
                 cause: Optional[BaseException] = None) -> TrainingFailedError:
    return TrainingFailedError.for_cause(message, cause, rank=rank, worker_traceback=tb)


class TrainingStoppedError(HpctrainError):
    """Raised by ``Trainer.fit()`` when the run stopped cleanly after the scheduler's
    warning (time limit, preemption) and was not requeued: its latest checkpoint is
    committed and ``Trainer.restore(result.path).fit()`` continues it. ``result`` is the
    run's :class:`~hpctrain.Result` so far."""

    def __init__(self, message: str, *, result: Any = None):
        super().__init__(message)
        self.result = result


class LoginNodeWarning(UserWarning):
    """A run with no site trains on this machine although a batch system is here and
    this process is in no allocation (probably a login node). Name a site, or
    ``site="local"`` to run here on purpose."""
