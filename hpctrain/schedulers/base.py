"""The scheduler interface and the batch request.

A :class:`BatchRequest` is one run's resolved spec plus where its run directory is;
``request.materialize()`` gives the exact batch script (``hpctrain render`` prints it,
``hpctrain submit`` writes it to ``<run>/job.sh`` and submits those bytes). Each
scheduler turns the request into its directive lines; the rest of the script comes from
``templates/<scheduler>.sh.j2`` (:mod:`hpctrain.common.shipped`). Every value that reaches the script is checked
or quoted here, never in a template: none may hold CR, LF or NUL
(:func:`check_script_context`), and a comment that shows a value prefixes each of its
lines with ``#`` (the template filter :func:`comment`).
"""
from __future__ import annotations

import enum
import functools
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..cluster_env import check_below, env_value, first_set, required_int
from ..common.log import get_logger
from ..common.shipped import shipped_dir
from ..config import SchedulerConfig
from ..errors import ConfigError
from hpctrain._version import __version__
from ..launchers import launch_line

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

#: Characters allowed in a directive value (``#SBATCH``/``#PBS`` lines are not parsed
#: by a shell, and each scheduler splits them differently): no whitespace, quotes, ``#``,
#: ``;``, ``$`` or backslashes. Enough for partitions, accounts, GRES, constraint
#: expressions (``a100&hbm80g``), mail addresses and paths without spaces.
_SAFE_DIRECTIVE = re.compile(r"[A-Za-z0-9_.,:=+@%/\-\[\]*!&|()^~{}]+")
_SAFE_KEY = re.compile(r"-?[A-Za-z][A-Za-z0-9_-]*(:[A-Za-z][A-Za-z0-9_-]*)?")
_HEREDOC_EOF = "HPCTRAIN_SPEC_EOF"


class JobPhase(str, enum.Enum):
    """hpctrain's closed set of job states. Each scheduler maps its own words to it in a
    table (:attr:`Scheduler.phases`); a preemption and a time limit are apart from a
    failure, so that what decides something never reads a scheduler's word."""

    PENDING = "PENDING"      # queued, held, configuring: no allocation yet
    RUNNING = "RUNNING"      # holds its allocation (also completing, suspended)
    REQUEUED = "REQUEUED"    # waiting to run again
    UNKNOWN = "UNKNOWN"      # the scheduler cannot tell now: not taken as ended
    COMPLETED = "COMPLETED"  # ended, exit code 0
    FAILED = "FAILED"        # ended with an error (a node failure, out of memory too)
    CANCELLED = "CANCELLED"  # cancelled by a user or an administrator
    TIMEOUT = "TIMEOUT"      # ended at its time limit
    PREEMPTED = "PREEMPTED"  # ended to let another job run
    ENDED = "ENDED"          # the scheduler forgot it: the run directory tells how it ended

    @property
    def done(self) -> bool:
        """The job left the queue: nothing more happens to it."""
        return self not in (JobPhase.PENDING, JobPhase.RUNNING, JobPhase.REQUEUED,
                            JobPhase.UNKNOWN)


@dataclass
class JobState:
    """A job as the scheduler sees it: ``state`` is the scheduler's own word (in Slurm's
    terms where the scheduler has none of its own: PENDING, RUNNING, COMPLETED, FAILED,
    CANCELLED, TIMEOUT, …, UNKNOWN, or ENDED once it no longer knows the job), ``phase``
    what it means (:class:`JobPhase`)."""

    job_id: str
    state: str
    phase: JobPhase
    reason: str = ""
    nodes: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.phase, bool):  # a plugin written before phases: (word, done)
            try:
                phase = JobPhase(self.state)
            except ValueError:
                phase = JobPhase.ENDED if self.phase else JobPhase.UNKNOWN
            if phase.done != self.phase:
                phase = JobPhase.ENDED if self.phase else JobPhase.UNKNOWN
            self.phase = phase

    @property
    def done(self) -> bool:
        """True once the job left the queue."""
        return self.phase.done


