"""Runs the tracking callbacks in the supervisor process (why there: see
:mod:`hpctrain.callbacks`): follows ``result.json`` from where the previous supervisor of
this run stopped, hands new reports to each callback, and remembers the offset in
``.hpctrain/tracking.json``. A callback that raises is reported and switched off; a
problem of the runner itself (an unreadable or corrupt ``tracking.json``, a full disk) is
reported and the training goes on: tracking never stops a run."""
from __future__ import annotations

import os
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

import cloudpickle

from hpctrain.common.fsutil import atomic_write_bytes, atomic_write_json, read_json
from hpctrain.common.log import get_logger
from hpctrain.callbacks import Callback
from hpctrain.user_callback import UserCallback
from hpctrain.checkpoint import Checkpoint
from hpctrain.errors import UnsafePathError
from hpctrain.rundir.layout import ResultTail, RunDir
from hpctrain.common.trust import load_own_pickle, load_trusted_pickle
from hpctrain.worker.entry import ERROR_PICKLE, MAX_ERROR_PICKLE_BYTES

CALLBACKS_FILE = "callbacks.pkl"
TRACKING_FILE = "tracking.json"
SAVE_EVERY_S = 1.0


def _log(msg: str) -> None:
    """Trouble with a tracking callback (the training goes on): a warning."""

    get_logger("tracking").warning(msg)


def save_callbacks(run: RunDir, callbacks: List[Any]) -> None:
    """Keep the run's callbacks for the batch step (and ``Trainer.restore``): readable by
    the owner only (a callback's options may name a server)."""
    path = os.path.join(run.internal_dir, CALLBACKS_FILE)
    if callbacks:
        atomic_write_bytes(path, cloudpickle.dumps(list(callbacks)), sync=False, mode=0o600)
    elif os.path.exists(path):
        os.remove(path)


def load_callbacks(run: RunDir) -> List[Any]:
    path = os.path.join(run.internal_dir, CALLBACKS_FILE)
    if not os.path.exists(path):
        return []
    try:
        return list(load_trusted_pickle(path, what="the run's callbacks"))
    except UnsafePathError:
        raise  # someone else's file: never run it, never train on silently
    except Exception as e:  # noqa: BLE001 - a tracking problem must not stop the training
        _log(f"WARNING: the run's callbacks cannot be loaded here ({type(e).__name__}: {e}); "
             "training goes on without them")
        return []


class _SeedEraAdapter:
    """A seed-era ``TrainingCallback`` (``handle_result(results)``) given to RunConfig."""

    def __init__(self, cb: Any):
        self.cb = cb

    def setup(self, run) -> None:
        if hasattr(self.cb, "start_training"):
            self.cb.start_training(logdir=run.path, config=run.config)

    def on_results(self, rows: List[Dict[str, Any]]) -> None:
        for row in rows:
            self.cb.handle_result([row])

    def on_end(self, status: str) -> None:
        if hasattr(self.cb, "finish_training"):
            self.cb.finish_training(error=status == "FAILED")


WORKER_RESULTS = "worker-results"   # <run>/.hpctrain/worker-results/rank-R.jsonl
USER_STATE = "user"                 # .hpctrain/tracking-user.json: what was delivered
CHECK_FAILURES_S = 1.0              # how often state.json is read for failed attempts


class _UserCallbackAdapter:
    """A :class:`~hpctrain.callbacks.UserCallback` (Ray v2's): ``after_report`` once every
    rank's line of a report is in ``worker-results/rank-R.jsonl`` (a UserCallback turns
    those files on), ``after_exception`` once per failed attempt with the exceptions its
    ranks pickled. What was delivered is kept in ``tracking-user.json``, so a later
    allocation delivers only what is new."""

    def __init__(self, cb: UserCallback, run: RunDir):
        self.cb = cb
        self.run = run
        self.info: Any = None
        self._tails: List[ResultTail] = []
        self._lines: Dict[Tuple[int, int], List[Optional[Dict[str, Any]]]] = {}
        self._reported: Tuple[int, int] = (0, 0)   # (attempt, iteration) delivered last
        self._failed: List[int] = []               # attempts whose exceptions were delivered
        self._checked_at = 0.0

    def setup(self, info: Any) -> None:
        self.info = info
        spec = self.run.read_spec() or {}
        n = int((spec.get("scaling") or {}).get("num_workers") or 1)
        d = os.path.join(self.run.internal_dir, WORKER_RESULTS)
        self._tails = [ResultTail(os.path.join(d, f"rank-{r}.jsonl")) for r in range(n)]
        state = info.load_state(USER_STATE)
        self._reported = tuple(state.get("reported") or (0, 0))
        self._failed = list(state.get("exceptions") or [])

    def on_results(self, rows: List[Dict[str, Any]]) -> None:
        """(rank 0's rows: every rank's come from worker-results, see :meth:`poll`)"""

    def poll(self, final: bool = False) -> None:
        for rank, tail in enumerate(self._tails):
            for line in tail.poll():
                key = (int(line["attempt"]), int(line["metrics"]["_training_iteration"]))
                if key > self._reported:
                    self._lines.setdefault(key, [None] * len(self._tails))[rank] = line
        complete = sorted(k for k, v in self._lines.items() if None not in v)
        for key in complete:
            if key <= self._reported:  # an attempt that was followed by a newer one
                del self._lines[key]
                continue
            lines = self._lines[key]
            ckpt = None
            if any(line.get("checkpoint") for line in lines):
                ckpt = self._committed(key[1], lines[0].get("checkpoint_dir_name"))
                # Ray calls after_report once the checkpoint is persisted: wait for its
                # commit (a later agreement report publishes it), unless this attempt
                # is over (then it never was)
                if ckpt is None and not final and complete[-1][0] == key[0]:
                    break
            del self._lines[key]
            self._reported = key
            self._save()
            self.cb.after_report(self.info, [dict(line["metrics"]) for line in lines], ckpt)
        if final or time.time() - self._checked_at >= CHECK_FAILURES_S:
            self._checked_at = time.time()
            self._deliver_exceptions()

    def _committed(self, iteration: int, name: Optional[str]) -> Optional[Checkpoint]:
        """The committed checkpoint of ``iteration`` (the latest one, by index)."""
        if name:
            return Checkpoint(self.run.storage.join(self.run.checkpoints_dir, name))
        found = [r for r in self.run.list_checkpoints() if r.iteration == iteration]
        return found[-1].checkpoint() if found else None

    def _deliver_exceptions(self) -> None:
        for rec in self.run.read_state().get("attempts", []):
            number = rec.get("attempt")
            if rec.get("failed_rank") is None or not isinstance(number, int) \
                    or number in self._failed:
                continue
            adir = self.run.attempt_dir(number)
            found: Dict[int, BaseException] = {}
            for rank in range(len(self._tails)):
                exc = load_own_pickle(os.path.join(adir, ERROR_PICKLE.format(rank=rank)),
                                      MAX_ERROR_PICKLE_BYTES)
                if isinstance(exc, BaseException):
                    found[rank] = exc
            self._failed.append(number)
            self._save()
            self.cb.after_exception(self.info, found)

    def on_end(self, status: str) -> None:
        self.poll(final=True)

    def _save(self) -> None:
        self.info.save_state(USER_STATE, {"reported": list(self._reported),
                                          "exceptions": self._failed})


