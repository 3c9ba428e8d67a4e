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


class CheckpointError(HpctrainError):
    """A checkpoint could not be written or read."""


class TrainingFailedError(HpctrainError):
    """Raised by ``Trainer.fit()`` when a worker failed and no restart was left.

    ``result`` is the :class:`~hpctrain.Result` of the run (its ``error`` is this
    exception), ``rank`` the first rank that failed, ``worker_traceback`` its traceback.
    """

    def __init__(self, message: str, *, rank: Optional[int] = None,
                 worker_traceback: str = "", result: Any = None):
        super().__init__(message)
        self.rank = rank
        self.worker_traceback = worker_traceback
        self.result = result

    def __reduce__(self):  # keep attributes through pickling
        return (_rebuild_tfe, (str(self), self.rank, self.worker_traceback))


def _rebuild_tfe(message: str, rank: Optional[int], tb: str) -> TrainingFailedError:
    return TrainingFailedError(message, rank=rank, worker_traceback=tb)


class TrainingStoppedError(HpctrainError):
    """Raised by ``Trainer.fit()`` when the run stopped cleanly after the scheduler's
    warning (time limit, preemption) and was not requeued: its latest checkpoint is
    committed and ``Trainer.restore(result.path).fit()`` continues it. ``result`` is the
    run's :class:`~hpctrain.Result` so far."""

    def __init__(self, message: str, *, result: Any = None):
        super().__init__(message)
        self.result = result
