"""The scheduler interface and the batch request.

A :class:`BatchRequest` is one run's resolved spec plus where its run directory is;
``request.materialize()`` gives the exact batch script (``hpctrain render`` prints it,
``hpctrain submit`` writes it to ``<run>/job.sh`` and submits those bytes). Each
scheduler turns the request into its directive lines; the rest of the script comes from
``hpctrain/templates/<scheduler>.sh.j2``. Every value that reaches the script is checked
or quoted here, never in a template.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigError

#: Characters allowed in a directive value (``#SBATCH``/``#PBS`` lines are not parsed
#: by a shell, and each scheduler splits them differently): no whitespace, quotes, ``#``,
#: ``;``, ``$`` or backslashes. Enough for partitions, accounts, GRES, constraint
#: expressions (``a100&hbm80g``), mail addresses and paths without spaces.
_SAFE_DIRECTIVE = re.compile(r"[A-Za-z0-9_.,:=+@%/\-\[\]*!&|()^~{}]+")
_SAFE_KEY = re.compile(r"-?[A-Za-z][A-Za-z0-9_-]*(:[A-Za-z][A-Za-z0-9_-]*)?")
_HEREDOC_EOF = "HPCTRAIN_SPEC_EOF"


@dataclass
class JobState:
    """A job as the scheduler sees it. ``state`` uses Slurm's words (PENDING, RUNNING,
    COMPLETED, FAILED, CANCELLED, TIMEOUT, …, or UNKNOWN when the scheduler no longer
    knows the job); ``done`` is true once the job left the queue."""

    job_id: str
    state: str
    done: bool
    reason: str = ""
    nodes: str = ""


@dataclass
class BatchRequest:
    """What one batch script asks for and runs."""

    spec: Any                       # hpctrain.spec.JobSpec
    run_path: str
    rerender: str = ""              # the command that re-renders this script
    python: Optional[str] = None    # interpreter in the job (default: this one)

    @property
    def scheduler(self) -> "Scheduler":
        from . import get_scheduler

        return get_scheduler(self.spec.scheduler.kind)

    def materialize(self) -> str:
        """The exact batch script."""
        return self.scheduler.render(self)


class Scheduler:
    """One batch system: render, submit, watch, cancel."""

    name = "base"
    template: Optional[str] = None
    #: The variable holding the job id inside the job.
    job_id_var = "JOB_ID"

    # -- rendering -------------------------------------------------------------------
    def directives(self, request: BatchRequest) -> List[str]:
        """The directive lines (without the ``#SBATCH``/``#PBS`` prefix)."""
        raise NotImplementedError

    def render(self, request: BatchRequest, **overrides: Any) -> str:
        """The script; ``overrides`` replace template variables (a sweep's job array runs
        each task's trial: ``run_dir``, ``log_file``, ``prelude``, ``batch_args``)."""
        from .. import __version__

        if self.template is None:
            raise ConfigError(f"scheduler.kind: the {self.name!r} scheduler has no batch script",
                              file=request.spec.where("scheduler.kind"),
                              hint='use "slurm" or "pbs" to render or submit a batch job')
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
            python=shlex.quote(request.python or spec.scheduler.python or sys.executable),
            run_dir=shlex.quote(request.run_path),
            log_file=f"{request.run_path}/logs/{self.name}-${{{self.job_id_var}}}.out",
            eof=_HEREDOC_EOF,
            spec_toml=text,
            warning_signal=spec.run.failure_config.warning_signal,
            prelude=[],
            batch_args="",
        )
        variables.update(overrides)
        from ..launchers import launch_line

        python = request.python or spec.scheduler.python or sys.executable
        variables["launch"] = launch_line(spec, python=python, run_dir=variables["run_dir"])
        return _environment().get_template(self.template).render(**variables)

    def cd_line(self) -> str:
        """A shell line run first in the job (PBS starts jobs in ``$HOME``)."""
        return ""

    # -- the scheduler's commands -----------------------------------------------------
    #: The command that submits; its absence is a clear error before anything is written.
    submit_command: Optional[str] = None

    def check_available(self) -> None:
        import shutil

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


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "templates")),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False)


# --------------------------------------------------------------------------- shell safety
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


def shell_word(value: str, spec: Any, key: str) -> str:
    """One shell word, quoted when it needs to be (module names like ``cray-python/3.11``
    stay readable)."""
    if "\n" in value or not value.strip():
        raise ConfigError(f"{key}: expected a non-empty single line, got {value!r}",
                          file=spec.where(key))
    return shlex.quote(value)


def _command_line(command: str, spec: Any) -> str:
    """``[setup] commands`` are shell lines by design (``source venv/bin/activate``); one
    line each, so that a stray newline cannot hide a second command."""
    if "\n" in command or "\r" in command:
        raise ConfigError(f"setup.commands: one shell line per entry, got {command!r}",
                          file=spec.where("setup.commands"),
                          hint="give several entries instead of one with newlines")
    return command


DEFAULT_WARNING = "120s"


def warning_seconds(spec: Any) -> int:
    """Seconds of warning before the walltime ends (``failure.warning_time``).

    The default (120 s) shrinks to a quarter of a short walltime (``time = "2m"`` → 30 s,
    at least 10 s); a value set on purpose that leaves less than half of the walltime
    to train is an error."""
    walltime, fl = spec.scheduler.walltime_s, spec.run.failure_config
    if walltime is None or fl.warning_s * 2 <= walltime:
        return fl.warning_s
    if fl.warning_time == DEFAULT_WARNING:
        return max(10, min(fl.warning_s, walltime // 4))
    raise ConfigError(
        f"failure.warning_time: {fl.warning_s} s of warning leaves too little of the "
        f"walltime ({walltime} s, scheduler.time) to train; expected at most half of it",
        file=spec.where("failure.warning_time") or spec.where("scheduler.time"),
        hint='lower it (e.g. warning_time = "60s") or ask for a longer scheduler.time')


def check_directive(key: str, value: Any, spec: Any) -> str:
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


def check_run_path(path: str, spec: Any) -> None:
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


def merge_directives(computed: Sequence[Tuple[str, Any]], spec: Any) -> List[Tuple[str, Any]]:
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


def job_name(request: BatchRequest) -> str:
    return os.path.basename(request.run_path)

