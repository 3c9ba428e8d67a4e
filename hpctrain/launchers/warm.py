"""Fast restarts inside an allocation: a pool of warm spare workers for local ranks.

After a rank dies, the supervisor stops the others and starts a new worker group from the
latest checkpoint. A cold rank spends most of its start in imports (Python, ``torch``,
``torch._dynamo`` that DDP pulls in, hpctrain, the user's module): several seconds per
process, all ranks at once on the same cores. :class:`WarmLocalLauncher` keeps
``num_workers`` spare processes (:mod:`hpctrain.worker.spare`) that have done those
imports and wait for "become rank R of attempt A"; an attempt takes them instead of
spawning, and the pool is refilled in the background while the new group trains.

Spares are ordinary children of the supervisor, started exactly as local ranks are (own
session, stdout/stderr to a pipe, the attempt's environment), so the worker group, its
logs, exit codes and ``terminate`` are those of :class:`~hpctrain.launchers.local.
LocalWorkerGroup`. A spare that is not ready, has died, or was started with other
interpreter-level variables (:data:`hpctrain.worker.spare.FIXED_AT_START`) is not used:
that rank starts cold, as before. :meth:`WarmLocalLauncher.close` (called by the
supervisor when the run ends) ends every spare: closing its stdin ends it; SIGKILL after
a grace. A spare whose owner dies sees end of input and exits too.

On: ``HPCTRAIN_WARM_SPARES=1`` in the driver's environment (local launcher only);
``HPCTRAIN_WARM_SPARES_DELAY_S`` (default 0) waits that long after an attempt started
before warming its spares, so that on a machine with few cores they do not slow the
attempt's own start.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

from hpctrain.launchers.base import open_log
from hpctrain.launchers.local import LocalLauncher, LocalWorkerGroup, signal_group, free_port
from hpctrain.common.log import get_logger
from hpctrain.worker.spare import READY_SUFFIX, fixed_part

_logger = get_logger("warmpool")

ENV_SWITCH = "HPCTRAIN_WARM_SPARES"
ENV_DELAY = "HPCTRAIN_WARM_SPARES_DELAY_S"


def warm_spares_requested(env: Optional[Dict[str, str]] = None) -> bool:
    value = (env if env is not None else os.environ).get(ENV_SWITCH, "").strip().lower()
    return value in ("1", "true", "yes", "on")


class _Spare:
    def __init__(self, proc: subprocess.Popen, fixed: Dict[str, str], run_dir: str):
        self.proc = proc
        self.fixed = fixed
        self.ready_file = os.path.join(run_dir, ".hpctrain", "spares",
                                       f"{proc.pid}{READY_SUFFIX}")

    def usable(self, fixed: Dict[str, str]) -> bool:
        return self.proc.poll() is None and self.fixed == fixed


class WarmLocalLauncher(LocalLauncher):
    """The local launcher with warm spares (see the module's doc)."""

    name = "local"

    def __init__(self, python: str = sys.executable):
        self.python = python
        self._spares: List[_Spare] = []
        self._lock = threading.Lock()
        self._closed = False
        self._refill: Optional[threading.Thread] = None
        self._cancel = threading.Event()
        #: how many ranks of each launch came from a spare (for tests and the bench)
        self.history: List[int] = []

    # -- the pool ------------------------------------------------------------------
    def _start_spare(self, env: Dict[str, str], run_dir: str) -> Optional[_Spare]:
        senv = dict(env)
        senv.update(PYTHONUNBUFFERED="1", HPCTRAIN_PARENT_PID=str(os.getpid()))
        # a spare gets its attempt's whole environment (group secret included) over its
        # stdin when it is assigned; until then it holds no attempt's secret
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_PORT",
                  "HPCTRAIN_GROUP_SECRET"):
            senv.pop(k, None)
        try:
            proc = subprocess.Popen([self.python, "-m", "hpctrain.worker.spare", run_dir],
                                    env=senv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            _logger.warning(f"cannot start a warm spare ({e}); ranks start cold")
            return None
        return _Spare(proc, fixed_part(senv), run_dir)

    def _fill(self, env: Dict[str, str], run_dir: str, count: int, delay: float) -> None:
        if delay > 0 and self._cancel.wait(delay):
            return
        for _ in range(count):
            with self._lock:
                if self._closed or self._cancel.is_set():
                    return
                spare = self._start_spare(env, run_dir)
                if spare is None:
                    return
                self._spares.append(spare)

    def ready_count(self) -> int:
        """Spares that have finished their imports."""
        with self._lock:
            return sum(1 for s in self._spares
                       if s.proc.poll() is None and os.path.exists(s.ready_file))

    # -- the launcher --------------------------------------------------------------
    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line=None) -> LocalWorkerGroup:
        run_dir = command[-1] if command else ""
        warmable = (len(command) == 4 and command[1:3] == ["-m", "hpctrain.worker"]
                    and command[0] == self.python)
        if not warmable:
            return super().launch(command=command, env=env, num_workers=num_workers,
                                  log_dir=log_dir, on_line=on_line)
        if self._refill is not None:  # a refill still sleeping or spawning: let it finish
            self._refill.join()
        os.makedirs(log_dir, exist_ok=True)
        port = env.get("MASTER_PORT") or str(free_port())
        fixed = None
        procs, logs, warm = [], [], 0
        with self._lock:
            spares, self._spares = self._spares, []
        for rank in range(num_workers):
            wenv = dict(env)
            wenv.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(num_workers),
                        LOCAL_WORLD_SIZE=str(num_workers), GROUP_RANK="0", NODE_RANK="0",
                        MASTER_ADDR=env.get("MASTER_ADDR", "127.0.0.1"), MASTER_PORT=port,
                        PYTHONUNBUFFERED="1", HPCTRAIN_PARENT_PID=str(os.getpid()))
            if fixed is None:
                fixed = fixed_part(wenv)
            logs.append(open_log(log_dir, f"rank-{rank}.out"))
            proc = None
            while spares and proc is None:
                spare = spares.pop(0)
                if spare.usable(fixed) and os.path.exists(spare.ready_file):
                    try:
                        spare.proc.stdin.write((json.dumps(
                            {"env": wenv, "run_dir": run_dir}) + "\n").encode())
                        spare.proc.stdin.close()
                        proc = spare.proc
                        warm += 1
                    except OSError:
                        _end(spare.proc)
                else:
                    _end(spare.proc)
            if proc is None:
                proc = subprocess.Popen(list(command), env=wenv, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
            procs.append(proc)
        for spare in spares:  # more spares than ranks (a smaller group): not needed
            _end(spare.proc)
        self.history.append(warm)
        if warm:
            _logger.info(f"{warm} of {num_workers} ranks started from warm spares")
        # refill for the next restart while this group trains
        base = {k: v for k, v in env.items()}
        try:
            delay = float(os.environ.get(ENV_DELAY, "0") or 0)
        except ValueError:
            delay = 0.0
        self._cancel.clear()
        self._refill = threading.Thread(target=self._fill, args=(base, run_dir, num_workers,
                                                                 delay),
                                        name="hpctrain-warm-spares", daemon=True)
        self._refill.start()
        return LocalWorkerGroup(procs, logs, on_line)

    def close(self, grace: float = 5.0) -> None:
        """End every spare (the run is over)."""
        self._cancel.set()
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
        if self._refill is not None:
            self._refill.join(timeout=grace)
        with self._lock:  # a spare the refill started while we waited
            spares += self._spares
            self._spares = []
        for s in spares:
            try:
                s.proc.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + grace
        for s in spares:
            try:
                s.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(s.proc, 9)
                s.proc.wait()
            if s.proc.stdout is not None:
                s.proc.stdout.close()
            try:
                os.unlink(s.ready_file)
            except OSError:
                pass


def _end(proc: subprocess.Popen) -> None:
    """A spare that will not be used: end it now."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    signal_group(proc, 9)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
