"""MPI launcher: one ``mpiexec``/``mpirun`` command starts every rank of an attempt.

Inside a Slurm or PBS allocation the site's MPI launcher starts the ranks on every
node; this side sees only that one process (a :class:`~.step.StepWorkerGroup`, exit
recorded as rank -1). Each rank finds its place from the variables the launcher sets
(:mod:`hpctrain.cluster_env`: ``OMPI_COMM_WORLD_*`` for Open MPI, ``PMI_RANK`` and
``MPI_LOCALRANKID`` for MPICH Hydra / Intel MPI, ``PALS_*`` for Cray PALS) and writes
its output to ``logs/<job>/rank-R.out`` itself.

Three command-line dialects (*flavors*), built by the pure :func:`mpiexec_argv`:

=========== ============================================================ ===============
flavor      command                                                      environment
=========== ============================================================ ===============
``openmpi`` ``mpirun -np N [--hostfile F] [--map-by ppr:W:node]``         ``-x NAME`` per
            ``[-x NAME ...] [extra] cmd``                                 exported name
``mpich``   ``mpiexec -n N [-ppn W] [-f F] [extra] cmd`` (MPICH Hydra,    all passed by
            also Intel MPI and MVAPICH2)                                  default
``pals``    ``mpiexec -n N [--ppn W] [--hostfile F] [extra] cmd`` (HPE     all passed by
            Cray PALS, e.g. ALCF Polaris/Aurora)                          default
=========== ============================================================ ===============

* Open MPI does not forward the environment to ranks on *other* nodes unless named
  with ``-x``; the names exported are those starting with one of ``export_prefixes``
  (``HPCTRAIN_``, ``PYTHON``, ``MASTER_``, ``NCCL_``, …), sorted. Running as root needs
  ``OMPI_ALLOW_RUN_AS_ROOT=1`` and ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` in the
  environment (mpirun reads them itself); no flag is added for it. Open MPI 4 binds
  each rank to one core by default when it starts two ranks or fewer: pass
  ``extra_args=("--bind-to", "none")`` when a rank needs more cores (data loaders).
* The host file: ``hostfile`` when given, else ``$PBS_NODEFILE`` when set. Debian's
  Open MPI has no PBS ``tm`` support, so under PBS it only sees the allocation through
  ``--hostfile "$PBS_NODEFILE"`` (shared/notes/pbs-facts.md); Hydra reads it with
  ``-f``; PALS reads the PBS allocation itself, and passing the same file is harmless.
  Under Slurm (no ``PBS_NODEFILE``) Open MPI and Hydra take the hosts from Slurm.
* ``workers_per_node``: ranks per node. Omitted when None: the launcher then fills
  the slots of the host file (Open MPI, Hydra) or uses its own default (PALS; set it
  there, e.g. to the GPUs per node).
* ``extra_args`` go after hpctrain's options and before the command, verbatim, e.g.
  ``("--depth=8", "--cpu-bind", "depth")`` on Polaris.

``flavor="auto"`` runs ``<executable> --version`` once per launcher object and reads
the banner (:func:`flavor_from_version_text`).

The environment handed to the launcher loses the torchrun variables (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, and Ray's
``NODE_RANK``): they would win
over the MPI launcher's own variables in every rank (``cluster_env.detect_launcher``),
and ranks on the launch node inherit mpirun's environment.
"""
from __future__ import annotations

import re
import subprocess
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..common.registry import scheduler_class, scheduler_names
from ..errors import ConfigError
from .base import Launcher, LineSink
from .step import ENV_RANK_LOG_DIR, StepWorkerGroup

__all__ = ["MpiexecLauncher", "mpiexec_argv", "detect_flavor", "flavor_from_version_text",
           "flavor_from_args",
           "FLAVORS", "DEFAULT_EXPORT_PREFIXES"]

FLAVORS = ("openmpi", "mpich", "pals")

DEFAULT_EXPORT_PREFIXES = ("HPCTRAIN_", "PYTHON", "MASTER_", "OMP_", "NCCL_", "CUDA_",
                           "ROCR_", "TORCH_", "GLOO_")

# Set by torchrun-style launchers; they outrank the MPI launcher's own variables.
_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "NODE_RANK")

_HINT = ('check the scheduler.launcher setting ("mpiexec" or "mpirun" runs that '
         'executable, "srun" uses Slurm instead) and that the job loads the MPI module '
         'it belongs to; MpiexecLauncher(flavor="openmpi"|"mpich"|"pals") skips the '
         'detection')


