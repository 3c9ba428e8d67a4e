"""The Ray-named configuration dataclasses: :class:`ScalingConfig`, :class:`RunConfig`,
:class:`CheckpointConfig`, :class:`FailureConfig`, :class:`SyncConfig`,
:class:`DataConfig`, and the storage path helpers :class:`RunConfig` uses.
"""
from __future__ import annotations

import enum
import math
import os
import re
import signal
import warnings
from dataclasses import InitVar, dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence, Union
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError
from ..naming import RUN_NAME_PATTERN, check_run_name
from ..common.trust import SHARES
from ..units import UnitError, parse_memory, parse_walltime
from ..userconfig import storage_defaults
from .keys import TomlKey, python_only, toml, toml_keys
from ..common.registry import FILESYSTEM_SCHEME, STORAGE_URI_HINT, storage_for
from ..common.checkpoint_interval import frequency_value

DEFAULT_STORAGE_ENV = "HPCTRAIN_STORAGE_PATH"
#: A GPU type (Slurm GRES type names: ``a100``, ``a100_3g.20gb``, ``h100-80gb``…).
_GPU_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def default_storage_path() -> str:
    """The storage path without a job file: ``$HPCTRAIN_STORAGE_PATH``, the user config's
    ``storage_path``, the default site's ``[run] storage_path``, the center config's
    (:func:`hpctrain.userconfig.storage_default`), or ``~/hpctrain_results`` (Ray's
    ``~/ray_results``)."""

    return default_storage_paths()[0]


def default_storage_paths() -> List[str]:
    """Every storage path a run named without a path may be under, the default
    (:func:`default_storage_path`) first: also the default site's and the center
    config's when a variable or the user config set another."""
    out = [local_storage_path(value, where if where.startswith("$")
                              else f"storage_path ({where})")
           for value, where in storage_defaults()]
    out = out or [os.path.join(os.path.expanduser("~"), "hpctrain_results")]
    return list(dict.fromkeys(out))


_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")



def local_storage_path(value: str, key: str = "run.storage_path") -> str:
    """``value`` as a filesystem path: a ``file://`` URI (``file:///abs``, as Ray
    accepts) becomes its path; the URI of a registered storage kind
    (:func:`~hpctrain.common.registry.register_storage`) stays as it is; any other
    ``scheme://`` (``s3://``, ``gs://``, ``hdfs://``…) is refused with a ConfigError
    naming ``key``: such a string would otherwise become a local ``./s3:/…`` directory.

    >>> local_storage_path("file:///lustre/me/runs"), local_storage_path("/scratch/runs")
    ('/lustre/me/runs', '/scratch/runs')
    """
    m = _URI.match(value)
    if not m:
        return value
    scheme = m.group(1).lower()
    if scheme == "file":
        parts = urlsplit(value)
        if parts.netloc in ("", "localhost") and parts.path.startswith("/"):
            return unquote(parts.path)
        raise ConfigError(f"{key}: expected file:///absolute/path, got {value!r}",
                          hint=STORAGE_URI_HINT)
    storage_for(value, key)  # a scheme no storage kind is registered for: refused
    return value  # a registered storage kind's URI (hpctrain.storage): kept as it is


