"""One training process: ``python -m hpctrain.worker RUN_DIR``.

Started by a launcher (local spawn, srun, mpiexec) once per rank. Reads its place in
the job from the environment (:mod:`hpctrain.cluster_env`), the work from the run
directory's payload, sets up the backend, runs the training function and leaves either
its return value or its traceback in ``.hpctrain/attempt-NNN/``.

Exit codes: 0 done, or stopped cleanly after the scheduler's warning (then
``stopped.rank-R.json`` is left in the attempt directory); 1 the training function (or
set-up) raised.

The warning reaches a rank two ways: rank 0 watches for the supervisor's stop file
(``.hpctrain/attempt-NNN/stop``), and every rank takes the warning signal itself
(``scancel --signal=USR1 <job>`` signals the ranks directly). Either way the request
travels to all ranks with the next agreement (see :mod:`.session`).
"""
from __future__ import annotations

import inspect
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, Optional

import cloudpickle

from hpctrain import cluster_env
from hpctrain import rendezvous
from hpctrain.common.fsutil import atomic_write_bytes, atomic_write_json
from hpctrain.rundir.layout import STOP_FILE, RunDir  # noqa: F401 - re-exported
from hpctrain.rundir.payload import WorkerPayload
from hpctrain.common.trust import fix_mode, modes_of, no_write_for_others
from hpctrain.worker.heartbeat import Heartbeat
from hpctrain.worker.session import (Session, SingleProcessCoordinator, StopTraining,
                                               request_stop, set_session)
from hpctrain.worker.trial import trial_control
from hpctrain.backends import get_backend

# Variables the supervisor sets for every rank of an attempt.
ENV_RUN_DIR = "HPCTRAIN_RUN_DIR"
ENV_ATTEMPT = "HPCTRAIN_ATTEMPT"
#: The attempt's random secret that authenticates the ranks to each other; only ever in
#: the environment, never on a command line, in ``job.sh``, ``spec.toml`` or a log
#: (named by :mod:`hpctrain.rendezvous`, which reads it: the lower module).
ENV_GROUP_SECRET = rendezvous.ENV_GROUP_SECRET
ENV_RESUME = "HPCTRAIN_RESUME_CHECKPOINT"
ENV_CKPT_INDEX = "HPCTRAIN_CHECKPOINT_INDEX"
ENV_START_ITER = "HPCTRAIN_START_ITERATION"
ENV_WARNING_SIGNAL = "HPCTRAIN_WARNING_SIGNAL"
#: set by :func:`run_in_process` (local mode, ``ScalingConfig(num_workers=0)``)
ENV_IN_PROCESS = "HPCTRAIN_IN_PROCESS"
STOP_POLL_S = 0.1