def _wrap(cb: Any, run: RunDir) -> Any:
    if isinstance(cb, UserCallback):
        return _UserCallbackAdapter(cb, run)
    if isinstance(cb, Callback) or not hasattr(cb, "handle_result"):
        return cb
    return _SeedEraAdapter(cb)


def _config(run: RunDir) -> Dict[str, Any]:
    try:
        return dict((run.read_spec() or {}).get("config") or {})
    except Exception:  # noqa: BLE001 - the config is a nicety for the trackers
        return {}


class CallbackRunner:
    def __init__(self, run: RunDir, callbacks: Optional[List[Any]]):
        self.run = run
        self.callbacks = [_wrap(cb, run) for cb in callbacks or []]
        self._state_file = os.path.join(run.internal_dir, TRACKING_FILE)
        self._tail = ResultTail(run.result_file)
        self._saved_at = 0.0
        self._dirty = False
        self._ended = False
        self._warned: set = set()

    def _call(self, cb: Any, method: str, *args: Any) -> None:
        fn = getattr(cb, method, None)
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - switch the callback off, train on
            name = type(getattr(cb, "cb", cb)).__name__
            _log(f"WARNING: callback {name}.{method} raised {type(e).__name__}: {e}; it is "
                 "switched off for the rest of this run\n" + traceback.format_exc().rstrip())
            self.callbacks = [c for c in self.callbacks if c is not cb]

    def _warn_once(self, what: str, e: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            _log(f"WARNING: tracking: {what} failed ({type(e).__name__}: {e}); the "
                 "training goes on")

    def _read_state(self) -> Dict[str, Any]:
        """What the previous supervisor saved; nothing when it is missing or unreadable
        (a crash may leave it empty): then every report is delivered again."""
        try:
            state = read_json(self._state_file, default={}) or {}
            if not isinstance(state, dict) or not isinstance(state.get("offset", 0), int):
                raise ValueError(f"not a tracking state: {state!r}"[:200])
            return state
        except Exception as e:  # noqa: BLE001 - tracking never stops the training
            _log(f"WARNING: {self._state_file} is unreadable ({type(e).__name__}: {e}); "
                 "the callbacks get every report from the first one")
            return {}

    def start(self) -> "CallbackRunner":
        if not self.callbacks:
            return self
        try:
            from hpctrain.callbacks import RunInfo

            state = self._read_state()
            self._tail._offset = state.get("offset", 0)
            info = RunInfo(path=self.run.path, name=self.run.name, config=_config(self.run),
                           resumed=bool(state))
        except Exception as e:  # noqa: BLE001 - tracking never stops the training
            self._warn_once("starting the callbacks", e)
            self.callbacks = []
            return self
        for cb in list(self.callbacks):
            self._call(cb, "setup", info)
        return self

    def tick(self) -> None:
        if not self.callbacks:
            return
        try:
            rows = self._tail.poll()
        except Exception as e:  # noqa: BLE001 - e.g. result.json on a failing filesystem
            self._warn_once("reading result.json", e)
            return
        for cb in [c for c in self.callbacks if hasattr(c, "poll")]:
            self._call(cb, "poll")
        if rows:
            for cb in list(self.callbacks):
                if hasattr(cb, "on_results"):
                    self._call(cb, "on_results", rows)
                else:
                    for row in rows:
                        self._call(cb, "on_result", row)
            self._dirty = True
        if self._dirty and time.time() - self._saved_at >= SAVE_EVERY_S:
            self._save()

    def _save(self) -> None:
        self._saved_at = time.time()
        try:
            done = self._tail._offset - len(self._tail._partial.encode())  # whole lines only
            atomic_write_json(self._state_file, {"offset": done}, sync=False, mode=0o600)
            self._dirty = False
        except Exception as e:  # noqa: BLE001 - retried at the next save
            self._warn_once(f"saving {self._state_file}", e)

    def end(self, status: str) -> None:
        """Deliver what is left, then ``on_end(status)`` (once)."""
        if self._ended or not self.callbacks:
            return
        self._ended = True
        self.tick()
        if self._dirty:
            self._save()
        for cb in list(self.callbacks):
            self._call(cb, "on_end", status)