@dataclass
class ScalingConfig:
    """How many workers, and what each one gets.

    ``num_workers`` is the total number of training processes (ranks). On a cluster they
    are spread over ``num_nodes`` nodes (``workers_per_node`` each) by the launcher.

    Ray's two other fields, adapted to a batch system:

    * ``accelerator_type`` (``"a100"``, ``"h100"``…): the GPU type, part of the GPU request.
      Slurm: ``#SBATCH --gpus-per-node=a100:4`` (the site's GRES type names; ``sinfo -o
      "%G"`` lists them). PBS has no standard GPU-type resource (each site defines its
      own), so a PBS job refuses it: put the site's resource in the select chunk with
      ``directives={"select:gpu_type": "a100"}``. Needs GPUs (``use_gpu`` or
      ``gpus_per_worker``). A local run takes the GPUs the machine has.
    * ``trainer_resources``: what Ray reserves for its training coordinator actor. Here
      that role is the supervisor (the driver, or the batch step on the allocation's
      first node), which sleeps beside rank 0 inside the allocation and needs no
      reservation of its own: validated (a table of resource name → number ≥ 0) and
      otherwise ignored, with one warning when it asks for anything. Rank 0's node gets
      more with ``cpus_per_worker``/``mem_per_worker``.
    """

    num_workers: int = field(default=1, metadata=toml(
        "int", "Training processes (ranks) in all.", minimum=1))
    use_gpu: bool = field(default=False, metadata=toml(
        "bool", "One GPU per worker (unless gpus_per_worker says otherwise)."))
    resources_per_worker: Optional[Dict[str, float]] = field(default=None, metadata=toml(
        "numbers", 'What each worker gets, as in Ray: {CPU = 8, GPU = 1}.'))
    num_nodes: Optional[int] = field(default=None, metadata=toml(
        "int", "Nodes of the allocation (default: num_workers / workers_per_node, else 1).",
        minimum=1))
    workers_per_node: Optional[int] = field(default=None, metadata=toml(
        "int", "Workers on each node.", minimum=1))
    cpus_per_worker: Optional[int] = field(default=None, metadata=toml(
        "int", "CPU cores for each worker.", minimum=1))
    gpus_per_worker: Optional[int] = field(default=None, metadata=toml(
        "int", "GPUs for each worker (0: none, even with use_gpu).", minimum=0))
    mem_per_worker: Optional[str] = field(default=None, metadata=toml(
        "memory", 'Memory for each worker, e.g. "16G".'))
    accelerator_type: Optional[str] = field(default=None, metadata=toml(
        "str", 'The GPU type, e.g. "a100" (Slurm GRES type; PBS refuses it).',
        schema={"pattern": _GPU_TYPE.pattern}))
    trainer_resources: Optional[Dict[str, float]] = field(default=None, metadata=python_only(
        "Ray's reservation for its coordinator; accepted from Python and ignored"))

    def __post_init__(self) -> None:
        if any(_is_search_space(getattr(self, f.name)) for f in fields(self)):
            # a template for a sweep (Tuner(param_space={"scaling_config": ...})): each
            # trial's ScalingConfig is made from the resolved values, and checked then
            self._search_space = True
            return
        if isinstance(self.num_workers, (tuple, list)):
            raise ConfigError(
                f"scaling.num_workers: expected an integer, got {self.num_workers!r}",
                hint="Ray's elastic form (min_workers, max_workers) has no equivalent here: a "
                     "batch allocation's size is fixed when it starts; give the number of "
                     "workers (a failed rank restarts inside the allocation)")
        # 0: local mode, from Python (a job file's and a batch job's spec ask for >= 1)
        _check_int("scaling.num_workers", self.num_workers, minimum=0)
        if self.num_workers == 0 and (self.num_nodes or self.workers_per_node):
            raise ConfigError(
                "scaling: num_workers=0 (local mode: the training function runs in this "
                "process) takes no num_nodes or workers_per_node",
                hint="leave num_nodes and workers_per_node out, or give num_workers >= 1")
        self._check_trainer_resources()
        if not isinstance(self.use_gpu, bool):
            raise ConfigError(f"scaling.use_gpu: expected true or false, got {self.use_gpu!r}")
        # num_workers above: 0 is local mode from Python, where a job file asks for >= 1
        _check_declared_ints(self, "scaling", but=("num_workers",))
        if self.mem_per_worker is not None:

            try:
                parse_memory(self.mem_per_worker)
            except UnitError as e:
                raise ConfigError(f"scaling.mem_per_worker: {e}", hint=e.hint) from None
        if self.num_nodes and self.workers_per_node:
            expected = self.num_nodes * self.workers_per_node
            if self.num_workers not in (1, expected):
                raise ConfigError(
                    f"scaling: num_workers={self.num_workers} but num_nodes × workers_per_node"
                    f" = {expected}; give one or make them agree"
                )
            self.num_workers = expected
        elif self.num_nodes and self.num_workers % self.num_nodes:
            raise ConfigError(
                f"scaling: num_workers={self.num_workers} does not divide evenly over "
                f"num_nodes={self.num_nodes}",
                hint="give workers_per_node, or a num_workers that is a multiple of num_nodes")
        elif self.workers_per_node and self.num_workers % self.workers_per_node:
            raise ConfigError(
                f"scaling: num_workers={self.num_workers} is not a multiple of "
                f"workers_per_node={self.workers_per_node}")
        self._check_accelerator_type()

    def _check_accelerator_type(self) -> None:
        t = self.accelerator_type
        if t is None:
            return
        if not isinstance(t, str) or not _GPU_TYPE.match(t):
            raise ConfigError(
                f"scaling.accelerator_type: expected a GPU type name (letters, digits, "
                f"\".\", \"_\", \"-\"), got {t!r}",
                hint="the names the site gives its GPUs, e.g. \"a100\" (sinfo -o \"%G\" "
                     "lists Slurm's)")
        if self.gpus_each == 0:
            raise ConfigError(
                f"scaling.accelerator_type: {t!r} is a GPU type, but no GPUs are requested",
                hint="set use_gpu=True (or gpus_per_worker); to pick nodes by another "
                     "feature use scheduler.constraint")

    def _check_trainer_resources(self) -> None:
        res = self.trainer_resources
        if res is None:
            return
        if not isinstance(res, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                and v >= 0 for k, v in res.items()):
            raise ConfigError(
                f"scaling.trainer_resources: expected a table of resource name → number ≥ 0 "
                f"(e.g. {{\"CPU\": 1}}), got {res!r}",
                hint="it is Ray's reservation for its coordinator actor; hpctrain's supervisor "
                     "needs none (leave it out)")
        if any(v > 0 for v in res.values()):
            warnings.warn(
                f"ScalingConfig(trainer_resources={res!r}) is ignored: hpctrain's supervisor "
                "runs inside the allocation beside rank 0 and reserves nothing of its own; "
                "give rank 0's node more with cpus_per_worker or mem_per_worker",
                UserWarning, stacklevel=3)

    @property
    def nodes(self) -> int:
        """Nodes of the allocation: ``num_nodes``, else ``num_workers / workers_per_node``,
        else 1 (every worker on one node)."""
        if self.num_nodes:
            return self.num_nodes
        if self.workers_per_node:
            return self.num_workers // self.workers_per_node
        return 1

    @property
    def per_node(self) -> int:
        """Workers on each node."""
        return self.num_workers // self.nodes

    @property
    def gpus_each(self) -> int:
        """GPUs per worker: ``gpus_per_worker``, else ``resources_per_worker["GPU"]``, else
        1 with ``use_gpu`` and 0 without."""
        if self.gpus_per_worker is not None:
            return self.gpus_per_worker
        res = self.resources_per_worker or {}
        if "GPU" in res:
            return math.ceil(res["GPU"])  # a batch system allocates whole GPUs
        return 1 if self.use_gpu else 0

    @property
    def cpus_each(self) -> Optional[int]:
        """CPUs per worker: ``cpus_per_worker``, else ``resources_per_worker["CPU"]``."""
        if self.cpus_per_worker is not None:
            return self.cpus_per_worker
        res = self.resources_per_worker or {}
        return math.ceil(res["CPU"]) if "CPU" in res else None