def call_train_func(fn: Callable, config: Optional[Dict[str, Any]]) -> Any:
    """Ray accepts ``train_func()`` and ``train_func(config)``; so do we."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_arg = bool(params) or any(p.kind == p.VAR_POSITIONAL
                                        for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        takes_arg = True
    if takes_arg:
        return fn(config if config is not None else {})
    if config:
        raise TypeError(
            f"train_loop_config was given but {getattr(fn, '__name__', fn)}() takes no argument.\n"
            "HINT: define it as def train_func(config): ...")
    return fn()


def prepare_backend_environment(backend: str, config: Any) -> None:
    """The environment backend ``backend`` needs before anything of the user's is
    unpickled (the training function may import its framework as it is unpickled)."""
    get_backend(backend, config).prepare_environment()


def run_worker(run_dir: str) -> int:

    run = RunDir(run_dir)
    attempt = int(os.environ.get(ENV_ATTEMPT, "1"))
    adir = run.attempt_dir(attempt)
    rank = -1
    try:
        info = cluster_env.worker_info_from_env()
        rank = info.world_rank
        # local mode (the in-process launcher): no heartbeat thread, GPU binding or
        # framework process group in the driver's process; one rank, world size 1
        in_process = os.environ.get(ENV_IN_PROCESS) == "1"
        # the node as the scheduler names it (test nodes may share one host name)
        heartbeat = Heartbeat(adir, rank, host=info.hosts[info.node_rank]
                              if 0 <= info.node_rank < len(info.hosts) else None)
        if not in_process:
            heartbeat.start()  # before anything slow: start-up too
            _bind_gpus(info)
        payload = WorkerPayload.load(run, before_user=prepare_backend_environment)
        # (the batch step sets it for a site's GPU binding; the torch backend reads it)
        os.environ.setdefault("HPCTRAIN_GPUS_PER_WORKER", str(max(1, payload.scaling.gpus_each)))
        heartbeat.reached("loaded")
        backend = None if in_process else get_backend(payload.backend, payload.backend_config)
        if backend is not None:
            backend.on_start(info, use_gpu=payload.scaling.use_gpu)
        heartbeat.reached("ready")
        session = Session(
            info=info, run=run,
            coordinator=backend.coordinator(info) if backend is not None
            else SingleProcessCoordinator(),
            checkpoint_config=payload.checkpoint_config, run_name=payload.run_name,
            resume_checkpoint=os.environ.get(ENV_RESUME) or None,
            start_iteration=int(os.environ.get(ENV_START_ITER, "0")),
            next_checkpoint_index=int(os.environ.get(ENV_CKPT_INDEX, "0")),
            use_gpu=payload.scaling.use_gpu, per_rank_results=payload.per_rank_results,
            attempt=attempt, datasets=payload.datasets,
            datasets_to_split=payload.datasets_to_split,
            metadata=getattr(payload, "metadata", None),
            trial=getattr(payload, "trial", None),
            gpus_per_worker=payload.scaling.gpus_each,
            mtbi_s=getattr(payload, "mtbi_s", None),
            validation=getattr(payload, "validation", None))
        set_session(session)
        if rank == 0 and not in_process:
            _watch_stop_file(os.path.join(adir, STOP_FILE))
        fn = payload.train_func
        if hasattr(fn, "resolve") and not callable(fn):
            fn = fn.resolve()
        try:
            config = payload.train_loop_config
            control = trial_control(run.path, getattr(payload, "trial", None))
            if control is not None:  # a sweep's trial: PBT's or Optuna's config
                config = control.applied_config(config, run.path)
            value = call_train_func(fn, config)
        except StopTraining as stop:
            session.close_stopped()
            os.makedirs(adir, exist_ok=True)
            atomic_write_json(os.path.join(adir, f"stopped.rank-{rank}.json"), {
                "rank": rank, "iteration": stop.iteration, "checkpoint": stop.checkpoint,
                "time": time.time()}, sync=False)
            if os.environ.get("HPCTRAIN_FORKED_RANK") != "1" and backend is not None:
                # (a rank forked by a node zygote has been seen to hang here, in
                # destroy_process_group, once its peers had gone; it ends with os._exit)
                backend.on_shutdown(info)
            return 0
        session.close()
        if not in_process:
            heartbeat.flush()  # the last report's figures, for the run's metrics file
        if payload.keep_return_values:
            os.makedirs(adir, exist_ok=True)
            atomic_write_bytes(os.path.join(adir, RETURN_FILE.format(rank=rank)),
                               cloudpickle.dumps(value), sync=False, mode=0o600)
        elif rank == 0 and value is not None:
            _save_return_value(adir, value)
        if backend is not None:
            backend.on_shutdown(info)
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure must reach the supervisor
        record_failure(adir, rank, e)
        return 1


def run_in_process(env: Dict[str, str]) -> int:
    """Local mode: run the one rank of an attempt here, in this thread, with the
    attempt's environment ``env`` (plus rank 0 of 1) for its duration; return its exit
    status (0, or 1 after recording the failure as any rank does)."""
    saved = dict(os.environ)
    os.environ.update(env)
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                       "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "0", "GROUP_RANK": "0",
                       ENV_IN_PROCESS: "1"})
    try:
        return run_worker(env[ENV_RUN_DIR])
    finally:
        set_session(None)
        os.environ.clear()
        os.environ.update(saved)


def _watch_stop_file(path: str) -> None:
    """Rank 0: a daemon thread that turns the supervisor's stop file into a stop request
    (one ``stat`` per ``STOP_POLL_S``; the other ranks learn it from the agreement)."""


    def watch() -> None:
        while not os.path.exists(path):
            time.sleep(STOP_POLL_S)
        request_stop()

    threading.Thread(target=watch, name="hpctrain-stop-watch", daemon=True).start()


def _take_warning_signal() -> None:
    """The scheduler's warning signal, sent to the ranks themselves, asks for a stop
    instead of killing the process (installed before anything slow is imported)."""


    name = os.environ.get(ENV_WARNING_SIGNAL, "USR1")
    signum = getattr(signal, "SIG" + name, None)
    if signum is None:
        return

    def handler(_signum, _frame) -> None:
        request_stop()

    signal.signal(signum, handler)


def _bind_gpus(info) -> None:
    """Apply the site's per-rank GPU binding (``scheduler.gpu_binding``) before any
    framework is imported."""

    mode = os.environ.get("HPCTRAIN_GPU_BINDING", "none")
    devices = cluster_env.gpu_binding(
        mode, local_rank=info.local_rank, local_world_size=info.local_world_size,
        gpus_per_worker=int(os.environ.get("HPCTRAIN_GPUS_PER_WORKER", "1")))
    if devices is not None:
        os.environ[os.environ.get("HPCTRAIN_GPU_BINDING_VAR", "CUDA_VISIBLE_DEVICES")] = devices


def user_traceback(exc: BaseException) -> str:
    """``exc``'s traceback without the frames of this worker entry (``run_worker``,
    ``call_train_func``): it starts where the user's function (or the hpctrain code it
    called) raised."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None \
            and os.path.abspath(tb.tb_frame.f_code.co_filename) == _THIS_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


_THIS_FILE = os.path.abspath(__file__)


