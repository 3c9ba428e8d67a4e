"""The ``[scheduler]`` section: :class:`SchedulerConfig` (what every batch system shares:
the kind, account, walltime, launcher…) and :class:`SetupConfig`. Each scheduler adds its
own options in a subclass that lives in its module and that its class names as
``config_class`` (Slurm's ``partition``/``qos``/``constraint`` in
:class:`hpctrain.schedulers.slurm.SlurmConfig`, the PBS ``queue`` in
:class:`hpctrain.schedulers.pbs.PbsConfig`…): the job file's ``[scheduler]`` keys are the
shared ones and the chosen scheduler's (docs/adding-a-scheduler.md).
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Type

from ..errors import ConfigError
from ..common.registry import (LAUNCHERS, SCHEDULERS, default_launcher, describe,
                                       scheduler_class)
from ..units import UnitError, parse_walltime
from .keys import TomlKey, toml, toml_keys

GPU_BINDINGS = ("none", "local_rank", "local_rank_reverse")
#: Commands that start a container or a job step: as ``scheduler.python`` they would put
#: the batch step itself (which runs srun/mpiexec) inside, so they are refused with a HINT
#: naming ``[container]``, which runs each rank in the container instead.
CONTAINER_COMMANDS = ("apptainer", "singularity", "podman", "podman-hpc", "shifter",
                      "enroot", "ch-run", "docker", "srun", "mpiexec", "mpirun")


def python_argv(value: str, key: str = "scheduler.python") -> List[str]:
    """``scheduler.python`` as the words of a command, split as the shell would
    (``"/opt/my env/bin/python" -X dev`` is two words and a flag, never one quoted word).
    ConfigError for a value the shell cannot split, an empty one, or one that starts a
    container (its HINT shows the ``[container]`` that does it).

    >>> python_argv('"/opt/my env/bin/python3" -X dev')
    ['/opt/my env/bin/python3', '-X', 'dev']
    >>> python_argv("apptainer exec --nv img.sif python3")
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: scheduler.python: expected the Python interpreter of the batch step, got 'apptainer exec --nv img.sif python3', which runs apptainer: the batch step, which starts the ranks with srun or mpiexec, would run inside it
    HINT: run each rank in the container with a [container] section: runtime = "apptainer", image = "img.sif", gpu = "--nv", python = "python3"; scheduler.python stays the host's interpreter
    """
    try:
        words = shlex.split(value)
    except ValueError as e:
        raise ConfigError(f"{key}: expected an interpreter and its arguments as the shell "
                          f"would split them, got {value!r}, which the shell cannot split "
                          f"({e})", hint='e.g. python = "/opt/venv/bin/python3" or '
                                         '"\"/opt/my env/bin/python3\" -X dev"') from None
    if not words:
        raise ConfigError(f"{key}: expected the Python interpreter of the batch step, got "
                          f"{value!r}", hint='e.g. python = "/opt/venv/bin/python3"')
    runs = [w for w in words if os.path.basename(w) in CONTAINER_COMMANDS]
    if runs:
        raise ConfigError(f"{key}: expected the Python interpreter of the batch step, got "
                          f"{value!r}, which runs {os.path.basename(runs[0])}: the batch "
                          "step, which starts the ranks with srun or mpiexec, would run "
                          "inside it", hint=_container_hint(words))
    return words


def _container_hint(words: List[str]) -> str:
    """The ``[container]`` section that does what a ``scheduler.python`` of a container
    command meant (for an ``apptainer exec [options] IMAGE python`` shape; the general
    words otherwise)."""
    runtime = os.path.basename(words[0])
    names = {"apptainer": "apptainer", "singularity": "singularity",
             "podman-hpc": "podman-hpc", "shifter": "shifter", "ch-run": "charliecloud"}
    fixed = "; scheduler.python stays the host's interpreter"
    if runtime in ("apptainer", "singularity") and len(words) >= 4 and words[1] == "exec":
        options, image, python = words[2:-2], words[-2], words[-1]
        gpu = [o for o in options if o in ("--nv", "--rocm")]
        return (f'run each rank in the container with a [container] section: runtime = '
                f'"{runtime}", image = "{image}"'
                + (f', gpu = "{" ".join(gpu)}"' if gpu else "")
                + f', python = "{python}"' + fixed)
    return ("run each rank in the container with a [container] section (runtime = "
            f'"{names.get(runtime, "apptainer")}", image = "...", binds, gpu, args)' + fixed)
# LAUNCHERS, the ``scheduler.launcher`` values, is the launcher registry's live view of
# its names (hpctrain.common.registry.register_launcher).


@dataclass
class SchedulerConfig:
    """Where and how the job runs: the batch system, the allocation request and the
    launcher inside it. ``kind="local"`` (the default) runs on this machine.

    ``time`` is a walltime string (``"02:00:00"``, ``"1-12:00:00"``, ``"90m"``);
    ``directives`` is a map of extra scheduler options keyed by option name (Slurm:
    ``{"mail-type": "END"}`` → ``#SBATCH --mail-type=END``; PBS: ``{"filesystems":
    "home:eagle"}`` → ``#PBS -l filesystems=home:eagle``). An empty string removes a
    directive set by an earlier layer (site config or hpctrain's own).

    These are the keys every scheduler shares. A scheduler's own options (Slurm's
    ``partition``, ``qos``, ``constraint``, ``reservation``; PBS's and LSF's ``queue``) are
    fields of its subclass (:class:`~hpctrain.SlurmConfig`, :class:`~hpctrain.PbsConfig`,
    :class:`~hpctrain.LsfConfig`), named by its scheduler class's ``config_class``:
    ``SchedulerConfig(kind="slurm", partition="gpu")`` is a ``SlurmConfig``, and a key of
    another scheduler (``queue`` under Slurm) is a ConfigError naming the scheduler that
    has it.
    """

    #: The option naming where the job waits (Slurm's ``partition``, PBS's ``queue``): the
    #: site's ``[limits.partitions.<name>]`` apply to its value. None: the scheduler has none.
    queue_option: ClassVar[Optional[str]] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "SchedulerConfig":
        kind = args[0] if args else kwargs.get("kind", getattr(cls, "KIND", "local"))
        if cls is SchedulerConfig and kind == "local" and len(args) <= 1 \
                and set(kwargs) <= {"kind"}:
            # the default, made at import time: no registry lookup (that would import
            # the schedulers and read the installed plugins at `import hpctrain`)
            return super().__new__(cls)
        if isinstance(kind, str) and kind in SCHEDULERS:
            target = scheduler_config_class(kind)
            if cls is not SchedulerConfig and target is not cls:
                raise ConfigError(f"scheduler.kind: {cls.__name__} is the config of "
                                  f"{scheduler_title(cls.KIND)}, got kind={kind!r}",
                                  hint=f"use {target.__name__}(...) for {kind!r}")
            check_scheduler_keys(kind, kwargs)
            if issubclass(target, cls):
                cls = target
        return super().__new__(cls)

    kind: str = field(default="local", metadata=toml(
        "str", "The batch system: local runs on this machine.", choices=SCHEDULERS))
    account: Optional[str] = field(default=None, metadata=toml(
        "str", "The account (project) the job is charged to."))
    time: Optional[str] = field(default=None, metadata=toml(
        "walltime", 'The walltime, e.g. "02:00:00", "1-12:00:00" or "90m".'))
    after: Optional[str] = field(default=None, metadata=toml(
        "str", "A job id this job starts after (once it ended)."))
    launcher: Optional[str] = field(default=None, metadata=toml(
        "str", "What starts the ranks inside the allocation (default: the scheduler's: srun "
        "under Slurm, mpiexec under PBS).", choices=LAUNCHERS))
    launcher_args: List[str] = field(default_factory=list, metadata=toml(
        "strlist", "Extra arguments for the launcher."))
    gpu_binding: str = field(default="none", metadata=toml(
        "str", "Bind each rank to GPUs by its local rank.", choices=GPU_BINDINGS))
    gpu_binding_var: str = field(default="CUDA_VISIBLE_DEVICES", metadata=toml(
        "str", "The variable gpu_binding sets (ROCR_VISIBLE_DEVICES on AMD GPUs).",
        schema={"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}))
    python: Optional[str] = field(default=None, metadata=toml(
        "str", "The Python interpreter of the batch step, with its arguments as the shell "
        "splits them (default: the one that submits); a container goes in [container]."))
    directives: Dict[str, Any] = field(default_factory=dict, metadata=toml(
        "directives", 'Extra scheduler options: {"mail-type" = "END"} (Slurm), '
        '{filesystems = "home:eagle"} (PBS); "" removes one.'))

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULERS:
            raise ConfigError(f"scheduler.kind: expected {describe()}, got {self.kind!r}")
        if self.time is not None:

            try:
                parse_walltime(self.time)
            except UnitError as e:
                raise ConfigError(f"scheduler.time: {e}", hint=e.hint) from None
        if self.launcher is not None and self.launcher not in LAUNCHERS:
            raise ConfigError(f"scheduler.launcher: expected one of {', '.join(LAUNCHERS)}, "
                              f"got {self.launcher!r}")
        if self.gpu_binding not in GPU_BINDINGS:
            raise ConfigError(f"scheduler.gpu_binding: expected one of "
                              f"{', '.join(GPU_BINDINGS)}, got {self.gpu_binding!r}")
        self.launcher_args = list(self.launcher_args or [])
        self.directives = dict(self.directives or {})
        if self.python is not None:
            python_argv(self.python)

    @property
    def python_words(self) -> Optional[List[str]]:
        """``python`` split as the shell would (:func:`python_argv`), None when not set."""
        return None if self.python is None else python_argv(self.python)

    @property
    def walltime_s(self) -> Optional[int]:

        return None if self.time is None else parse_walltime(self.time)

    @property
    def launcher_name(self) -> str:
        """The launcher inside the allocation: as set, else the scheduler's default
        (srun under Slurm, mpiexec under PBS), the local spawner otherwise."""
        return self.launcher or default_launcher(self.kind)

    @property
    def queue_name(self) -> Optional[str]:
        """Where the job waits: the value of the scheduler's :attr:`queue_option`
        (Slurm's partition, PBS's queue), None when not set or the scheduler has none."""
        return getattr(self, self.queue_option) if self.queue_option else None

    def selectors(self) -> Dict[str, Optional[str]]:
        """What picks the site's per-partition/QOS/constraint limits
        (:meth:`hpctrain.sites.Limits.effective`); a scheduler with QOS or node features
        adds them."""
        return {"partition": self.queue_name, "qos": None, "constraint": None}



@dataclass
class SetupConfig:
    """Shell set-up before training in the batch job: ``module load`` each of
    ``modules`` in order, then run ``commands`` (e.g. ``source ~/venv/bin/activate``)."""

    modules: List[str] = field(default_factory=list, metadata=toml(
        "strlist", "Environment modules to load, in order (module load ...)."))
    commands: List[str] = field(default_factory=list, metadata=toml(
        "strlist", "Shell lines run before training, one line each (e.g. source "
        "~/venv/bin/activate)."))



def kind_field(kind: str) -> Any:
    """The ``kind`` field of a scheduler's config subclass: the same key, ``kind`` its
    default (``SlurmConfig(time="1h")`` is a Slurm job)."""
    return field(default=kind, metadata=SchedulerConfig.__dataclass_fields__["kind"].metadata)


def scheduler_config_class(kind: str) -> Type[SchedulerConfig]:
    """The config class of scheduler ``kind``: its class's ``config_class`` (the shared
    :class:`SchedulerConfig` for a scheduler with no options of its own)."""
    return getattr(scheduler_class(kind), "config_class", SchedulerConfig)


def scheduler_title(kind: str) -> str:
    """How people write the batch system's name (``Slurm``, ``PBS``), for messages."""
    return getattr(scheduler_class(kind), "title", kind)