@dataclass
class BatchRequest:
    """What one batch script asks for and runs."""

    spec: JobSpec                     # hpctrain.spec.JobSpec
    run_path: str
    rerender: str = ""              # the command that re-renders this script
    python: Optional[str] = None    # interpreter in the job (default: this one)
    name: Optional[str] = None      # the job's name (default: the run directory's)

    @property
    def scheduler(self) -> "Scheduler":
        from . import get_scheduler

        return get_scheduler(self.spec.scheduler.kind)

    def materialize(self) -> str:
        """The exact batch script."""
        return self.scheduler.render(self)


class Allocation(NamedTuple):
    """What the environment of a job says about its allocation (:mod:`hpctrain.cluster_env`)."""

    job_id: str
    hosts: Tuple[str, ...] = ()
    hosts_var: Optional[str] = None   # the variable the hosts came from, for errors
    step: str = ""                    # goes into the derived rendezvous port
    restart_count: int = 0


class TaskVariables(NamedTuple):
    """The names under which a scheduler's own launcher (Slurm's ``srun``) tells each task
    its place in the step. Declared once per scheduler, and read by everyone who needs
    them: :meth:`Scheduler.task_ranks` (a rank's place, :mod:`hpctrain.cluster_env`), the
    node zygote (which forks a node's ranks and gives each the names the launcher would
    have, :meth:`Scheduler.forked_task_env`), the Horovod backend (did the launcher set
    up MPI?) and a rank's error record. Where several names carry one value they are in
    order of preference: the first one set is read, and all of them are written."""

    rank: str                         # the task's rank in the step
    local_rank: str                   # its rank on this node
    node_rank: str                    # this node's index in the step
    size: Tuple[str, ...]             # the step's number of tasks
    tasks_per_node: Tuple[str, ...]   # the tasks on each node (the scheduler's own format)
    num_nodes: Tuple[str, ...]        # the step's number of nodes
    step: Tuple[str, ...]             # set only inside a step (a task, not the batch script)
    cpus_per_task: Optional[str] = None
    mpi_type: Optional[str] = None    # the MPI plugin the launcher set up ("none": none)


class ArrayJob(NamedTuple):
    """How one job array runs a sweep's trials (:mod:`hpctrain.tune`'s job arrays)."""

    directives: Dict[str, Any]        # added to the spec's scheduler.directives
    index: str                        # shell expression of the task's array index
    log_file: str                     # the task's log (shell words, $HPCTRAIN_TRIAL_DIR)
    prelude: List[str]                # shell lines run first (e.g. skip unlisted indices)