class CheckpointUploadMode(str, enum.Enum):
    """How ``report()`` commits a checkpoint (Ray Train's ``CheckpointUploadMode``).

    ``SYNC``: committed (copied, fsynced, published) before ``report()`` returns.
    ``ASYNC``: ``report()`` returns after a snapshot (the files are moved aside); the
    copy and the fsyncs run in the background and the checkpoint is published at a later
    report, or when the training stops or ends (docs/guide/async-checkpoints.md).
    """

    SYNC = "sync"
    ASYNC = "async"


def upload_mode(value: Any, where: str = "checkpoint_upload_mode") -> CheckpointUploadMode:
    """``"sync"``/``"async"`` (any case), the enum, or Ray's enum (by its name)."""
    if isinstance(value, CheckpointUploadMode):
        return value
    name = getattr(value, "name", value)  # ray.train.CheckpointUploadMode.ASYNC
    if isinstance(name, str) and name.lower() in ("sync", "async"):
        return CheckpointUploadMode(name.lower())
    raise ConfigError(f"{where}: expected \"sync\" or \"async\", got {value!r}",
                      hint="CheckpointUploadMode.ASYNC (or \"async\") commits in the "
                           "background; \"sync\" (the default) before report() returns")


@dataclass
class CheckpointConfig:
    """Checkpoint retention, as in Ray Train.

    ``num_to_keep`` keeps the best K checkpoints by ``checkpoint_score_attribute``
    (or the K most recent when no attribute is given). The most recent checkpoint — the
    one a restart resumes from — is always kept in addition.

    ``sync_to_disk`` (hpctrain only): fsync checkpoint files before publishing them, so a
    committed checkpoint survives a node crash, not only a process kill.

    ``checkpoint_upload_mode``: ``"sync"`` (default) commits a checkpoint before
    ``report()`` returns; ``"async"`` (Ray's ``CheckpointUploadMode.ASYNC``) returns after
    moving the files aside and commits in the background, with the same atomicity (see
    docs/guide/async-checkpoints.md). ``report(..., checkpoint_upload_mode=...)``
    overrides it per call.

    ``local_dir`` (hpctrain only): the node-local checkpoint tier (see
    docs/guide/local-tier.md): a checkpoint is committed to this node-local directory
    first, drained to the run directory in the background (as ``"async"``), and a restart
    in the same allocation on the same node restores from the local copy once verified.

    ``checkpoint_frequency``: ``None`` (the loop decides), a number of reports, or
    ``"auto"`` — the Young–Daly interval from the measured checkpoint cost and the
    interruptions seen by the run and its site (``FailureConfig.mtbi``). The loop asks
    ``hpctrain.get_context().should_checkpoint()``; ``frequency=`` is accepted as a
    shorter spelling.
    """

    num_to_keep: Optional[int] = field(default=None, metadata=toml(
        "int", "Checkpoints kept (the best ones by checkpoint_score_attribute, else the "
        "latest), besides the latest one.", minimum=1))
    checkpoint_score_attribute: Optional[str] = field(default=None, metadata=toml(
        "str", "The reported metric that ranks checkpoints."))
    checkpoint_score_order: str = field(default="max", metadata=toml(
        "str", "Whether a larger (max) or a smaller (min) score is better.",
        choices=("max", "min"), own_check=True))
    sync_to_disk: bool = field(default=True, metadata=toml(
        "bool", "fsync checkpoint files before publishing them."))
    checkpoint_upload_mode: Any = field(default="sync", metadata=toml(
        "str", "sync: committed before report() returns; async: committed in the background.",
        choices=("sync", "async")))
    checkpoint_frequency: Any = field(default=None, metadata=toml(
        "frequency", '"auto" (the Young-Daly interval) or a number of reports; unset: the '
        "loop decides."))
    local_dir: Optional[str] = field(default=None, metadata=toml(
        "str", "A node-local directory (e.g. \"$TMPDIR\", \"/dev/shm\", a node's NVMe; "
        "environment variables expanded on the node): checkpoints are committed there "
        "first and drained to the run directory in the background; a restart in the same "
        "allocation restores from it."))
    frequency: InitVar[Any] = None
    #: Ray's (unused by its v2 trainers with a training loop): refused with a hint
    checkpoint_at_end: InitVar[Any] = None

    def __post_init__(self, frequency: Any = None, checkpoint_at_end: Any = None) -> None:
        if checkpoint_at_end is not None:
            raise ConfigError(
                f"checkpoint.checkpoint_at_end={checkpoint_at_end!r}: not a setting here (Ray "
                "Train v2 dropped it too: a training loop decides)",
                hint="report a checkpoint after your loop's last step; XGBoost/LightGBM: "
                     "RayTrainReportCallback(checkpoint_at_end=True) (the default)")

        if frequency is not None:
            if self.checkpoint_frequency not in (None, frequency):
                raise ConfigError("checkpoint: give checkpoint_frequency or frequency, not "
                                  f"both ({self.checkpoint_frequency!r}, {frequency!r})")
            self.checkpoint_frequency = frequency
        self.checkpoint_frequency = frequency_value(self.checkpoint_frequency)
        self.checkpoint_upload_mode = upload_mode(self.checkpoint_upload_mode,
                                                  "checkpoint.checkpoint_upload_mode").value
        if self.local_dir is not None and (not isinstance(self.local_dir, str)
                                           or not self.local_dir.strip()):
            raise ConfigError(
                f"checkpoint.local_dir: expected a directory path (string), got "
                f"{self.local_dir!r}",
                hint='a node-local directory such as "$TMPDIR" or "/dev/shm"; leave it '
                     "unset to write checkpoints to the run directory only")
        _check_declared_ints(self, "checkpoint")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ConfigError(
                "checkpoint.checkpoint_score_order: expected \"max\" or \"min\", got "
                f"{self.checkpoint_score_order!r}"
            )
        if self.checkpoint_score_attribute is not None and not isinstance(
            self.checkpoint_score_attribute, str
        ):
            raise ConfigError(
                "checkpoint.checkpoint_score_attribute: expected a metric name (string), got "
                f"{self.checkpoint_score_attribute!r}"
            )

    @property
    def upload_mode_name(self) -> str:
        """``"sync"`` or ``"async"``."""
        return str(self.checkpoint_upload_mode)