def record_failure(attempt_dir: str, rank: int, exc: BaseException) -> None:
    """Leave ``error.rank-R.json`` (rank, host, pid, time, traceback) for the supervisor,
    and print the traceback to this rank's log."""
    tb = user_traceback(exc)
    try:
        sys.stderr.write(tb)
        sys.stderr.flush()
    except OSError:
        pass  # the log is on a full disk: the error record below still may fit
    if rank < 0:
        rank = cluster_env.rank_hint(os.environ)
    try:
        os.makedirs(attempt_dir, exist_ok=True)
        atomic_write_json(os.path.join(attempt_dir, f"error.rank-{rank}.json"), {
            "rank": rank, "host": socket.gethostname(), "pid": os.getpid(),
            "time": time.time(), "type": type(exc).__name__, "message": str(exc),
            "traceback": tb,
        }, sync=False)
    except OSError:
        pass
    _save_exception(attempt_dir, rank, exc)


#: The worker's exception object, pickled beside ``error.rank-R.json`` (mode 0600): the
#: driver makes it the ``__cause__`` of the TrainingFailedError raised by ``fit()``.
ERROR_PICKLE = "error.rank-{rank}.pickle"
#: a rank's return value: every rank's with ``keep_return_values``, else rank 0's
#: (``Result.return_value``)
RETURN_FILE = "return.rank-{rank}.pkl"
MAX_ERROR_PICKLE_BYTES = 4 << 20


def _save_exception(attempt_dir: str, rank: int, exc: BaseException) -> None:
    """Pickle ``exc`` (cloudpickle: a class defined in the driver's script comes back
    as that very class) if it unpickles again here; otherwise leave nothing and the
    driver uses the text traceback."""
    try:
        data = cloudpickle.dumps(exc)
        if len(data) > MAX_ERROR_PICKLE_BYTES or not isinstance(cloudpickle.loads(data),
                                                                  BaseException):
            return
        atomic_write_bytes(os.path.join(attempt_dir, ERROR_PICKLE.format(rank=rank)), data,
                           sync=False, mode=0o600)
    except Exception:  # noqa: BLE001 - unpicklable (a lock, a lambda) or a full disk
        pass


def _save_return_value(attempt_dir: str, value: Any) -> None:
    """Rank 0's return value, for ``Result.return_value``: best effort (a value that
    cannot be pickled, a lock or an open file, is left out with a warning; the run
    still succeeds)."""
    try:
        data = cloudpickle.dumps(value)
    except Exception as e:  # noqa: BLE001 - whatever pickling raises
        logging.getLogger("hpctrain").warning(
            "rank 0's return value (%s) could not be pickled, Result.return_value will "
            "be None: %s", type(value).__name__, e)
        return
    os.makedirs(attempt_dir, exist_ok=True)
    atomic_write_bytes(os.path.join(attempt_dir, RETURN_FILE.format(rank=0)), data,
                       sync=False, mode=0o600)


def _exit_with_parent() -> None:
    """Locally started ranks end when their driver is gone (even after a SIGKILL that
    gave it no chance to stop them): a daemon thread watches the parent pid."""
    parent = os.environ.get("HPCTRAIN_PARENT_PID")
    if not parent:
        return

    def watch() -> None:
        while True:
            if os.getppid() != int(parent):
                try:  # stderr may be a pipe to the dead driver: never let that stop us
                    sys.stderr.write("[hpctrain] the driver process is gone; this rank exits\n")
                    sys.stderr.flush()
                finally:
                    os._exit(3)
            time.sleep(1.0)

    threading.Thread(target=watch, name="hpctrain-parent-watch", daemon=True).start()


def _redirect_output() -> None:
    """Under a step launcher (srun, mpiexec) each rank writes its own stdout and stderr
    to ``<HPCTRAIN_RANK_LOG_DIR>/rank-<R>.out``, the same layout as local runs."""
    log_dir = os.environ.get("HPCTRAIN_RANK_LOG_DIR")
    if not log_dir:
        return

    try:
        rank = cluster_env.worker_info_from_env().world_rank
    except Exception:  # noqa: BLE001 - run_worker reports a bad environment properly
        return
    os.makedirs(log_dir, exist_ok=True)
    mode = modes_of(log_dir)[1]
    fd = os.open(os.path.join(log_dir, f"rank-{rank}.out"),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    fix_mode(fd, mode)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: Optional[list] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    run_dir = argv[0] if argv else os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        sys.exit("usage: python -m hpctrain.worker RUN_DIR")
    no_write_for_others()
    _take_warning_signal()
    _exit_with_parent()
    _redirect_output()
    code = run_worker(run_dir)

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a failure a peer may be gone and a blocking
    # destructor (process group, data loader workers) must not keep us alive; after
    # success, C++ teardown of the collective library's threads has been seen to abort
    # ("terminate called without an active exception") about once in ten runs, turning
    # a finished training into a failed rank. Everything of ours is flushed and closed.
    os._exit(code)


if __name__ == "__main__":
    main()
