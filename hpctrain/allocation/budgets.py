"""The retry budget per cause, and when a run that makes no progress gives up.

A failed attempt has one cause: ``user`` (a rank's own Python exception), ``node`` (a
rank that ended without a traceback: killed, out of memory, a native crash, a lost node
or peer; or the launcher could not start the ranks) or ``hang`` (the watchdog). Each
counts toward ``FailureConfig.max_failures`` and toward its cause's own budget
(``max_user_errors``, ``max_node_failures``, ``max_hangs``; -1: none of its own), kept in
``state.json``'s ``failures_by_cause``. Preemptions and time limits have theirs apart
(``max_requeues``, :func:`.recovery.after_stop`).

Separately, ``idle_attempts`` counts the attempts in a row (failed ones and clean stops)
that committed no new checkpoint; at ``max_attempts_without_progress`` the run gives up.
How the run gave up is ``state.json``'s ``gave_up`` (``{"reason", "message"}``), and
:func:`exit_code` turns it into the documented exit code of ``hpctrain run`` and of the
batch job.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

USER, NODE, HANG = "user", "node", "hang"

#: Exit codes (docs/guide/fault-tolerance.md#exit-codes). 75 (a clean stop, to be
#: continued) is hpctrain.cli.main.EXIT_STOPPED.
EXIT_FAILED = 1
EXIT_NO_PROGRESS = 76
EXIT_NODE_FAILURES = 77
EXIT_HANGS = 78

#: the budget key and the exit code of each cause
BUDGETS = {USER: ("max_user_errors", EXIT_FAILED),
           NODE: ("max_node_failures", EXIT_NODE_FAILURES),
           HANG: ("max_hangs", EXIT_HANGS)}
NO_PROGRESS = "no_progress"

_WHAT = {USER: "errors in the training code", NODE: "node failures", HANG: "hangs"}


def count_failure(state: Dict[str, Any], cause: str, progressed: bool) -> None:
    """Count one failed attempt of ``cause`` in ``state`` (inside ``update_state``)."""
    by_cause = state.setdefault("failures_by_cause", {})
    by_cause[cause] = by_cause.get(cause, 0) + 1
    state["failures"] = state.get("failures", 0) + 1
    count_attempt_progress(state, progressed)


def count_attempt_progress(state: Dict[str, Any], progressed: bool) -> int:
    """One more attempt that did (reset) or did not commit a new checkpoint; the count
    of such attempts in a row."""
    state["idle_attempts"] = 0 if progressed else state.get("idle_attempts", 0) + 1
    return state["idle_attempts"]


#: ``max_attempts_without_progress`` when it is not given (None): the requeues in a row
#: without a new checkpoint, and the restarts after failures when ``max_failures`` is -1
DEFAULT_IDLE_ATTEMPTS = 3


def no_progress(state: Dict[str, Any], failure_config: Any, *,
                failed: bool = False) -> Optional[str]:
    """Why the run gives up for making no progress, or None. ``failed``: after a failure
    (a restart in the allocation), where by default only an unlimited ``max_failures``
    (-1) brings this limit in: a finite one keeps Ray's contract (it alone bounds the
    restarts)."""
    limit = getattr(failure_config, "max_attempts_without_progress", None)
    if limit is None:
        limit = (0 if failed and getattr(failure_config, "max_failures", -1) != -1
                 else DEFAULT_IDLE_ATTEMPTS)
    idle = state.get("idle_attempts", 0)
    if limit and idle >= limit:
        return (f"no progress: the last {idle} attempts committed no new checkpoint "
                f"(failure.max_attempts_without_progress = {limit}). HINT: read the "
                "attempts' errors (`hpctrain status`); checkpoint more often, or ask for a "
                "longer scheduler.time")
    return None


def spent(state: Dict[str, Any], cause: str, failure_config: Any) -> Optional[Tuple[str, str]]:
    """``(reason, message)`` when the failure just counted spends a budget: its cause's
    (reason: the cause) or ``max_failures`` (reason ``"max_failures"``); else None."""
    key, _ = BUDGETS[cause]
    limit = getattr(failure_config, key, -1)
    count = state.get("failures_by_cause", {}).get(cause, 0)
    if limit != -1 and count > limit:
        return cause, (f"the budget for {_WHAT[cause]} is spent: {count} failure(s) of this "
                       f"cause, failure.{key} = {limit}")
    total, limit = state.get("failures", 0), failure_config.max_failures
    if limit != -1 and total > limit:
        return "max_failures", f"failure.max_failures ({limit}) is spent: {total} failure(s)"
    return None


def give_up(state: Dict[str, Any], reason: str, message: str) -> None:
    """Record in ``state`` why the run stops retrying (``reason``: a cause,
    ``"max_failures"`` or :data:`NO_PROGRESS`)."""
    state["gave_up"] = {"reason": reason, "message": message}


def exit_code(state: Optional[Dict[str, Any]], default: int) -> int:
    """The exit code for how the run gave up (``default`` when it did not)."""
    reason = ((state or {}).get("gave_up") or {}).get("reason")
    if reason == NO_PROGRESS:
        return EXIT_NO_PROGRESS
    if reason in BUDGETS:
        return BUDGETS[reason][1]
    return default