#: Signals a scheduler may send as the warning before the time limit or preemption.
WARNING_SIGNALS = ("USR1", "USR2", "HUP", "URG", "XCPU")


def _signal_schema() -> Dict[str, Any]:
    """``warning_signal`` in JSON Schema: the names (for completion), and any case with or
    without ``SIG``, as :class:`FailureConfig` accepts them."""
    def any_case(text: str) -> str:
        return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c)
                       for c in text)

    names = "|".join(any_case(s) for s in WARNING_SIGNALS)
    return {"anyOf": [{"enum": list(WARNING_SIGNALS)},
                      {"pattern": f"^(?:{any_case('SIG')})?(?:{names})$"}]}


@dataclass
class FailureConfig:
    """What happens when something goes wrong.

    * ``max_failures``: restarts of the worker group after a rank died (0 = none,
      -1 = unlimited), counted across requeues.
    * ``warning_signal`` / ``warning_time``: the scheduler's warning before the time limit
      or a preemption. On Slurm it is rendered as ``#SBATCH --signal=B:USR1@120``; PBS has
      no warning, so the batch step keeps its own timer (walltime − ``warning_time``). On
      the warning every rank learns at the same report that it should checkpoint
      (``get_context().should_checkpoint()``); the next report with a checkpoint commits it
      and the ranks exit cleanly. A loop that does not checkpoint by the deadline (about
      ``warning_time`` − 15 s after the warning) is stopped and resumes from its last
      committed checkpoint.
      In a batch job whose end is known the supervisor also warns by itself earlier
      when ``warning_time`` leaves the ranks less than twice the measured cost of the
      last checkpoints to stop.
    * ``requeue``: after such a stop, continue in a new allocation (Slurm: ``scontrol
      requeue``; PBS: the job resubmits itself with ``-W depend=afterany``). False: the run
      ends as STOPPED, to be continued with ``Trainer.restore(path)``.
    * ``max_requeues`` (alias ``max_preemption_failures``, Ray v2's name): how many times
      that may happen (-1 = unlimited), counted apart from ``max_failures``.
    * ``max_user_errors``, ``max_node_failures``, ``max_hangs`` (hpctrain's own): a
      budget per cause of failure, each counted apart (-1, the default: only
      ``max_failures`` bounds that cause). A failure counts toward ``max_failures`` and
      toward its cause's budget: an exception raised by the training code (a user error),
      a rank that ended without a Python traceback (killed, out of memory, a native crash,
      a lost node or peer: a node failure), a hang. The run ends FAILED when either is
      spent, with exit code 1, 77 (node failures) or 78 (hangs).
    * ``max_attempts_without_progress`` (hpctrain's own): the run stops, exit code 76,
      after this many attempts in a row (restarts and requeues) that committed no new
      checkpoint, instead of restarting or requeueing forever (0: never). None (the
      default): 3 allocations in a row are requeued without progress; restarts after a
      failure are bounded by ``max_failures`` alone, as in Ray, unless it is -1
      (unlimited): then 3 restarts in a row without progress stop the run too.
    * ``max_excluded_nodes`` (hpctrain's own, default 4): the node of a rank that failed
      without a traceback or hung is recorded in ``state.json``'s ``bad_nodes`` and kept
      out of the next allocation (Slurm: the continuation is submitted with
      ``--exclude``), at most this many, and never so many that the job no longer fits
      its partition (0: none).
    * ``straggler_factor`` (hpctrain's own, default 2): each rank's step time is measured
      from its progress beats (with the hang watchdog on); a rank this many times slower
      than the others' median, over at least 5 steps, is named in a warning with its node
      (0: no warning). The statistics are in ``hpctrain status`` and ``results``.
    * ``hang_timeout`` (hpctrain's own): how long a rank may make no progress (no report,
      no batch of a prepared data loader) before the attempt counts as hung: every rank's
      Python stack is written to the attempt's directory, the attempt ends and the run
      restarts from its last checkpoint like after any failure. None (the default): the
      limit is learned from the run's own pace (3× the longest gap seen between two
      moves, at least 5 minutes; before the first move, 3× the longest start-up seen, at
      least 10 minutes); 0 (``"off"`` in a job file): no watchdog.
    """

    max_failures: int = field(default=0, metadata=toml(
        "int", "Restarts of the worker group after a rank died (-1: unlimited).", minimum=-1))
    warning_signal: str = field(default="USR1", metadata=toml(
        "str", "The scheduler's signal before the time limit or a preemption.",
        choices=WARNING_SIGNALS, own_check=True, schema=_signal_schema()))
    warning_time: Union[str, int] = field(default="120s", metadata=toml(
        "walltime", 'How long before the time limit the warning comes, e.g. "120s".'))
    requeue: bool = field(default=True, metadata=toml(
        "bool", "After a clean stop at the warning, continue in a new allocation."))
    max_requeues: int = field(default=-1, metadata=toml(
        "int", "How many times the run may be requeued (-1: unlimited).", minimum=-1))
    #: Mean time between interruptions at this site (a duration; None: one a day), the
    #: prior of ``CheckpointConfig(checkpoint_frequency="auto")``; a site config sets it
    #: under ``[failure] mtbi = "12h"``.
    mtbi: Union[str, int, None] = field(default=None, metadata=toml(
        "walltime", 'Mean time between interruptions at the site, e.g. "12h" (the prior '
        'of checkpoint_frequency = "auto").'))

    hang_timeout: Union[str, int, None] = field(default=None, metadata=toml(
        "str", 'How long a rank may make no progress before the attempt counts as hung, '
        'e.g. "20m" (default: learned from the run\'s own pace; "off": no watchdog).'))
    # the retry budget per cause (hpctrain's own: Ray has one max_failures); each failure
    # counts toward max_failures too, and toward its cause's budget when one is given
    max_user_errors: int = field(default=-1, metadata=toml(
        "int", "Restarts after the training code raised an exception (-1: only "
        "max_failures bounds them).", minimum=-1))
    max_node_failures: int = field(default=-1, metadata=toml(
        "int", "Restarts after a rank ended without a Python traceback: killed, out of "
        "memory, a native crash, a lost node or peer (-1: only max_failures bounds them).",
        minimum=-1))
    max_hangs: int = field(default=-1, metadata=toml(
        "int", "Restarts after a hang (-1: only max_failures bounds them).", minimum=-1))
    max_attempts_without_progress: Optional[int] = field(default=None, metadata=toml(
        "int", "Stop (exit code 76) after this many attempts in a row, restarts and "
        "requeues, that committed no new checkpoint (0: never; default: 3 requeues, and "
        "3 restarts when max_failures is -1).", minimum=0))
    max_excluded_nodes: int = field(default=4, metadata=toml(
        "int", "At most this many nodes blamed for a failure or a hang are kept out of "
        "the next allocation (Slurm; 0: none).", minimum=0))
    straggler_factor: Union[int, float] = field(default=2.0, metadata=toml(
        "number", "Warn when a rank's step time is this many times the other ranks' "
        "median (0: no warning).", minimum=0))
    #: Ray Train v2's name for ``max_requeues``: restarts after a preemption, counted
    #: apart from ``max_failures``. Here a preemption is the scheduler's warning (the time
    #: limit too) followed by a requeue; giving both with different values is an error.
    max_preemption_failures: Optional[int] = field(default=None, metadata=python_only(
        "Ray's name for [failure] max_requeues"))

    def __post_init__(self) -> None:
        _check_declared_ints(self, "failure")
        if isinstance(self.straggler_factor, bool) or not isinstance(
                self.straggler_factor, (int, float)) or not (
                self.straggler_factor == 0 or self.straggler_factor > 1):
            raise ConfigError(f"failure.straggler_factor: expected a number > 1 (0: no "
                              f"warning), got {self.straggler_factor!r}",
                              hint="1.5 warns when a rank is 50 % slower than the others")
        if self.max_preemption_failures is not None:
            _check_int("failure.max_preemption_failures", self.max_preemption_failures,
                       minimum=-1)
            if self.max_requeues not in (-1, self.max_preemption_failures):
                raise ConfigError(
                    f"failure: max_preemption_failures={self.max_preemption_failures} and "
                    f"max_requeues={self.max_requeues} disagree",
                    hint="max_preemption_failures is Ray's name for max_requeues: give one")
            self.max_requeues = self.max_preemption_failures
            self.max_preemption_failures = None  # taken: replace(max_requeues=...) works
        if not isinstance(self.requeue, bool):
            raise ConfigError(f"failure.requeue: expected true or false, got {self.requeue!r}")
        sig = self.warning_signal
        if isinstance(sig, str) and sig.upper().startswith("SIG"):
            sig = sig[3:]
        if not isinstance(sig, str) or sig.upper() not in WARNING_SIGNALS:
            raise ConfigError(
                f"failure.warning_signal: expected one of {', '.join(WARNING_SIGNALS)}, got "
                f"{self.warning_signal!r}",
                hint="USR1 (the default) is what sites document for `#SBATCH --signal`")
        self.warning_signal = sig.upper()
        if isinstance(self.mtbi, bool) or not isinstance(self.mtbi, (int, str, type(None))) \
                or isinstance(self.mtbi, int) and self.mtbi <= 0:
            raise ConfigError("failure.mtbi: expected a duration such as \"12h\" (or "
                              f"seconds > 0, from Python), got {self.mtbi!r}")
        self.mtbi_s  # noqa: B018 - checks the duration now
        if isinstance(self.hang_timeout, bool) or not isinstance(
                self.hang_timeout, (int, str, type(None))) \
                or isinstance(self.hang_timeout, int) and self.hang_timeout < 0:
            raise ConfigError("failure.hang_timeout: expected a duration such as \"20m\" (or "
                              f"seconds >= 0, from Python; 0: no watchdog), got "
                              f"{self.hang_timeout!r}")
        self.hang_timeout_s  # noqa: B018 - checks the duration now
        if isinstance(self.warning_time, bool) or not isinstance(self.warning_time, (int, str)):
            raise ConfigError("failure.warning_time: expected a duration such as \"120s\" or "
                              f"\"2m\" (or seconds, from Python), got {self.warning_time!r}")
        seconds = self.warning_s
        if not 10 <= seconds <= 65535:
            raise ConfigError(
                f"failure.warning_time: expected between 10 s and 65535 s (Slurm's limit), "
                f"got {self.warning_time!r} ({seconds} s)")

    @property
    def mtbi_s(self) -> Optional[int]:
        """``mtbi`` in seconds (None: not set)."""
        if self.mtbi is None or isinstance(self.mtbi, int) and not isinstance(self.mtbi, bool):
            return self.mtbi

        try:
            return parse_walltime(self.mtbi)
        except UnitError as e:
            raise ConfigError(f"failure.mtbi: {e}", hint="a duration such as \"12h\" or "
                              "\"2d\": the mean time between interruptions") from None

    @property
    def hang_timeout_s(self) -> Optional[int]:
        """``hang_timeout`` in seconds (None: learned; 0: no watchdog)."""
        if self.hang_timeout is None or isinstance(self.hang_timeout, int) \
                and not isinstance(self.hang_timeout, bool):
            return self.hang_timeout
        if self.hang_timeout.strip().lower() in ("off", "0", "0s"):
            return 0
        try:
            return parse_walltime(self.hang_timeout)
        except UnitError as e:
            raise ConfigError(f"failure.hang_timeout: {e}", hint="a duration such as \"20m\", "
                              "or \"off\" for no watchdog") from None

    @property
    def warning_s(self) -> int:
        """``warning_time`` in seconds."""
        if isinstance(self.warning_time, int):
            return self.warning_time

        try:
            return parse_walltime(self.warning_time)
        except UnitError as e:
            raise ConfigError(f"failure.warning_time: {e}", hint=getattr(e, "hint", None)) \
                from None

    @property
    def signal_number(self) -> int:
        return int(getattr(signal, "SIG" + self.warning_signal))