# ------------------------------------------------------------------ argv (pure)

def mpiexec_argv(flavor: str, *, executable: str, num_workers: int,
                 workers_per_node: Optional[int], hostfile: Optional[str],
                 extra_args: Sequence[str], command: Sequence[str],
                 env: Mapping[str, str],
                 export_prefixes: Sequence[str] = DEFAULT_EXPORT_PREFIXES) -> List[str]:
    """The launcher's argv for ``num_workers`` ranks of ``command``. No shell: every
    element is one argument. ``env`` is read only to choose the ``-x`` names (Open MPI).

    >>> cmd = ["python", "-m", "hpctrain.worker", "/runs/r1"]
    >>> env = {"HPCTRAIN_JOB_ID": "42", "PYTHONPATH": "/src", "HOME": "/root",
    ...        "NCCL_DEBUG": "WARN"}
    >>> mpiexec_argv("openmpi", executable="mpirun", num_workers=8, workers_per_node=4,
    ...              hostfile="/var/spool/pbs/aux/7.pbs", extra_args=["--bind-to", "none"],
    ...              command=cmd, env=env)  # doctest: +NORMALIZE_WHITESPACE
    ['mpirun', '-np', '8', '--hostfile', '/var/spool/pbs/aux/7.pbs',
     '--map-by', 'ppr:4:node', '-x', 'HPCTRAIN_JOB_ID', '-x', 'NCCL_DEBUG',
     '-x', 'PYTHONPATH', '--bind-to', 'none',
     'python', '-m', 'hpctrain.worker', '/runs/r1']
    >>> mpiexec_argv("mpich", executable="mpiexec", num_workers=8, workers_per_node=4,
    ...              hostfile="/var/spool/pbs/aux/7.pbs", extra_args=[],
    ...              command=cmd, env=env)  # doctest: +NORMALIZE_WHITESPACE
    ['mpiexec', '-n', '8', '-ppn', '4', '-f', '/var/spool/pbs/aux/7.pbs',
     'python', '-m', 'hpctrain.worker', '/runs/r1']
    >>> mpiexec_argv("pals", executable="mpiexec", num_workers=8, workers_per_node=4,
    ...              hostfile=None, extra_args=["--depth=8", "--cpu-bind", "depth"],
    ...              command=cmd, env=env)  # doctest: +NORMALIZE_WHITESPACE
    ['mpiexec', '-n', '8', '--ppn', '4', '--depth=8', '--cpu-bind', 'depth',
     'python', '-m', 'hpctrain.worker', '/runs/r1']
    """
    if flavor not in FLAVORS:
        raise ConfigError(f"mpiexec flavor: expected one of {', '.join(FLAVORS)}, "
                          f"got {flavor!r}", hint=_HINT)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ConfigError(f"num_workers: expected an integer >= 1, got {num_workers!r}")
    if workers_per_node is not None and (
            isinstance(workers_per_node, bool) or not isinstance(workers_per_node, int)
            or workers_per_node < 1):
        raise ConfigError(f"workers_per_node: expected an integer >= 1 or None, "
                          f"got {workers_per_node!r}")
    if not command:
        raise ConfigError("mpiexec command: expected the worker command, got nothing")
    if isinstance(extra_args, str):  # a lone string would be split into characters
        raise ConfigError(f"extra_args: expected a list of arguments, got the string "
                          f"{extra_args!r}", hint="write extra_args=[\"--bind-to\", \"none\"]")
    argv = [executable]
    if flavor == "openmpi":
        argv += ["-np", str(num_workers)]
        if hostfile:
            argv += ["--hostfile", hostfile]
        if workers_per_node is not None:
            argv += ["--map-by", f"ppr:{workers_per_node}:node"]
        for name in exported_names(env, export_prefixes):
            argv += ["-x", name]
    elif flavor == "mpich":
        argv += ["-n", str(num_workers)]
        if workers_per_node is not None:
            argv += ["-ppn", str(workers_per_node)]
        if hostfile:
            argv += ["-f", hostfile]
    else:  # pals
        argv += ["-n", str(num_workers)]
        if workers_per_node is not None:
            argv += ["--ppn", str(workers_per_node)]
        if hostfile:
            argv += ["--hostfile", hostfile]
    argv += [str(a) for a in extra_args]
    argv += [str(c) for c in command]
    return argv