def _own_keys(kind: str) -> Dict[str, TomlKey]:
    return toml_keys(scheduler_config_class(kind))


def scheduler_keys() -> Dict[str, TomlKey]:
    """Every key the ``[scheduler]`` section may hold: the shared ones, then each
    registered scheduler's own options (in registration order; the first declaration of a
    name that several schedulers have, PBS's and LSF's ``queue``, documents it). Which
    of them a job may give depends on its ``kind`` (:func:`check_scheduler_keys`)."""
    keys = dict(toml_keys(SchedulerConfig))
    owners: Dict[str, List[str]] = {}
    for kind in SCHEDULERS:
        for name, key in _own_keys(kind).items():
            if name not in toml_keys(SchedulerConfig):
                owners.setdefault(name, []).append(scheduler_title(kind))
                keys.setdefault(name, key)
    for name, titles in owners.items():
        key = keys[name]
        keys[name] = TomlKey(key.kind, f"{key.doc} ({' and '.join(titles)} only.)".strip(),
                             key.choices, key.minimum, key.own_check, key.schema, key.aka)
    return keys


def scheduler_options(kind: str) -> Dict[str, TomlKey]:
    """Scheduler ``kind``'s own options: its config's keys that not every scheduler has."""
    shared = toml_keys(SchedulerConfig)
    return {name: key for name, key in _own_keys(kind).items() if name not in shared}