_SYNC_GONE = {
    "upload_dir": "give RunConfig(storage_path=...) instead",
    "syncer": "storage is the shared filesystem here: there is nothing to sync with",
    "sync_on_checkpoint": "remove it (checkpoints are written to storage directly)",
}


@dataclass
class SyncConfig:
    """Ray's ``SyncConfig``, accepted so that Ray scripts run unchanged. Ray uploads a
    trial's directory from the nodes to ``storage_path``; here every rank writes the run
    directory on the shared filesystem directly, so there is never anything to sync and
    each field is a no-op (validated, recorded, otherwise unused), but one:

    * ``sync_period`` (s, default 300): Ray's minimum time between two uploads.
    * ``sync_timeout`` (s, default 1800): how long Ray lets one upload run.
    * ``sync_artifacts`` (default False): Ray 2.x runs each worker in a trial working
      directory and uploads the files written there. hpctrain leaves the workers in the
      directory they were started in, so there would be nothing it could persist:
      ``True`` is refused, with a HINT to write them under
      ``get_context().get_trial_dir()`` (the run directory, on the shared filesystem).
    * ``sync_artifacts_on_checkpoint`` (default True): Ray uploads them at each checkpoint.

    Ray's removed fields (``upload_dir``, ``syncer``, ``sync_on_checkpoint``) are refused,
    as Ray 2.10+ refuses them; unknown ones are a ``TypeError`` (a dataclass).
    """

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True
    upload_dir: Any = None
    syncer: Any = None
    sync_on_checkpoint: Any = None

    def __post_init__(self) -> None:
        for key in ("sync_period", "sync_timeout"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ConfigError(f"sync_config.{key}: expected a number of seconds ≥ 0, "
                                  f"got {v!r}")
        for key in ("sync_artifacts", "sync_artifacts_on_checkpoint"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"sync_config.{key}: expected true or false, got "
                                  f"{getattr(self, key)!r}")
        if self.sync_artifacts:
            raise ConfigError(
                "sync_config.sync_artifacts: expected false; hpctrain does not run workers "
                "in a trial working directory, so the files a worker writes in its working "
                "directory are not persisted (Ray 2.x uploads them with this flag)",
                hint="write such files under hpctrain.get_context().get_trial_dir() (the run "
                     "directory, on the shared filesystem: kept with no syncing), and drop "
                     "sync_artifacts=True")
        for key, hint in _SYNC_GONE.items():
            if getattr(self, key) is not None:
                raise ConfigError(f"sync_config.{key}: removed from Ray's SyncConfig (Ray 2.10 "
                                  "refuses it too)", hint=hint)


@dataclass
class RunConfig:
    """Where the run directory goes and how the run behaves.

    The run directory is ``<storage_path>/<name>``. Running again with the same name
    continues that run from its latest committed checkpoint.
    """

    name: Optional[str] = field(default=None, metadata=toml(
        "str", "The run's name: its directory is <storage_path>/<name>; the same name "
        "again continues the run.", schema={"pattern": RUN_NAME_PATTERN}))
    storage_path: Optional[str] = field(default=None, metadata=toml(
        "str", "Where run directories go: a directory every node mounts (~ and $VARS "
        "expand; relative to the job file)."))
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig,
                                                metadata=python_only("the [checkpoint] section"))
    #: Ray's ``storage_filesystem``: a ``pyarrow.fs`` filesystem object (an
    #: ``S3FileSystem(endpoint_override=…)``); ``storage_path`` is then a path inside it
    #: (``bucket/prefix``, no scheme). See the storage guide.
    storage_filesystem: Any = field(default=None, metadata=python_only(
        "a storage_path URI (s3://bucket/prefix) in a job file"))
    failure_config: FailureConfig = field(default_factory=FailureConfig,
                                          metadata=python_only("the [failure] section"))
    verbose: int = field(default=1, metadata=toml(
        "int", "How much the driver prints: 0, 1 or 2.", choices=(0, 1, 2), own_check=True))
    callbacks: List[Any] = field(default_factory=list,
                                 metadata=python_only("the [callbacks] section"))
    #: Ray's upload settings: a no-op here (storage is shared); see :class:`SyncConfig`.
    sync_config: Optional[SyncConfig] = field(default=None, metadata=python_only(
        "Ray's upload settings, a no-op here"))
    #: A sweep's stopping criteria (Ray Tune's): ``{"training_iteration": 10, "loss": 0.1}``
    #: (a trial stops once any reported value reaches its threshold, ``>=``) or a function
    #: ``(trial_id, result) -> bool``. Given to the Tuner's (or the trainer's) RunConfig.
    stop: Any = field(default=None, metadata=python_only("[sweep] stop"))
    #: Who besides you may read the run directory (hpctrain's; Ray has no such setting):
    #: ``"private"`` (directories 0700, files 0600, whatever the umask) or ``"group"``
    #: (your project group reads: 0750/0640; it never writes). None: private for a new
    #: run, as it was for a run that continues.
    share: Optional[str] = field(default=None, metadata=toml(
        "str", "Who besides you reads the run directory: private (0700/0600) or group "
        "(the project group reads, 0750/0640; never writes).", choices=SHARES))

    def _check_storage_filesystem(self) -> None:
        fs, path = self.storage_filesystem, self.storage_path
        if not callable(getattr(fs, "get_file_info", None)) or not hasattr(fs, "type_name"):
            raise ConfigError(f"run.storage_filesystem: expected a pyarrow.fs.FileSystem, "
                              f"got {type(fs).__name__}",
                              hint="RunConfig(storage_filesystem=pyarrow.fs.S3FileSystem(...), "
                                   "storage_path='bucket/prefix')")
        if fs.type_name == "local":  # a local filesystem: storage_path is a path
            self.storage_filesystem = None
            return
        if path and path.startswith(f"{FILESYSTEM_SCHEME}://"):
            return  # checked already (a copy of this config)
        if not path or _URI.match(path):
            raise ConfigError(f"run.storage_path: with storage_filesystem, expected a path "
                              f"inside that filesystem (bucket/prefix), got {path!r}",
                              hint="give the URI's path without its scheme: s3://bucket/p "
                                   "-> storage_path='bucket/p'")
        self.storage_path = f"{FILESYSTEM_SCHEME}://{path.strip('/')}"

    def __post_init__(self) -> None:
        if self.sync_config is None:
            self.sync_config = SyncConfig()
        if not isinstance(self.sync_config, SyncConfig):
            raise ConfigError(f"run.sync_config: expected a SyncConfig, got "
                              f"{type(self.sync_config).__name__}",
                              hint="from hpctrain import SyncConfig")
        if isinstance(self.storage_path, os.PathLike):
            self.storage_path = os.fspath(self.storage_path)
        if self.storage_path is not None:
            if not isinstance(self.storage_path, str):
                raise ConfigError(f"run.storage_path: expected a path, got "
                                  f"{type(self.storage_path).__name__}")
            self.storage_path = local_storage_path(self.storage_path)
        if self.storage_filesystem is not None:
            self._check_storage_filesystem()
        if self.stop is not None:
            self.stop = check_stop(self.stop)
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.callbacks is None:
            self.callbacks = []
        if not isinstance(self.callbacks, (list, tuple)):
            raise ConfigError(f"run.callbacks: expected a list of callbacks, got "
                              f"{type(self.callbacks).__name__}")
        self.callbacks = list(self.callbacks)
        if self.callbacks:
            from ..callbacks import check_callbacks

            check_callbacks(self.callbacks)
        if self.name is not None:

            check_run_name(self.name, key="run.name")
        if self.verbose not in (0, 1, 2):
            raise ConfigError(f"run.verbose: expected 0, 1 or 2, got {self.verbose!r}")
        if self.share is not None and self.share not in SHARES:
            raise ConfigError(f"run.share: expected one of {', '.join(map(repr, SHARES))}, "
                              f"got {self.share!r}",
                              hint='"group" lets your project group read the run directory')