def exported_names(env: Mapping[str, str], prefixes: Sequence[str]) -> List[str]:
    """The names in ``env`` that start with one of ``prefixes``, sorted.

    >>> exported_names({"PYTHONPATH": "/a", "HOME": "/r", "HPCTRAIN_X": "1", "OMPI_Y": "2"},
    ...                ("HPCTRAIN_", "PYTHON", "OMP_"))
    ['HPCTRAIN_X', 'PYTHONPATH']
    """
    return sorted(k for k in env if any(k.startswith(p) for p in prefixes))


def default_hostfile(hostfile: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """``hostfile`` if given, else the scheduler's host file (``$PBS_NODEFILE``) if set,
    else None.

    >>> default_hostfile(None, {"PBS_NODEFILE": "/var/spool/pbs/aux/7.pbs"})
    '/var/spool/pbs/aux/7.pbs'
    >>> default_hostfile("hosts.txt", {"PBS_NODEFILE": "/x"}), default_hostfile(None, {})
    ('hosts.txt', None)
    """
    if hostfile:
        return hostfile

    for name in scheduler_names():  # the host file a scheduler names (PBS_NODEFILE)
        var = scheduler_class(name).hostfile_var
        if var and (env.get(var) or "").strip():
            return env[var].strip()
    return None


# -------------------------------------------------------------- flavor detection

# Ordered: the first rule whose pattern occurs in the banner wins. Open MPI names
# itself ("mpirun (Open MPI) 4.1.4", "mpiexec (OpenRTE) 4.1.4"); PALS prints
# "mpiexec version 1.8.0 revision ..." (and its --help "Parallel Application Launch
# Service"), checked before MPICH in case it names the cray-mpich it ships with; MPICH's
# mpiexec prints "HYDRA build details:", Intel MPI "Intel(R) MPI Library ..." with no
# Hydra in it; a bare "Cray" is the last resort for PALS.
_RULES = (
    ("openmpi", re.compile(r"Open MPI|OpenRTE")),
    ("pals", re.compile(r"Parallel Application Launch Service|\bPALS\b"
                        r"|^\s*mpiexec version \d", re.MULTILINE)),
    ("mpich", re.compile(r"Intel\(R\) MPI Library|HYDRA|MPICH|MVAPICH")),
    ("pals", re.compile(r"\bCray\b")),
)


def flavor_from_version_text(text: str) -> Optional[str]:
    """The flavor named by a ``--version`` banner, or None when unrecognised.

    >>> flavor_from_version_text("mpirun (Open MPI) 4.1.4\\n\\nReport bugs to ...")
    'openmpi'
    >>> flavor_from_version_text("HYDRA build details:\\n    Version:  4.0\\n")
    'mpich'
    >>> flavor_from_version_text("mpiexec version 1.8.0 revision 2c1b4e5")
    'pals'
    >>> flavor_from_version_text("srun 23.02.7") is None
    True
    """
    for flavor, pattern in _RULES:
        if pattern.search(text or ""):
            return flavor
    return None


# Options only one dialect has (PALS's --depth/--cpu-bind, Open MPI's --bind-to/--map-by,
# Hydra's single-dash -bind-to/-genv…): a site's launcher_args written for its own MPI.
_ARG_FLAVORS = {
    "pals": ("--depth", "--cpu-bind", "--ppn", "--line-buffer", "--no-transfer"),
    "openmpi": ("--bind-to", "--map-by", "--rank-by", "--mca", "-x", "--oversubscribe",
                "--report-bindings"),
    "mpich": ("-bind-to", "-map-by", "-genv", "-genvall", "-iface", "-ppn"),
}


def flavor_from_args(args: Sequence[str]) -> Optional[str]:
    """The dialect that ``args`` (a site's or job's ``launcher_args``) are written in,
    when their options belong to one only; None when they name none or several.

    >>> flavor_from_args(["--depth=8", "--cpu-bind", "depth"])
    'pals'
    >>> flavor_from_args(["--bind-to", "none"])
    'openmpi'
    >>> flavor_from_args(["-genv", "FOO", "1"])
    'mpich'
    >>> flavor_from_args([]) is None, flavor_from_args(["--bind-to", "x", "--depth=2"]) is None
    (True, True)
    """
    names = {str(a).split("=", 1)[0] for a in args if str(a).startswith("-")}
    found = [f for f, options in _ARG_FLAVORS.items() if names & set(options)]
    return found[0] if len(found) == 1 else None


def detect_flavor(executable: str = "mpiexec",
                  run: Callable[..., "subprocess.CompletedProcess"] = subprocess.run) -> str:
    """Ask ``<executable> --version`` which MPI it belongs to. Raises ConfigError when
    the executable is missing or its banner is not one of Open MPI, MPICH Hydra /
    Intel MPI, or Cray PALS."""
    try:
        proc = run([executable, "--version"], stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                   timeout=60)
    except FileNotFoundError:
        raise ConfigError(f"MPI launcher {executable!r} was not found on PATH; expected "
                          f"an mpiexec/mpirun to start the ranks",
                          hint=_HINT) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"could not run {executable!r} --version ({exc}); expected "
                          f"its version banner", hint=_HINT) from None
    text = proc.stdout or ""
    flavor = flavor_from_version_text(text)
    if flavor is None:
        first = text.strip().splitlines()[0] if text.strip() else "(no output)"
        raise ConfigError(f"{executable} --version printed {first!r}, which names no "
                          f"known MPI; expected Open MPI, MPICH (Hydra), Intel MPI or "
                          f"Cray PALS", hint=_HINT)
    return flavor


