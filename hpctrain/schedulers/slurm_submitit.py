"""submitit's Slurm executor and job, extended where hpctrain needs more.

:meth:`HpctrainSlurmExecutor.submit_script` submits a script hpctrain rendered itself
(the bytes of ``<run>/job.sh``); :class:`SqueueFallbackWatcher` keeps job state working
on clusters without accounting (no slurmdbd, so ``sacct`` fails — submitit alone then
reports UNKNOWN forever) by asking ``squeue`` and then ``scontrol show job``.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Dict, List

import submitit
from submitit.slurm import slurm as submitit_slurm

from ..errors import ConfigError
from .controller import run_controller
from .slurm import scontrol_state, squeue_states


class SqueueFallbackWatcher(submitit_slurm.SlurmInfoWatcher):
    """submitit's Slurm watcher, with job state from ``squeue``/``scontrol`` when
    ``sacct`` is missing or fails (clusters without slurmdbd)."""

    def query(self, job_ids: List[str]) -> Dict[str, Dict[str, str]]:
        """State of each job, asked now: sacct, else squeue, else scontrol."""
        info: Dict[str, Dict[str, str]] = {}
        try:
            out = run_controller(["sacct", "-o", "JobID,State,NodeList", "--parsable2",
                                  *[a for j in job_ids for a in ("-j", j)]],
                                 text=True, timeout=30)
            if out.returncode == 0:
                info.update(self.read_info(out.stdout))
        except (OSError, subprocess.TimeoutExpired):
            pass
        missing = [j for j in job_ids if j not in info]
        if missing:
            info.update(squeue_states(missing))
        for j in job_ids:
            if j not in info:
                info[j] = scontrol_state(j)
        return info

    def update(self) -> None:
        to_check = sorted(x.split("_")[0] for x in self._registered - self._finished)
        if not to_check:
            return
        self._num_calls += 1
        self._info_dict.update(self.query(to_check))
        self._last_status_check = time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)


class HpctrainSlurmJob(submitit_slurm.SlurmJob):
    watcher = SqueueFallbackWatcher(delay_s=60)


class HpctrainSlurmExecutor(submitit.SlurmExecutor):
    """submitit's executor; ``submit_script`` sends a script hpctrain rendered, unchanged."""

    job_class = HpctrainSlurmJob

    def submit_script(self, script_path: str) -> HpctrainSlurmJob:
        path = Path(script_path).resolve()
        command = self._make_submission_command(path)   # ["sbatch", path]
        # from the caller's directory, as sbatch by hand: the job starts there; again
        # while the controller is busy (a ControllerBusyError once that lasts too long)
        p = run_controller(command, raise_when_busy=True, text=True)
        if p.returncode != 0:
            raise ConfigError(f"sbatch refused the job: {p.stderr.strip()}", file=str(path),
                              hint="the directives above come from the spec and its site; "
                                   "`hpctrain render` shows them")
        job_id = self._get_job_id_from_submission_command(p.stdout)
        return HpctrainSlurmJob(folder=self.folder, job_id=job_id, tasks=[0])