def resolved_scheduler_table(table: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``[scheduler]`` table of a spec that hpctrain resolved and wrote itself
    (``spec.toml``, the spec a job script carries), as this version reads it. Versions
    before each scheduler declared its own options took ``partition`` and ``queue`` as one
    key under every scheduler and kept ``qos``/``constraint`` under any: such a key is read
    under the name the run's scheduler gives it (a PBS run's ``partition`` is its
    ``queue``), and another scheduler's option, which its job never used, is left out, so
    that a run started before the upgrade continues and requeues. Never for a job file,
    whose keys are checked as written (:func:`check_scheduler_keys`)."""
    kind = table.get("kind", "local")
    if not isinstance(kind, str) or kind not in SCHEDULERS:
        return dict(table)
    own = _own_keys(kind)
    out: Dict[str, Any] = {}
    for name, value in table.items():
        if name in own:
            out[name] = value
            continue
        same = [mine for mine, key in own.items() if name in key.aka]
        if same and same[0] not in table:
            out[same[0]] = value
    return out


def check_scheduler_keys(kind: str, keys: Mapping[str, Any]) -> None:
    """ConfigError for a key of ``keys`` that scheduler ``kind`` does not have, naming the
    schedulers that do, and what ``kind`` calls it (a ``queue`` given to Slurm:
    "Slurm calls it partition")."""
    cls = scheduler_config_class(kind)
    own = _own_keys(kind)
    allowed = set(own) | {f for f in getattr(cls, "__dataclass_fields__", {})}
    for name in keys:
        if name in allowed:
            continue
        title = scheduler_title(kind)
        homes = [k for k in SCHEDULERS if name in scheduler_options(k)]
        same = [mine for mine, key in own.items() if name in key.aka]
        if same:
            hint = f"{title} calls it {same[0]}: {same[0]} = ..."
        elif homes:
            hint = (f"{title}'s own keys: {', '.join(scheduler_options(kind)) or 'none'}; "
                    f"or, for a {' or '.join(scheduler_title(k) for k in homes)} job, set "
                    f"scheduler.kind = {describe(tuple(homes))}")
        else:
            hint = "valid keys: " + ", ".join(own)
        if homes:
            raise ConfigError(f"scheduler.{name}: a key of "
                              f"{' and '.join(scheduler_title(k) for k in homes)}, not of "
                              f"{title} (scheduler.kind = \"{kind}\")", hint=hint)
        raise ConfigError(f"scheduler.{name}: unknown key in [scheduler]", hint=hint)
