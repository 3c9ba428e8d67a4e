"""Exceptions raised by hpctrain. Every user-facing error says what was expected."""
from __future__ import annotations

from typing import Any, Dict, Optional


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

    @property
    def errors(self) -> "list[ConfigError]":
        """Each problem (:class:`ConfigErrors`: several of one job file; else this one)."""
        return getattr(self, "_errors", [self])


class ConfigErrors(ConfigError):
    """Several problems of one job file, found in one pass and reported together (each
    a :class:`ConfigError` in ``errors``, with its file, key, what was expected and its
    HINT), so that three typos take one ``hpctrain validate``, not three."""

    def __init__(self, errors: "list[ConfigError]"):
        self._errors = [one for e in errors for one in e.errors]
        files = {e.file for e in self._errors}
        where = f"{next(iter(files))}: " if len(files) == 1 and None not in files else ""
        lines = [f"{where}{len(self._errors)} problems:"]
        for e in self._errors:
            first, *rest = str(e).splitlines()
            lines += [f"- {first}"] + [f"  {line}" for line in rest]
        super().__init__("\n".join(lines))

    def __reduce__(self):  # (pickled: rebuilt from its errors, not from its text)
        return (ConfigErrors, (self._errors,))


def one_or_all(errors: "list[ConfigError]") -> ConfigError:
    """The error to raise for ``errors`` (not empty): the one, or all of them together."""
    return errors[0] if len(errors) == 1 else ConfigErrors(errors)


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
    """Raised by ``Trainer.fit()`` when training failed and no restart was left (a
    RuntimeError, as Ray's ``ray.train.base_trainer.TrainingFailedError``). As in Ray
    Train 2.x (``ray.train.v2.api.exceptions``) it is the base of
    :class:`WorkerGroupError` (ranks of the training function failed: what ``fit()``
    raises when a worker failed) and :class:`ControllerError` (the run failed outside the
    training function).

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
                  result: Any = None,
                  worker_failures: Optional[Dict[int, BaseException]] = None
                  ) -> "TrainingFailedError":
        """The error for a worker that raised ``cause``: an instance of a class derived
        from both ``cls`` (TrainingFailedError, WorkerGroupError) and ``type(cause)``
        (when that class can be derived from; else a plain ``cls``), with ``__cause__``
        set to ``cause``; or, without a cause, ``__cause__`` a :class:`WorkerTraceback`
        of ``worker_traceback``. ``worker_failures``: a WorkerGroupError's
        ``{rank: exception}``."""
        err = None
        if isinstance(cause, Exception) and not isinstance(cause, TrainingFailedError):
            try:
                dual = _dual_class(cls, type(cause))
                err = type(cause).__new__(dual)  # the cause's layout (OSError's…)
            except Exception:  # noqa: BLE001 - a final class, a layout or __new__ conflict
                err = None
        if err is None:
            err = cls.__new__(cls)
        TrainingFailedError.__init__(err, message, rank=rank,
                                     worker_traceback=worker_traceback, result=result)
        if isinstance(err, WorkerGroupError):
            err.worker_failures = dict(worker_failures or {})
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
        failures = getattr(self, "worker_failures", None)
        if failures:
            failures = {rank: _picklable(exc) for rank, exc in failures.items()}
        return (_rebuild_tfe, (str(self), self.rank, self.worker_traceback, cause,
                               _base_of(type(self)), failures))


class WorkerGroupError(TrainingFailedError):
    """Ranks of the training function failed (Ray 2.x's ``ray.train.WorkerGroupError``):
    what ``fit()`` raises when a worker failed and no restart was left.
    ``worker_failures``: ``{rank: exception}``, every rank of the last attempt that
    failed of its own fault, not for a lost peer (the exception object when it could be
    pickled, else a :class:`WorkerTraceback` of its traceback). Like every TrainingFailedError it is
    also an instance of the first failed rank's exception class
    (``WorkerGroupError(KeyError)``)."""

    def __init__(self, error_message: str,
                 worker_failures: Optional[Dict[int, BaseException]] = None, *,
                 rank: Optional[int] = None, worker_traceback: str = "",
                 result: Any = None):
        TrainingFailedError.__init__(self, error_message, rank=rank,
                                     worker_traceback=worker_traceback, result=result)
        self.worker_failures = dict(worker_failures or {})


class ControllerError(TrainingFailedError):
    """The run failed outside the training function (Ray 2.x's
    ``ray.train.ControllerError``): hpctrain raises it when a failed run left no
    worker's error (the batch job or its supervisor ended it). ``controller_failure``:
    the exception that says why."""

    def __init__(self, controller_failure: BaseException, *, result: Any = None):
        TrainingFailedError.__init__(self, str(controller_failure), result=result)
        self.controller_failure = controller_failure

    def __reduce__(self):
        return (type(self), (self.controller_failure,))


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


def _dual_class(base: type, cause_cls: type) -> type:
    """``TrainingFailedError(<cause class>)``, ``WorkerGroupError(<cause class>)``: one
    per pair, made on first use."""
    dual = _DUAL_CLASSES.get((base, cause_cls))
    if dual is None:
        name = f"{base.__name__}({cause_cls.__name__})"
        dual = type(name, (base, cause_cls), {
            "__module__": __name__, "__qualname__": name,
            "__getattr__": _cause_attribute, "_hpctrain_base": base})
        _DUAL_CLASSES[(base, cause_cls)] = dual
    return dual


def _picklable(exc: BaseException) -> BaseException:
    """``exc``, or a :class:`WorkerTraceback` naming it when it cannot be pickled."""
    import pickle

    try:
        pickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001 - its text still travels
        return WorkerTraceback(f"{type(exc).__name__}: {exc}")


def _base_of(cls: type) -> type:
    """The hpctrain class a dual class was made from (the class itself otherwise)."""
    return cls.__dict__.get("_hpctrain_base", cls)


def _rebuild_tfe(message: str, rank: Optional[int], tb: str,
                 cause: Optional[BaseException] = None, base: type = None,
                 worker_failures: Optional[Dict[int, BaseException]] = None
                 ) -> TrainingFailedError:
    return (base or TrainingFailedError).for_cause(message, cause, rank=rank,
                                                   worker_traceback=tb,
                                                   worker_failures=worker_failures)


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