def _is_search_space(value: Any) -> bool:
    """A search-space entry (``tune.grid_search([...])``, ``tune.choice([...])``…)."""
    if isinstance(value, dict) and len(value) == 1 and "grid_search" in value:
        return True
    from ..search_space import Domain

    return isinstance(value, Domain)


def _check_declared_ints(obj: Any, section: str, *, but: Sequence[str] = ()) -> None:
    """Each integer key of ``obj``'s class against the minimum its declaration gives
    (``toml(..., minimum=)``): one rule for a job file and the Python API alike. A key
    whose default is None may be None."""
    defaults = {f.name: f.default for f in fields(obj)}
    for key, decl in toml_keys(type(obj)).items():
        if decl.kind != "int" or decl.minimum is None or decl.own_check or key in but:
            continue
        value = getattr(obj, key)
        if value is None and defaults.get(key) is None:
            continue
        _check_int(f"{section}.{key}", value, minimum=decl.minimum)


def _check_int(key: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key}: expected an integer ≥ {minimum}, got {value}")


class DataConfig:
    """Which of the trainer's ``datasets`` are split over the ranks (Ray Train's
    ``ray.train.DataConfig``): ``datasets_to_split="all"`` (the default: every rank reads
    its own part of every dataset) or a list of names; the datasets not listed are given
    whole to every rank (e.g. a validation set each rank evaluates in full). Pass it as
    the trainer's ``dataset_config=``, or in a job file::

        [data]
        datasets_to_split = ["train"]

    A name that is not one of the trainer's datasets is an error (Ray ignores it: a typo
    would give every rank the whole training set).

    >>> DataConfig(datasets_to_split=["train"]).splits("val")
    False
    """

    #: The ``[data]`` section's keys (the arguments of ``__init__``).
    TOML_KEYS = {"datasets_to_split": TomlKey(
        "split", '"all", or the names of the [datasets] split over the ranks (the others '
        "are read whole by every rank).")}

    def __init__(self, datasets_to_split: Union[str, List[str]] = "all"):
        if isinstance(datasets_to_split, tuple):
            datasets_to_split = list(datasets_to_split)
        if not (datasets_to_split == "all" or (
                isinstance(datasets_to_split, list)
                and all(isinstance(n, str) and n for n in datasets_to_split))):
            raise ConfigError(
                "dataset_config.datasets_to_split: expected \"all\" or a list of dataset "
                f"names, got {datasets_to_split!r}",
                hint='e.g. DataConfig(datasets_to_split=["train"]): "train" is split over '
                     "the ranks, the other datasets are given whole to every rank")
        self.datasets_to_split: Union[str, List[str]] = datasets_to_split

    def splits(self, name: str) -> bool:
        """Whether dataset ``name`` is split over the ranks (else every rank reads it whole)."""
        return self.datasets_to_split == "all" or name in self.datasets_to_split

    def check_names(self, names: List[str], key: str = "dataset_config.datasets_to_split",
                    file: Optional[str] = None) -> None:
        """A ConfigError naming ``key`` for a listed name that is not among ``names``."""
        if self.datasets_to_split == "all":
            return
        for name in self.datasets_to_split:
            if name not in names:
                have = ", ".join(repr(n) for n in names) or "none"
                raise ConfigError(f"{key}: no dataset named {name!r} (this run has {have})",
                                  file=file, hint="list names given in datasets= (or the "
                                  "job file's [datasets]), or \"all\"")

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DataConfig) and \
            self.datasets_to_split == other.datasets_to_split

    def __repr__(self) -> str:
        return f"DataConfig(datasets_to_split={self.datasets_to_split!r})"


def check_stop(stop: Any) -> Any:
    """``RunConfig(stop=...)``: a dict {result key: threshold} or a callable
    ``(trial_id, result) -> bool`` (a Ray ``Stopper`` object is one)."""
    if stop is None or callable(stop):
        return stop
    if isinstance(stop, dict):
        for k, v in stop.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"run.stop: expected {{metric name: number}}, got "
                                  f"{k!r}: {v!r}",
                                  hint='e.g. RunConfig(stop={"training_iteration": 10, '
                                       '"loss": 0.01})')
        return dict(stop)
    raise ConfigError(f"run.stop: expected a dict of thresholds or a function "
                      f"(trial_id, result) -> bool, got {type(stop).__name__}",
                      hint='e.g. RunConfig(stop={"training_iteration": 10})')
