"""Starting the asynchronous validations a run asks for, beside its supervisor.

Each report with ``validation=`` leaves its committed checkpoint PENDING_VALIDATION
(:mod:`hpctrain.rundir.validation`). :class:`ValidationJobs` — ticked with the
supervisor's poll, and once more when the attempts end — starts one validation per such
checkpoint that has none started yet (``.hpctrain/validation/<checkpoint>.launch.json``
says which):

* a local run: a process of its own (``python -m hpctrain.cli.batch RUN --validate
  NAME``), which the run waits for at its end, as Ray's ``fit()`` does;
* a batch job (Slurm, PBS, LSF): a job of its own, rendered from the scheduler's template
  like the training job, with one worker and the ``ValidationConfig``'s resources and
  scheduler options (another partition, a shorter walltime); the training allocation
  never waits for it, and a validation still queued when the training ends finishes on
  its own.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Mapping, Optional

from hpctrain.common.fsutil import atomic_write_bytes, atomic_write_json
from hpctrain.common.log import get_logger
from hpctrain.rundir.layout import CheckpointRecord, RunDir
from hpctrain.config import ScalingConfig
from hpctrain.errors import ConfigError
from hpctrain.schedulers import get_scheduler
from hpctrain.schedulers.base import BatchRequest

_log = get_logger("validation")

#: How often the supervisor's poll looks for new requests (seconds).
SCAN_EVERY_S = 1.0


def validation_command(python: str, run_path: str, name: str) -> List[str]:
    """The process that validates checkpoint ``name`` of the run at ``run_path``."""
    return [python, "-m", "hpctrain.cli.batch", run_path, "--validate", name]


def validation_spec(spec: Any, config: Any) -> Any:
    """The job spec of a validation job: the run's, with one worker, the
    ``ValidationConfig``'s resources (``ray_remote_kwargs``) and its scheduler options
    over the training job's (no dependency on another job). ``config``: those two, as
    the run's ``.hpctrain/validation/settings.config.json`` holds them."""
    remote = config.get("ray_remote_kwargs") or {}
    gpus = int(remote.get("num_gpus") or 0)
    scaling = ScalingConfig(
        num_workers=1, use_gpu=gpus > 0, gpus_per_worker=gpus,
        cpus_per_worker=int(remote["num_cpus"]) if remote.get("num_cpus") else None,
        mem_per_worker=remote.get("memory"),
        accelerator_type=spec.scaling.accelerator_type if gpus else None)
    fields = {f.name for f in dataclasses.fields(spec.scheduler)}
    options = config.get("scheduler") or {}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ConfigError(
            f"ValidationConfig(scheduler=...): {', '.join(unknown)} is no [scheduler] "
            f"option of {spec.scheduler.kind}", hint="one of " + ", ".join(sorted(fields)))
    scheduler = dataclasses.replace(spec.scheduler, **{"after": None, **options})
    return dataclasses.replace(spec, scaling=scaling, scheduler=scheduler)


def render_validation_job(run: RunDir, spec: Any, config: Dict[str, Any], name: str):
    """``(scheduler, script)``: the batch script that validates checkpoint ``name``,
    rendered from the scheduler's template like the training job's (job name
    ``<run>-validate``, its own log ``logs/validation-<checkpoint>-<job id>.out``)."""
    scheduler = get_scheduler(spec.scheduler.kind)
    request = BatchRequest(validation_spec(spec, config), run.path,
                           rerender="(a validation job of hpctrain)",
                           name=f"{run.name}-validate")
    return scheduler, scheduler.render(
        request, batch_args=f" --validate {shlex.quote(name)}",
        log_file=f"{run.path}/logs/validation-{name}-${{{scheduler.job_id_var}}}.out")


class ValidationJobs:
    """Starts the run's validations (see the module's text).

    :param env: variables over this process's for a local validation (PYTHONPATH)
    :param spec: the run's spec; its scheduler decides process or batch job
    :param batch: True inside a batch job (validations become jobs of their own)"""

    def __init__(self, run: RunDir, spec: Any, config: Any, *, batch: bool,
                 env: Optional[Mapping[str, str]] = None, python: str = sys.executable):
        self.run, self.spec, self.config, self.batch = run, spec, config, batch
        self.env = dict(env or {})
        self.python = python
        self.processes: Dict[str, subprocess.Popen] = {}
        self.jobs: Dict[str, str] = {}
        self._last_scan = 0.0

    def tick(self, force: bool = False) -> None:
        """Start a validation for every checkpoint that asks for one and has none."""
        now = time.monotonic()
        if not force and now - self._last_scan < SCAN_EVERY_S:
            return
        self._last_scan = now
        for proc in self.processes.values():
            proc.poll()  # reaped: a process that ended is seen to be gone
        for rec in self.run.list_checkpoints():
            if rec.launch is None and rec.status == "PENDING_VALIDATION" and (
                    rec.name not in self.processes and rec.name not in self.jobs):
                try:
                    self._start(rec)
                except Exception as e:  # noqa: BLE001 - never the training's end
                    self._record_failure(rec, e)

    def _start(self, rec: CheckpointRecord) -> None:
        self.run.makedirs(os.path.dirname(self.run.validation_file(rec.name)))
        if not self.batch:
            log = os.path.join(self.run.logs_dir("validation"), f"{rec.name}.out")
            self.run.makedirs(os.path.dirname(log))
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    validation_command(self.python, self.run.path, rec.name),
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, **self.env}, start_new_session=True)
            self.processes[rec.name] = proc
            launch = {"kind": "local", "pid": proc.pid, "host": socket.gethostname(),
                      "log": log, "result": self.run.validation_file(rec.name)}
        else:
            scheduler, script = render_validation_job(self.run, self.spec, self.config,
                                                      rec.name)
            path = self.run.validation_file(rec.name, "job").replace(".json", ".sh")
            atomic_write_bytes(path, script.encode(), sync=False, mode=self.run.script_mode)
            job_id = scheduler.submit(path)
            self.jobs[rec.name] = job_id
            launch = {"kind": scheduler.name, "job_id": job_id, "script": path}
            _log.info(f"{rec.name}: validation job {job_id} submitted")
        atomic_write_json(self.run.validation_file(rec.name, "launch"),
                          {**launch, "time": time.time()}, mode=self.run.file_mode)

    def _record_failure(self, rec: CheckpointRecord, e: Exception) -> None:
        """A validation that could not even start: recorded as its result (the
        checkpoint stays COMMITTED), with the reason."""
        _log.error(f"{rec.name}: the validation could not start: {e}")
        atomic_write_json(self.run.validation_file(rec.name),
                          {"error": f"the validation could not start: {e}",
                           "time": time.time()}, mode=self.run.file_mode)

    def wait(self, timeout_s: Optional[float] = None) -> None:
        """A local run's end: start what is left, then wait for its validation
        processes (a validation's own ``timeout_s`` ends the wait for it)."""
        self.tick(force=True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for name, proc in self.processes.items():
            rec_timeout = self._timeout_of(name)
            end = deadline if rec_timeout is None else min(
                deadline or float("inf"), time.monotonic() + rec_timeout)
            try:
                proc.wait(None if end is None else max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log.warning(f"{name}: the validation is still running; not waiting for it "
                             f"(process {proc.pid}, result in "
                             f"{self.run.validation_file(name)})")

    def _timeout_of(self, name: str) -> Optional[float]:
        for rec in self.run.list_checkpoints():
            if rec.name == name:
                return (rec.metadata.get("validation") or {}).get("timeout_s")
        return None


__all__ = ["ValidationJobs", "validation_spec", "validation_command", "render_validation_job"]