class Scheduler:
    """One batch system: render, submit, watch, cancel, and what its jobs see.

    Everything hpctrain knows about one batch system is an attribute or method here;
    the rest of the package asks the registry (:mod:`hpctrain.schedulers`)."""

    name = "base"
    #: How people write the batch system's name (in messages: "Slurm calls it partition").
    title = "base"
    #: The ``[scheduler]`` section's dataclass: :class:`~hpctrain.config.SchedulerConfig`
    #: (the keys every scheduler shares), or a subclass with the scheduler's own options,
    #: each a field declared with :func:`hpctrain.config.toml` (docs/adding-a-scheduler.md).
    config_class = SchedulerConfig
    template: Optional[str] = None
    #: A folder searched for ``template`` before hpctrain's ``templates/`` (a plugin's
    #: own; its template can still ``{% include "_body.sh.j2" %}``).
    template_dir: Optional[str] = None
    #: The variable holding the job id inside the job.
    job_id_var = "JOB_ID"
    #: The launcher inside the allocation unless ``scheduler.launcher`` names one.
    default_launcher = "local"
    #: The variable naming the job's host file, handed to ``mpiexec --hostfile`` (None:
    #: the MPI reads the allocation from the scheduler itself).
    hostfile_var: Optional[str] = None
    #: The command that cancels a job (named in hints).
    cancel_command: Optional[str] = None
    #: False when the batch system sends no signal before the walltime ends: the
    #: supervisor then warns by its own timer, from the job's start and walltime.
    sends_warning = True
    #: A run stopped cleanly continues in a new allocation (:meth:`requeue`).
    can_requeue = False
    #: The scheduler's words for a job's state → :class:`JobPhase`; a word not in it is
    #: ``unlisted_phase``.
    phases: Mapping[str, JobPhase] = {}
    unlisted_phase = JobPhase.UNKNOWN
    #: The largest job array (indices 0 … size-1) when the site config sets no limit.
    max_array_size = 1001
    #: Directive keys a sweep sets itself (refused in a sweep's spec).
    array_directive_keys: Tuple[str, ...] = ()
    #: Where the scheduler starts the ranks itself (srun's tasks), the launcher name
    #: :func:`hpctrain.cluster_env.detect_launcher` reports for them is the scheduler's
    #: name and this says which program sets their variables (for error hints).
    task_source: Optional[str] = None

    #: The names under which this scheduler's own launcher tells a task its place (None:
    #: the scheduler starts no ranks itself; a launcher such as mpiexec does).
    task_variables: Optional[TaskVariables] = None
    #: The variables a job of this scheduler sees (shell-style patterns): a container
    #: runtime that does not pass the environment passes these by name.
    env_patterns: Tuple[str, ...] = ()

    @property
    def is_batch(self) -> bool:
        """True for a batch system (a job with a script), False for ``local``."""
        return self.template is not None

    # -- inside the job: what the environment says ---------------------------------------
    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """True when ``env`` is the environment of a job of this scheduler."""
        return False

    @classmethod
    def job_id_from_env(cls, env: Mapping[str, str]) -> Optional[str]:
        """The id by which this job is requeued/cancelled, from inside the job."""
        return (env.get(cls.job_id_var) or "").strip() or None

    @classmethod
    def allocation_from_env(cls, env: Mapping[str, str], *, launcher: str,
                            read_file: Callable[[str], str]) -> Allocation:
        """Job id, hosts (in rank order), step and restart count of the allocation.
        ``launcher`` is the detected launcher; ``read_file`` reads host files."""
        return Allocation(cls.job_id_from_env(env) or "")

    @classmethod
    def is_task(cls, env: Mapping[str, str]) -> bool:
        """True when this scheduler's own launcher started this process as one rank: its
        :attr:`task_variables` hold a rank *and* a step variable (Slurm's slurmstepd also
        exports ``SLURM_PROCID=0`` to the batch script itself, which is no task)."""
        names = cls.task_variables
        return (names is not None and env_value(env, names.rank) is not None
                and first_set(env, *names.step)[0] is not None)

    @classmethod
    def task_ranks(cls, env: Mapping[str, str]) -> Tuple[int, int, Optional[int], int, int]:
        """(world rank, local rank, node rank, world size, local size) of a task
        :meth:`is_task` recognises, read by the :attr:`task_variables` names."""
        la, names = cls.name, cls.task_variables
        size_name, size = required_int(env, *names.size, what="the number of tasks (>= 1)",
                                       launcher=la, minimum=1)
        _, rank = required_int(env, names.rank, what="the task rank", launcher=la)
        _, local = required_int(env, names.local_rank, what="the task rank on this node",
                                launcher=la)
        _, node = required_int(env, names.node_rank, what="the node index in the step",
                               launcher=la)
        tpn_name, tpn = first_set(env, *names.tasks_per_node)
        if tpn_name is None or tpn is None:
            raise ConfigError(f"{' or '.join(names.tasks_per_node)} is not set; expected the "
                              f"tasks on each node, e.g. {cls.tasks_per_node_text(2, 3)!r}",
                              hint=f"{cls.task_source or cls.title} sets it for every task; "
                                   "was the variable removed?")
        try:
            counts = cls.tasks_per_node_counts(tpn)
        except ConfigError as exc:
            raise ConfigError(f"{tpn_name}: {exc.message}", hint=exc.hint) from None
        if node >= len(counts):
            raise ConfigError(f"{names.node_rank}={node} is past the {len(counts)} nodes of "
                              f"{tpn_name}={tpn!r}; expected a node index below {len(counts)}",
                              hint=f"{names.node_rank} and the tasks-per-node string come "
                                   "from different steps; launch the workers with "
                                   f"{cls.task_source or 'the scheduler'} directly")
        local_size = counts[node]
        check_below(names.rank, rank, size_name, size, la)
        check_below(names.local_rank, local, f"{tpn_name}[{node}]", local_size, la)
        return rank, local, node, size, local_size

    @classmethod
    def tasks_per_node_counts(cls, text: str) -> List[int]:
        """The tasks on each node, from :attr:`TaskVariables.tasks_per_node`'s text;
        ConfigError for a text the launcher would not write."""
        raise NotImplementedError(f"{cls.title} starts no tasks itself")

    @classmethod
    def tasks_per_node_text(cls, per_node: int, nodes: int) -> str:
        """``per_node`` tasks on each of ``nodes`` nodes, written as the launcher writes
        it in :attr:`TaskVariables.tasks_per_node`."""
        raise NotImplementedError(f"{cls.title} starts no tasks itself")

    @classmethod
    def forked_task_env(cls, *, node: int, nodes: int, per_node: int,
                        local: int) -> Dict[str, str]:
        """The :attr:`task_variables` the launcher would give task ``local`` on node ``node``
        of a ``nodes`` × ``per_node`` step (the node zygote forks such tasks itself)."""
        names = cls.task_variables
        if names is None:
            raise ConfigError(f"{cls.title} starts no tasks itself, so a node's ranks cannot "
                              "be forked from one task per node",
                              hint="unset HPCTRAIN_FORK_RANKS (each rank starts its own "
                                   "interpreter)")
        total, tpn = str(nodes * per_node), cls.tasks_per_node_text(per_node, nodes)
        out = {names.rank: str(node * per_node + local), names.local_rank: str(local),
               names.node_rank: str(node)}
        out.update({name: total for name in names.size})
        out.update({name: tpn for name in names.tasks_per_node})
        return out

    def job_walltime(self, job_id: str) -> Optional[int]:
        """The walltime the scheduler gave the job (seconds) when the spec sets none."""
        return None

    # -- job arrays (sweeps) --------------------------------------------------------------
    def array_job(self, tasks: Sequence[int], offset: int,
                  max_concurrent: Optional[int]) -> ArrayJob:
        """The directives, index expression, log and prelude of one job array running
        the trials ``offset + t`` for ``t`` in ``tasks``."""
        raise ConfigError(f"scheduler.kind: the {self.name!r} scheduler has no job arrays",
                          hint="a sweep runs as job arrays on a batch scheduler")

    def is_array(self, tasks: Sequence[int]) -> bool:
        """True when :meth:`array_job` gives a job array (not a plain job) for ``tasks``."""
        return True

    def array_task_id(self, array_id: str, task: int) -> str:
        """The job id of task ``task`` of the array ``array_id``."""
        return f"{array_id}_{task}"

    def array_active(self, job_id: str) -> bool:
        """True while any task of the array (or the job) is queued or running."""
        try:
            return not self.state(job_id).done
        except Exception:  # noqa: BLE001 - the scheduler cannot tell
            return True

    # -- rendering -------------------------------------------------------------------
    def directives(self, request: BatchRequest) -> List[str]:
        """The directive lines (without the ``#SBATCH``/``#PBS`` prefix)."""
        raise NotImplementedError

    def render(self, request: BatchRequest, **overrides: Any) -> str:
        """The script; ``overrides`` replace template variables (a sweep's job array runs
        each task's trial: ``run_dir``, ``log_file``, ``prelude``, ``batch_args``)."""
        from . import scheduler_names

        if self.template is None:
            raise ConfigError(f"scheduler.kind: the {self.name!r} scheduler has no batch script",
                              file=request.spec.where("scheduler.kind"),
                              hint="use a batch scheduler (" + ", ".join(
                                  scheduler_names(batch_only=True)) + ") to render or "
                                   "submit a batch job")
        spec = request.spec
        check_run_path(request.run_path, spec)
        warning_seconds(spec)  # refuse an impossible warning before anything else
        text = spec.to_toml()
        if _HEREDOC_EOF in text:
            raise ConfigError(f"the spec contains the text {_HEREDOC_EOF}, which ends the "
                              "spec embedded in the script", file=spec.source)
        variables = dict(
            version=__version__,
            run_name=os.path.basename(request.run_path),
            rerender=" ".join((request.rerender or "(rendered from the Python API)").split()),
            directives=self.directives(request),
            cd=self.cd_line(),
            modules=[shell_word(m, spec, "setup.modules") for m in spec.setup.modules],
            commands=[_command_line(c, spec) for c in spec.setup.commands],
            env=[(name, shell_value(value)) for name, value in sorted(spec.env.items())],
            launcher=spec.scheduler.launcher_name,
            python=shlex.join(_python_words(request, spec)),
            run_dir=shlex.quote(request.run_path),
            log_file=f"{request.run_path}/logs/{self.name}-${{{self.job_id_var}}}.out",
            umask="0027" if spec.run.share == "group" else "0077",
            eof=_HEREDOC_EOF,
            spec_toml=text,
            warning_signal=spec.run.failure_config.warning_signal,
            prelude=[],
            batch_args="",
        )
        variables.update(overrides)

        variables["launch"] = launch_line(spec, python=_python_words(request, spec),
                                          run_dir=variables["run_dir"],
                                          run_path=request.run_path)
        check_script_context(variables, spec, request_python=request.python)
        return render_template(self.template, variables, template_dir=self.template_dir)

    def cd_line(self) -> str:
        """A shell line run first in the job (PBS starts jobs in ``$HOME``)."""
        return ""

    # -- the scheduler's commands -----------------------------------------------------
    #: The command that submits; its absence is a clear error before anything is written.
    submit_command: Optional[str] = None

    def check_available(self) -> None:

        if self.submit_command and shutil.which(self.submit_command) is None:
            raise ConfigError(
                f"scheduler.kind: {self.submit_command!r} is not on PATH, so this machine "
                f"cannot submit {self.name} jobs",
                hint=f"run `hpctrain submit` on a login node of the {self.name} cluster; "
                     "`hpctrain render` prints the script to submit by hand")

    def submit(self, script_path: str) -> str:
        """Submit the script at ``script_path`` unchanged; return the job id."""
        raise NotImplementedError

    def state(self, job_id: str) -> JobState:
        raise NotImplementedError

    @classmethod
    def job_state(cls, job_id: str, word: str, reason: str = "", nodes: str = "") -> JobState:
        """A :class:`JobState` from the scheduler's word for it (its ``phases`` table)."""
        return JobState(job_id, word, cls.phases.get(word, cls.unlisted_phase), reason, nodes)

    def cancel(self, job_id: str) -> None:
        raise NotImplementedError

    # -- continuing in a new allocation (called inside the job) -------------------------
    def requeue(self, job_id: str, script_path: str) -> Optional[str]:
        """Continue the run in a new allocation after a clean stop: requeue ``job_id``
        (returns None; the scheduler may kill this process right away) or submit
        ``script_path`` again to start after it (returns the new job id)."""
        return self.resubmit(script_path, after=job_id)

    def resubmit(self, script_path: str, *, after: str) -> str:
        """Submit ``script_path`` again, to start once job ``after`` has ended."""
        raise NotImplementedError(f"the {self.name!r} scheduler cannot resubmit a job")

    def requeue_excluding(self, job_id: str, script_path: str,
                          exclude: Sequence[str]) -> Optional[str]:
        """:meth:`requeue`, keeping the nodes ``exclude`` out of the new allocation where
        the scheduler can; here it cannot (a warning says so; the nodes stay recorded
        in ``state.json``'s ``bad_nodes``)."""
        if exclude:
            get_logger(self.name).warning(
                f"{self.name}: hpctrain cannot keep node(s) {', '.join(exclude)} out of the "
                "next allocation; they are recorded in state.json's bad_nodes")
        return self.requeue(job_id, script_path)

    def partition_nodes(self) -> Optional[int]:
        """How many nodes the partition or queue of this job has (None: unknown)."""
        return None


