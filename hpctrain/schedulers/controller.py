"""Calls to a batch system's controller (``sbatch``, ``scontrol``, ``squeue``, ``qsub``,
``qstat``, ``bsub``…), retried with backoff while it answers with a transient error.

A loaded slurmctld answers "Socket timed out on send/recv operation" for a while; a PBS
server restarting refuses connections. One such answer must not end a requeue chain nor
fail a submission, so every scheduler call site that talks to the controller goes through
:func:`run_controller`: the same command again after 1, 2, 4… s (at most 30 s apart) while
its error output is one of :data:`TRANSIENT`, for a bounded total
(:func:`retry_budget`: ``$HPCTRAIN_CONTROLLER_RETRY_S``; else 300 s inside a job, where a
requeue must go through, 60 s at a prompt), each retry logged once. Any other failure is
returned at once: it is the caller's to judge.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Any, Mapping, Optional, Sequence

from ..common.log import get_logger
from ..common.registry import detect_scheduler
from ..errors import ConfigError, HpctrainError

#: The variable that bounds the total time spent retrying one call (seconds; 0: no retry).
ENV_RETRY_S = "HPCTRAIN_CONTROLLER_RETRY_S"
#: Default bounds: inside an allocation (a requeue, a resubmission), at a prompt.
IN_JOB_RETRY_S = 300.0
INTERACTIVE_RETRY_S = 60.0
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0

#: Error output that means "the controller is busy or unreachable for now", and only that
#: (a refused job, an unknown job id, a permission error are answers, never retried).
TRANSIENT = re.compile("|".join([
    r"socket timed out on send/recv",               # slurmctld overloaded
    r"unable to contact slurm controller",           # slurmctld down or restarting
    r"resource temporarily unavailable",             # EAGAIN from the controller's RPC
    r"zero bytes were transmitted",                  # slurm_load_jobs: a cut connection
    r"unexpected message received",                  # scontrol, slurmctld paused (seen here)
    r"slurm backup controller in standby mode",      # a fail-over under way
    r"server\b[^\n]*\bbusy",                         # "qsub: Server ... busy"
    r"cannot connect to server",                     # PBS: qsub/qstat, server down
    r"connection refused",                           # PBS: the server's port
    r"pbs_iff",                                      # PBS: authentication helper
    r"lsf is down",                                  # LSF: mbatchd restarting
    r"batch system daemon not responding",
]), re.IGNORECASE)


class ControllerBusyError(HpctrainError, RuntimeError):
    """The controller answered with transient errors until the retry budget was spent."""


def is_transient(text: Any) -> bool:
    """Whether a command's error output says the controller is only busy for now.

    >>> is_transient("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")
    True
    >>> is_transient("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified")
    False
    """
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return bool(TRANSIENT.search(text or ""))


def retry_budget(env: Optional[Mapping[str, str]] = None) -> float:
    """Seconds one call may keep retrying: ``$HPCTRAIN_CONTROLLER_RETRY_S``, else
    :data:`IN_JOB_RETRY_S` inside an allocation and :data:`INTERACTIVE_RETRY_S` outside."""
    env = os.environ if env is None else env
    value = env.get(ENV_RETRY_S, "").strip()
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:
            raise ConfigError(f"${ENV_RETRY_S}: expected a number of seconds >= 0, got "
                              f"{value!r}", hint="e.g. 300; 0 turns the retries off")
        return seconds
    return IN_JOB_RETRY_S if detect_scheduler(env) != "local" else INTERACTIVE_RETRY_S


def run_controller(argv: Sequence[str], *, budget_s: Optional[float] = None,
                   raise_when_busy: bool = False, timeout: Optional[float] = None,
                   retry_on_timeout: bool = True, **kwargs: Any) -> "subprocess.CompletedProcess":
    """``subprocess.run(argv, capture_output=True, timeout=timeout, **kwargs)``, again
    with backoff while it fails with a :func:`transient <is_transient>` error (or runs
    past ``timeout``), for at most ``budget_s`` (default :func:`retry_budget`) in all.
    Returns the last answer, with ``.retries`` (how many calls were repeated). Once the
    budget is spent on a transient error: ``raise_when_busy`` raises
    :class:`ControllerBusyError` (a submission, a requeue); otherwise the failed answer
    is returned (a state query says UNKNOWN). ``retry_on_timeout=False``: a call that ran
    past ``timeout`` is not repeated (a submission that may have gone through).
    OSError (no such command) propagates."""
    budget = retry_budget() if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    delay = FIRST_DELAY_S
    retries = 0
    while True:
        try:
            p = subprocess.run(list(argv), capture_output=True, timeout=timeout, **kwargs)
            error = p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) \
                else (p.stderr or "")
            if p.returncode == 0 or not is_transient(error):
                p.retries = retries  # type: ignore[attr-defined]
                return p
        except subprocess.TimeoutExpired as e:
            if not retry_on_timeout:
                raise
            p, error = e, f"no answer within {timeout:g} s"
        error = error.strip().splitlines()[-1] if error.strip() else error
        left = deadline - time.monotonic()
        if left <= 0:
            message = (f"`{' '.join(argv[:2])}`: the batch system's controller kept "
                       f"answering {error!r} for {budget:g} s ({retries + 1} tries)")
            if raise_when_busy:
                raise ControllerBusyError(message + f"; it may be overloaded: try again "
                                          f"later (${ENV_RETRY_S} bounds the wait)")
            get_logger("controller").warning(message + "; giving up")
            if isinstance(p, subprocess.TimeoutExpired):
                raise p
            p.retries = retries  # type: ignore[attr-defined]
            return p
        wait = min(delay, left)
        retries += 1
        get_logger("controller").warning(
            f"`{' '.join(argv[:2])}`: {error} (transient); retry {retries} in {wait:.1f} s "
            f"(giving up {max(0, deadline - time.monotonic()):.0f} s from now)")
        time.sleep(wait)
        delay = min(delay * 2, MAX_DELAY_S)