# ---------------------------------------------------------------------- launcher

class MpiexecLauncher(Launcher):
    """Starts the ranks with one ``mpiexec``/``mpirun`` command (see module docs)."""

    name = "mpiexec"

    @classmethod
    def for_spec(cls, spec, *, name: str, launcher_args: Sequence[str],
                 mpi: bool) -> "MpiexecLauncher":
        """One ``mpiexec`` (or ``mpirun``: ``name``) of the spec's ranks; the dialect is
        read from ``--version`` when it starts."""
        # Open MPI passes only -x variables to ranks on other nodes: also the spec's own
        # [env] and what modules and environments set up
        exports = tuple(DEFAULT_EXPORT_PREFIXES) + tuple(sorted(spec.env)) + (
            "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX")
        return cls(flavor="auto", executable=name, workers_per_node=spec.scaling.per_node,
                   extra_args=launcher_args, export_prefixes=exports)

    def __init__(self, *, flavor: str = "auto", executable: str = "mpiexec",
                 workers_per_node: Optional[int] = None, hostfile: Optional[str] = None,
                 extra_args: Sequence[str] = (),
                 export_prefixes: Sequence[str] = DEFAULT_EXPORT_PREFIXES):
        if flavor != "auto" and flavor not in FLAVORS:
            raise ConfigError(f"mpiexec flavor: expected \"auto\" or one of "
                              f"{', '.join(FLAVORS)}, got {flavor!r}", hint=_HINT)
        if isinstance(extra_args, str):
            raise ConfigError(f"extra_args: expected a list of arguments, got the string "
                              f"{extra_args!r}",
                              hint="write extra_args=[\"--bind-to\", \"none\"]")
        self.flavor = flavor
        self.executable = executable
        self.workers_per_node = workers_per_node
        self.hostfile = hostfile
        self.extra_args = tuple(extra_args)
        self.export_prefixes = tuple(export_prefixes)
        self._detected: Optional[str] = None

    def resolved_flavor(self) -> str:
        if self.flavor != "auto":
            return self.flavor
        if self._detected is None:
            self._detected = detect_flavor(self.executable)
        return self._detected

    def argv(self, *, command: Sequence[str], env: Mapping[str, str],
             num_workers: int) -> List[str]:
        return mpiexec_argv(self.resolved_flavor(), executable=self.executable,
                            num_workers=num_workers, workers_per_node=self.workers_per_node,
                            hostfile=default_hostfile(self.hostfile, env),
                            extra_args=self.extra_args, command=command, env=env,
                            export_prefixes=self.export_prefixes)

    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line: Optional[LineSink] = None) -> StepWorkerGroup:
        # on_line is not fed: the ranks write their own logs (logs/<job>/rank-R.out).
        wenv = {k: v for k, v in env.items() if k not in _TORCHRUN_VARS}
        # what StepWorkerGroup adds, set here already so that Open MPI exports it too
        wenv[ENV_RANK_LOG_DIR] = log_dir
        wenv.setdefault("PYTHONUNBUFFERED", "1")
        argv = self.argv(command=command, env=wenv, num_workers=num_workers)
        return StepWorkerGroup(argv, wenv, log_dir)