def _python_words(request: BatchRequest, spec: JobSpec) -> List[str]:
    """The batch step's interpreter as the words of a command: the request's (a path), else
    ``scheduler.python`` split as the shell would, else this interpreter."""
    from ..spec import check_script_value

    if request.python:
        return [request.python]
    if spec.scheduler.python is not None:  # a line break is refused, never split away
        check_script_value(spec.scheduler.python, "scheduler.python",
                           file=spec.where("scheduler.python"))
    return spec.scheduler.python_words or [sys.executable]


@functools.lru_cache(maxsize=None)
def _environment(template_dir: Optional[str] = None):
    import jinja2

    own = shipped_dir("templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([template_dir, own] if template_dir else own),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["comment"] = comment
    return env


def render_template(template: str, variables: Mapping[str, Any], *,
                    template_dir: Optional[str] = None) -> str:
    """The template ``template`` (looked up in ``template_dir``, then hpctrain's
    ``templates/``) rendered with ``variables`` as they are. :meth:`Scheduler.render`
    checks them first (:func:`check_script_context`); this is the bare renderer."""
    return _environment(template_dir).get_template(template).render(**variables)


# --------------------------------------------------------------------------- shell safety
# The one check of every value that reaches a script (CR, LF, NUL) is
# hpctrain.spec.check_script_value: the spec's loader applies it to each key, and the
# renderer below to its whole context again.
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


#: The spec key each template variable's value comes from, for the error of
#: :func:`check_script_context` (``launch`` and ``env`` are looked up in the spec).
_CONTEXT_KEYS = {
    "run_name": "run.name", "run_dir": "run.storage_path", "log_file": "run.storage_path",
    "modules": "setup.modules", "commands": "setup.commands", "env": "env",
    "directives": "scheduler.directives", "python": "scheduler.python",
    "warning_signal": "failure.warning_signal", "rerender": "the command line",
}


def check_script_context(variables: Mapping[str, Any], spec: JobSpec, *,
                         request_python: Optional[str] = None) -> None:
    """:func:`check_script_value` over everything a template gets (strings, and the
    strings in lists and pairs), whatever its source: the safety net under the checks
    done when the spec is loaded. The embedded spec (``spec_toml``, TOML text in a quoted
    heredoc whose end marker is checked apart) is the one multi-line value."""
    from ..spec import check_script_value, script_value_problem

    for name, value in variables.items():
        if name == "spec_toml":
            continue
        for item in _strings(value):
            if script_value_problem(item) is None:
                continue
            key, where, found = _context_key(name, item, spec, request_python)
            check_script_value(found, key, file=spec.where(where) if where else None)


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _context_key(name: str, item: str, spec: JobSpec,
                 request_python: Optional[str]) -> Tuple[str, Optional[str], str]:
    """(key, the key whose origin names the file, the value) of a bad template value: the
    spec's key and value it came from, else the template variable's name and ``item``."""
    from ..spec import script_value_problem

    sched = spec.scheduler
    if name in ("launch", "python"):
        for i, arg in enumerate(sched.launcher_args):
            if script_value_problem(arg) is not None:
                return f"scheduler.launcher_args[{i}]", "scheduler.launcher_args", arg
        if request_python is not None:
            if script_value_problem(request_python) is not None:
                return "BatchRequest.python (the interpreter in the job)", None, request_python
        elif sched.python and script_value_problem(sched.python) is not None:
            return "scheduler.python", "scheduler.python", sched.python
    if name == "env":
        for env_name, env_value in spec.env.items():
            if script_value_problem(env_name) or script_value_problem(env_value):
                return f"env.{env_name}", f"env.{env_name}", env_value
    key = _CONTEXT_KEYS.get(name)
    return (key, key, item) if key and "." in key else (f"the script's {name}", None, item)


def comment(value: Any, prefix: str = "# ", inline: bool = False) -> str:
    """``value`` as comment lines of a shell script: ``prefix`` before every physical line
    (after each CR or LF), so that no value shown in a comment can become a command; a
    NUL is shown as ``\\0``. ``inline``: the value goes on a comment line the template
    started itself, so its first line gets no prefix (the template filter ``comment``).

    >>> print(comment("srun python\\necho INJECTED", "#   "))
    #   srun python
    #   echo INJECTED
    >>> print("# the run " + comment("r1\\nid", inline=True))
    # the run r1
    # id
    """
    lines = _LINE_BREAKS.split(str(value).replace("\0", "\\0"))
    out = "\n".join(prefix + line for line in lines)
    return out[len(prefix):] if inline else out


_PLAIN_VAR = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")


def shell_value(value: str) -> str:
    r"""A value for ``export NAME=<here>``: double-quoted, so plain ``$VAR`` and ``${VAR}``
    still expand (site configs use ``$USER``, ``$SLURM_JOB_ID``), but nothing else does:
    every other ``$`` (``$(…)``, ``${V@P}``, ``$[…]``, ``$((…))``), quotes, backslashes
    and backticks are escaped.

    >>> print(shell_value('/tmp/$USER-miopen'))
    "/tmp/$USER-miopen"
    >>> print(shell_value('a"b `c` $(d) ${e@P}'))
    "a\"b \`c\` \$(d) \${e@P}"
    """
    out, pos = [], 0
    for m in _PLAIN_VAR.finditer(value):
        out.append(_escape_dq(value[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape_dq(value[pos:]))
    return '"' + "".join(out) + '"'


def _escape_dq(text: str) -> str:
    for c in ("\\", '"', "`", "$"):
        text = text.replace(c, "\\" + c)
    return text


def shell_word(value: str, spec: JobSpec, key: str) -> str:
    """One shell word, quoted when it needs to be (module names like ``cray-python/3.11``
    stay readable)."""
    from ..spec import check_script_value

    check_script_value(value, key, file=spec.where(key), expected="a non-empty single line")
    if not value.strip():
        raise ConfigError(f"{key}: expected a non-empty single line, got {value!r}",
                          file=spec.where(key))
    return shlex.quote(value)


def _command_line(command: str, spec: JobSpec) -> str:
    """``[setup] commands`` are shell lines by design (``source venv/bin/activate``); one
    line each, so that a stray newline cannot hide a second command."""
    from ..spec import check_script_value

    return check_script_value(command, "setup.commands", file=spec.where("setup.commands"),
                              expected="one shell line per entry",
                              hint="give several entries instead of one with newlines")


DEFAULT_WARNING = "120s"


def warning_seconds(spec: JobSpec, walltime_s: Optional[int] = None) -> int:
    """Seconds of warning before the walltime ends (``failure.warning_time``).

    The default (120 s) shrinks to a quarter of a short walltime (``time = "2m"`` → 30 s,
    at least 10 s); a value set on purpose that leaves less than half of the walltime
    to train is an error. ``walltime_s``: the job's walltime where the spec sets none
    (the queue's default, read inside the job); a value set on purpose then shrinks as
    the default does, since the job runs already."""
    fl = spec.run.failure_config
    walltime = spec.scheduler.walltime_s
    if walltime is None:
        if walltime_s is None or fl.warning_s * 2 <= walltime_s:
            return fl.warning_s
        return max(10, min(fl.warning_s, walltime_s // 4))
    if fl.warning_s * 2 <= walltime:
        return fl.warning_s
    if fl.warning_time == DEFAULT_WARNING:
        return max(10, min(fl.warning_s, walltime // 4))
    raise ConfigError(
        f"failure.warning_time: {fl.warning_s} s of warning leaves too little of the "
        f"walltime ({walltime} s, scheduler.time) to train; expected at most half of it",
        file=spec.where("failure.warning_time") or spec.where("scheduler.time"),
        hint='lower it (e.g. warning_time = "60s") or ask for a longer scheduler.time')


def check_directive(key: str, value: Any, spec: JobSpec) -> str:
    """``value`` as directive text, or a clear error if it cannot go on a directive line
    safely."""
    dotted = f"scheduler.directives.{key}"
    if not _SAFE_KEY.fullmatch(key):
        raise ConfigError(f"{dotted}: not a valid option name", file=spec.where(dotted),
                          hint="option names are letters, digits, '-' and '_' "
                               "(e.g. mail-type)")
    text = str(value)
    if not _SAFE_DIRECTIVE.fullmatch(text):
        bad = sorted({c for c in text if not _SAFE_DIRECTIVE.fullmatch(c)})
        raise ConfigError(
            f"{dotted}: {text!r} holds {', '.join(repr(c) for c in bad)}, which cannot go "
            "on a directive line safely", file=spec.where(dotted),
            hint="directive values are single words without spaces, quotes, '#', ';' or '$'")
    return text


def check_run_path(path: str, spec: JobSpec) -> None:
    """The run directory goes into directives (log paths) and the script: refuse what
    cannot be carried safely, and say what to do."""
    if not _SAFE_DIRECTIVE.fullmatch(path):
        bad = sorted({c for c in path if not _SAFE_DIRECTIVE.fullmatch(c)})
        raise ConfigError(
            f"run.storage_path: the run directory {path!r} holds "
            f"{', '.join(repr(c) for c in bad)}; batch directives cannot carry it safely",
            file=spec.where("run.storage_path"),
            hint="use a storage path and run name without spaces or quotes, "
                 "e.g. --set run.storage_path=$SCRATCH/runs")


def merge_directives(computed: Sequence[Tuple[str, Any]], spec: JobSpec) -> List[Tuple[str, Any]]:
    """hpctrain's own directives, then the spec's ``scheduler.directives`` over them (a
    key replaces hpctrain's value in place; new keys follow in order; ``""`` removes).

    The layer order holds here too: a directive set by the *site* config does not replace
    what hpctrain computed from the job's own settings (``--cpus-per-task`` from
    ``scaling.cpus_per_worker``); one set in the job file or with ``--set`` does."""
    site_path = getattr(spec.site_config, "path", None)
    out: Dict[str, Any] = {}
    for key, value in computed:
        if value is not None:
            out[key] = value
    for key, value in spec.scheduler.directives.items():
        from_site = site_path is not None and spec.where(
            f"scheduler.directives.{key}") == site_path
        if from_site and key in out:
            continue
        out[key] = value
    return [(k, v) for k, v in out.items() if v != ""]


def array_ranges(indices: Sequence[int]) -> str:
    """An array index list (Slurm's ``--array``), runs of consecutive indices as ranges.

    >>> array_ranges([0, 1, 2])
    '0-2'
    >>> array_ranges([1, 3, 4, 5, 9])
    '1,3-5,9'
    """
    out, run = [], []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def job_name(request: BatchRequest) -> str:
    return request.name or os.path.basename(request.run_path)

