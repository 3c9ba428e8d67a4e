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
from typing import Any, Dict, List, Optional

import cloudpickle

from hpctrain._internal.base.fsutil import atomic_write_bytes, atomic_write_json, read_json
from hpctrain._internal.base.log import get_logger
from hpctrain.callbacks import Callback
from hpctrain.errors import UnsafePathError
from hpctrain._internal.rundir.layout import ResultTail, RunDir
from hpctrain._internal.base.trust import load_trusted_pickle

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


def _wrap(cb: Any) -> Any:

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
        self.callbacks = [_wrap(cb) for cb in callbacks or []]
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
