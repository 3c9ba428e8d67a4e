"""``hpctrain.get_context()``: what a training function can ask about its place in the
job, read from its rank's :class:`~hpctrain.worker.session.Session`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:
    from hpctrain.worker.session import Session


class TrainContext:
    """What a training function can ask about its place in the job (Ray's TrainContext)."""

    def __init__(self, session: "Session"):
        self._s = session

    def get_world_rank(self) -> int:
        return self._s.info.world_rank

    def get_local_rank(self) -> int:
        return self._s.info.local_rank

    def get_node_rank(self) -> int:
        return self._s.info.node_rank

    def get_world_size(self) -> int:
        return self._s.info.world_size

    def get_local_world_size(self) -> int:
        return self._s.info.local_world_size

    def get_run_dir(self) -> str:
        return self._s.run.path

    def get_experiment_name(self) -> str:
        """``RunConfig.name`` (the run directory's name); in a sweep's trial, the
        sweep's name (the Tuner's ``RunConfig.name``), as in Ray."""
        return self._s.trial["experiment_name"]

    def get_trial_name(self) -> str:
        """In a sweep: the trial's directory name, ``trial_00007``. Otherwise Ray's form
        for a plain ``fit()``, ``TorchTrainer_<id>``, stable for the run directory."""
        return self._s.trial["trial_name"]

    def get_trial_id(self) -> str:
        """In a sweep: the trial's id in ``sweep.json``, ``trial_00007``. Otherwise Ray's
        form, ``<5 hex digits>_00000``, derived from the run directory (the same after
        restarts, requeues and ``restore``)."""
        return self._s.trial["trial_id"]

    def get_trial_dir(self) -> str:
        """The run directory (a sweep's trial: ``<sweep>/trial_00007``), on the shared
        filesystem: files written here stay with the run (Ray's trial directory)."""
        return self._s.run.path

    def get_metadata(self) -> Dict[str, Any]:
        """The trainer's ``metadata=`` (Ray's ``TrainContext.get_metadata``)."""
        return dict(self._s.metadata)

    def get_job_id(self) -> str:
        return self._s.info.job_id

    def get_restart_count(self) -> int:
        return self._s.info.restart_count

    def get_attempt(self) -> int:
        return self._s.attempt

    def get_hosts(self) -> List[str]:
        return list(self._s.info.hosts)

    def get_master_addr(self) -> str:
        return self._s.info.master_addr

    def get_iteration(self) -> int:
        """Reports made so far in this run (continues after a resume)."""
        return self._s.iteration

    def should_checkpoint(self) -> bool:
        """True once the scheduler warned of the time limit or a preemption: report a
        checkpoint now; the run stops cleanly after that report and resumes later. Also
        true when ``CheckpointConfig(checkpoint_frequency=...)`` says a checkpoint is due:
        after every N-th report, or (``"auto"``) once the Young–Daly interval has passed
        since the last checkpoint.

        The answer is agreed across ranks: it turns true on every rank after the same
        ``report()`` (the warning travels with the reports, so a loop learns of it at its
        next report), and a loop may branch on it, collectives included."""
        return self._s.should_checkpoint()

    def get_checkpoint_staging_dir(self) -> str:
        """A fresh directory on the run's filesystem. A checkpoint reported from it is
        moved (one rename per file) instead of copied."""
        return self._s.staging_dir()

    def __repr__(self) -> str:
        i = self._s.info
        return (f"TrainContext(world_rank={i.world_rank}, local_rank={i.local_rank}, "
                f"node_rank={i.node_rank}, world_size={i.world_size}, run={self._s.run.path!r})")


__all__ = ["TrainContext"]
