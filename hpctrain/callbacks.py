"""Experiment tracking: callbacks that see every report of rank 0.

```python
from hpctrain.callbacks import TensorBoardLoggerCallback, MLflowLoggerCallback, WandbLoggerCallback

RunConfig(callbacks=[TensorBoardLoggerCallback(),                       # <run>/tensorboard
                     MLflowLoggerCallback(experiment_name="exp"),       # <run>/mlruns
                     WandbLoggerCallback(project="exp")])               # offline: <run>/wandb
```
or in a job file::

    [callbacks]
    tensorboard = true
    mlflow = { experiment_name = "exp" }          # tracking_uri: default <run>/mlruns
    wandb = { project = "exp", mode = "offline" }

**Where they run.** Rank 0 appends each report to ``result.json`` in the run directory
(that file, and ``progress.csv`` beside it, are the JSON and CSV loggers: always on).
Callbacks run in the *supervisor*, which follows that file: in the driver process for a
local run (``fit()``, ``hpctrain run``), in the batch step on the allocation's first node
for a job. So the training processes never import MLflow or W&B nor wait on them (a
report stays a buffered append), a crashing rank cannot take the tracking down with it,
callbacks live once per allocation instead of once per attempt, and the same code serves
local and batch runs. The supervisor delivers new reports every 0.1 s and the rest when
the attempt ends; how far it got is kept in ``.hpctrain/tracking.json``, so a requeued job
continues where the previous allocation stopped (a report may be delivered twice if the
allocation vanished between the two; MLflow and TensorBoard take the later value, W&B
skips steps it already has). Callbacks are pickled into ``.hpctrain/callbacks.pkl`` (readable by
the owner only) for the batch step: they must not hold secrets (see below). A callback
that raises is reported on stderr and switched off, and so is any trouble of the
tracking itself (an unreadable ``tracking.json``…): tracking never stops the training.

**Credentials** (``WANDB_API_KEY``, ``MLFLOW_TRACKING_PASSWORD``/``_TOKEN``…) are read
from the environment of the process that runs the callbacks, at start-up, and never
written anywhere by hpctrain: not to ``spec.toml``, the batch script, ``callbacks.pkl`` or
the logs. The callbacks take no key arguments (``api_key=`` is refused), nor a tracking
URI with user information or a token in it; a job file's ``[env]`` (a credential's
name, or a ``scheme://user:password@host`` value) and ``[callbacks]`` refuse literal
credentials. Export them in the shell that
submits (Slurm passes its environment to the job), or give ``api_key_file`` (W&B) or a
``[setup]`` command that sources a file only you can read.
"""
from __future__ import annotations

import inspect
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .common.install import pip_install
from .common.log import get_logger
from .errors import ConfigError
from .user_callback import UserCallback
from hpctrain.common.fsutil import atomic_write_json, read_json
from hpctrain.common.metrics import flatten

__all__ = ["Callback", "RunInfo", "JsonLoggerCallback", "CSVLoggerCallback",
           "TensorBoardLoggerCallback", "TBXLoggerCallback", "MLflowLoggerCallback",
           "WandbLoggerCallback", "from_toml", "to_toml", "CREDENTIAL_RE"]

#: Names of options and variables that hold secrets: never in a job file or script.
CREDENTIAL_RE = re.compile(r"(api_?key|password|passwd|token|secret|credential)", re.I)


@dataclass
class RunInfo:
    """What a callback learns at :meth:`Callback.setup`."""

    path: str                        # the run directory
    name: str                        # the run's name
    config: Dict[str, Any] = field(default_factory=dict)   # train_loop_config
    resumed: bool = False            # an earlier process already delivered reports

    def state_file(self, kind: str) -> str:
        """Where a callback keeps what it must remember across allocations."""
        return os.path.join(self.path, ".hpctrain", f"tracking-{kind}.json")

    def load_state(self, kind: str) -> Dict[str, Any]:
        """What :meth:`save_state` kept; ``{}`` when there is none or it is unreadable
        (a crash may leave it empty: then a new tracking run starts, with a warning)."""


        try:
            state = read_json(self.state_file(kind), default={}) or {}
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
            return state
        except (OSError, ValueError) as e:

            get_logger("callbacks").warning(f"WARNING: {self.state_file(kind)} is unreadable "
                                            f"({type(e).__name__}: {e}); starting afresh")
            return {}

    def save_state(self, kind: str, state: Dict[str, Any]) -> None:

        atomic_write_json(self.state_file(kind), state, sync=False, mode=0o600)


class Callback:
    """Base class: override what you need. Called in the supervisor process (see the
    module docstring), never in a training process."""

    #: The key of this callback in a job file's ``[callbacks]`` (None: Python only).
    toml_name: Optional[str] = None

    def setup(self, run: RunInfo) -> None:
        """Once per supervisor process, before the first report is delivered."""

    def on_result(self, result: Dict[str, Any]) -> None:
        """One report of rank 0: its metrics plus ``_training_iteration``,
        ``_timestamp``, ``_time_this_iter_s`` and ``checkpoint_dir_name``."""

    def on_results(self, results: List[Dict[str, Any]]) -> None:
        """The reports that arrived since the last call (default: ``on_result`` each)."""
        for r in results:
            self.on_result(r)

    def on_end(self, status: str) -> None:
        """The run (or this allocation) ended: FINISHED, FAILED, STOPPED, REQUEUED (a
        later allocation continues), or INTERRUPTED."""

    def to_toml(self) -> Any:
        """This callback's ``[callbacks]`` entry (True or a table of options)."""
        return True


def user_metrics(row: Dict[str, Any]) -> Dict[str, float]:
    """The numeric metrics of a report, nested dicts flattened with ``/``; hpctrain's own
    ``_`` fields, strings and booleans left out.

    >>> user_metrics({"loss": 0.5, "acc": {"top1": 1}, "_timestamp": 9, "ok": True, "s": "x"})
    {'loss': 0.5, 'acc/top1': 1}
    """

    return {k: v for k, v in flatten(row).items()
            if not k.startswith("_") and k != "checkpoint_dir_name"
            and isinstance(v, (int, float)) and not isinstance(v, bool)}


class JsonLoggerCallback(Callback):
    """``result.json``: one JSON line per report. Always on (rank 0 writes it; the run's
    Result, ``hpctrain results`` and ``hpctrain plot`` read it); listed for Ray parity."""

    toml_name = "json"


class CSVLoggerCallback(Callback):
    """``progress.csv``: one row per report (columns of the first report). Always on."""

    toml_name = "csv"


class EventFile:
    """One TensorBoard event file in ``logdir`` (created), written with tensorboardX's
    public ``SummaryWriter`` (no TensorFlow, whatever is installed). One file per writing
    process: its name ends with the process id, so that two writers on one host in the
    same second never share a file. Needs the ``tensorboardX`` package."""

    def __init__(self, logdir: str):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:
            raise ImportError("TensorBoard event files need tensorboardX.\nHINT: "
                              + pip_install("tensorboardX")) from e

        os.makedirs(logdir, exist_ok=True)
        # flush_secs: the callbacks flush after each batch of results themselves
        self._writer = SummaryWriter(logdir=logdir, flush_secs=3600,
                                     filename_suffix=f".{os.getpid()}")
        self.logdir = logdir

    def scalars(self, step: int, wall_time: float, values: Dict[str, float]) -> None:
        """``values`` (tag → number) at ``step``."""
        for tag, value in values.items():
            self._writer.add_scalar(tag, float(value), global_step=step, walltime=wall_time)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class TensorBoardLoggerCallback(Callback):
    """TensorBoard event files (scalars: every numeric metric, step = the report's
    ``_training_iteration``) in ``logdir`` (default ``<run>/tensorboard``). Needs the
    ``tensorboardX`` package (``pip install tensorboardX``); no TensorFlow.
    ``tensorboard --logdir <run>/tensorboard`` shows them."""

    toml_name = "tensorboard"

    def __init__(self, logdir: Optional[str] = None):
        if logdir is not None and not isinstance(logdir, str):
            raise ConfigError(f"TensorBoardLoggerCallback: logdir: expected a path, got {logdir!r}")
        self.logdir = logdir
        self._writer = None

    def setup(self, run: RunInfo) -> None:
        self._writer = EventFile(self.logdir or os.path.join(run.path, "tensorboard"))

    def on_results(self, results: List[Dict[str, Any]]) -> None:
        for r in results:
            self._writer.scalars(int(r.get("_training_iteration", 0)),
                                 float(r.get("_timestamp", 0)), user_metrics(r))
        if results:
            self._writer.flush()

    def on_end(self, status: str) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def to_toml(self) -> Any:
        return {"logdir": self.logdir} if self.logdir else True

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_writer": None}


TBXLoggerCallback = TensorBoardLoggerCallback  # Ray's name


def _refuse_key(cls: str, value: Any, env: str, extra: str = "") -> None:
    if value is not None:
        raise ConfigError(
            f"{cls}: api_key: a key given here would be pickled into the run directory",
            hint=f"export {env} in the environment that runs the job{extra}")


def uri_secret(uri: str) -> Optional[str]:
    """What in ``uri`` looks like a credential (user information, a query parameter
    named like one), or None.

    >>> uri_secret("https://mlflow.example/x?sslmode=require") is None
    True
    >>> uri_secret("https://u:pw@mlflow.example"), uri_secret("https://h/?token=abc")
    ('user information (user:password@host)', "query parameter 'token'")
    """

    parts = urlsplit(uri)
    if "@" in parts.netloc:
        return "user information (user:password@host)"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if CREDENTIAL_RE.search(name):
            return f"query parameter {name!r}"
    return None


def redact_uri(uri: str) -> str:
    """``uri`` without user information and query string, for what is written to disk.

    >>> redact_uri("https://user:pw@mlflow.example:5000/api?token=abc#f")
    'https://***@mlflow.example:5000/api'
    >>> redact_uri("file:///runs/x/mlruns")
    'file:///runs/x/mlruns'
    """

    parts = urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


#: MLflow's HTTP client, bounded (unless set in the environment): its defaults retry for
#: minutes, and the supervisor delivers the reports between its own duties.
MLFLOW_HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                      "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                      "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


class MLflowLoggerCallback(Callback):
    """MLflow: one MLflow run per hpctrain run (resumed across restarts and requeues),
    ``train_loop_config`` as parameters, every numeric metric with step = the report's
    iteration, status FINISHED / FAILED / KILLED at the end.

    ``tracking_uri``: default a file store in ``<run>/mlruns`` (hpctrain sets
    ``MLFLOW_ALLOW_FILE_STORE=true`` for file stores, which MLflow 3 otherwise refuses).
    ``$MLFLOW_TRACKING_URI`` is *not* used: a server picked up from a compute node's
    environment could stall the batch step; name a server here to use one. Requests to
    a server are bounded (2 retries, 20 s timeouts: :data:`MLFLOW_HTTP_BOUNDS`, unless
    those ``MLFLOW_HTTP_REQUEST_*`` variables are set). ``experiment_name``: default
    ``$MLFLOW_EXPERIMENT_NAME`` or ``"hpctrain"``. A server's credentials come from
    MLflow's own variables (``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``/``_TOKEN``),
    never from the URI (user information or a token in it is refused). Needs
    ``mlflow-skinny``.
    """

    toml_name = "mlflow"

    def __init__(self, tracking_uri: Optional[str] = None, experiment_name: Optional[str] = None,
                 tags: Optional[Dict[str, str]] = None, log_params: bool = True):
        for key, value in (("tracking_uri", tracking_uri), ("experiment_name", experiment_name)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"MLflowLoggerCallback: {key}: expected a string, got {value!r}")
        if tags is not None and not (isinstance(tags, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in tags.items())):
            raise ConfigError(f"MLflowLoggerCallback: tags: expected a table of strings, got {tags!r}")
        secret = uri_secret(tracking_uri) if tracking_uri else None
        if secret:
            raise ConfigError(f"MLflowLoggerCallback: tracking_uri: holds a credential "
                              f"({secret}): it would be written into the run directory",
                              hint="give the URI without it and export "
                                   "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD "
                                   "(or MLFLOW_TRACKING_TOKEN)")
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.tags = dict(tags or {})
        self.log_params = bool(log_params)
        self._client = None
        self._run_id: Optional[str] = None

    def setup(self, run: RunInfo) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise ImportError("MLflowLoggerCallback needs MLflow.\nHINT: "
                              + pip_install("mlflow-skinny")) from e
        uri = self.tracking_uri or "file://" + os.path.join(run.path, "mlruns")
        if uri.startswith("file:") or "://" not in uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        else:
            for name, value in MLFLOW_HTTP_BOUNDS.items():
                os.environ.setdefault(name, value)
        self._client = client = MlflowClient(tracking_uri=uri)
        state = run.load_state("mlflow")
        shown = redact_uri(uri)  # what goes to disk
        if state.get("run_id") and state.get("tracking_uri") == shown:
            self._run_id = state["run_id"]
            client.update_run(self._run_id, status="RUNNING")
            return
        name = self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "hpctrain"
        exp = client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else client.create_experiment(name)
        created = client.create_run(exp_id, run_name=run.name,
                                    tags={"hpctrain.run_dir": run.path, **self.tags})
        self._run_id = created.info.run_id
        if self.log_params and run.config:
            from mlflow.entities import Param


            params = [Param(k, str(v)[:6000]) for k, v in flatten(run.config).items()]
            for i in range(0, len(params), 100):
                client.log_batch(self._run_id, params=params[i:i + 100])
        run.save_state("mlflow", {"run_id": self._run_id, "tracking_uri": shown,
                                  "experiment_id": exp_id})

    def on_results(self, results: List[Dict[str, Any]]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(k, float(v), int(float(r.get("_timestamp", 0)) * 1000),
                          int(r.get("_training_iteration", 0)))
                   for r in results for k, v in user_metrics(r).items()]
        for i in range(0, len(metrics), 1000):
            self._client.log_batch(self._run_id, metrics=metrics[i:i + 1000])

    def on_end(self, status: str) -> None:
        if self._client is None or status == "REQUEUED":
            return  # the next allocation resumes this MLflow run
        self._client.set_terminated(self._run_id, {"FINISHED": "FINISHED",
                                                   "FAILED": "FAILED"}.get(status, "KILLED"))

    def to_toml(self) -> Any:
        out = {k: getattr(self, k) for k in ("tracking_uri", "experiment_name") if getattr(self, k)}
        if self.tags:
            out["tags"] = dict(self.tags)
        if not self.log_params:
            out["log_params"] = False
        return out or True

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_client": None}


class WandbLoggerCallback(Callback):
    """Weights & Biases, offline by default (compute nodes rarely reach the internet):
    the run is written to ``<run>/wandb/offline-run-*/`` for ``wandb sync`` later. One
    W&B run per hpctrain run (the same id across requeues): online it is resumed;
    offline each allocation writes its own ``offline-run-*`` of that id. A plain
    ``wandb sync`` of them does **not** join them: each one synced replaces the run's
    history (wandb issues #3841, #5865). Sync the first, then each later one with
    ``wandb sync --append`` (wandb >= 0.13.10), oldest first; that works because their
    steps never overlap (below), but it is W&B's narrow, lightly tested path (#5865
    reports it failing): check the synced run's history, or run online where a node can
    reach W&B. ``train_loop_config`` as its config; step = the report's iteration (a
    report replayed after a restart from an earlier checkpoint is skipped: W&B steps only
    go up).

    ``mode``: ``"offline"`` | ``"online"`` | ``"disabled"``. The key for online mode:
    ``$WANDB_API_KEY`` in the job's environment, or ``api_key_file`` (a file only you
    can read; read when the callback starts, never copied). Needs ``wandb``.
    """

    toml_name = "wandb"
    MODES = ("offline", "online", "disabled")

    def __init__(self, project: Optional[str] = None, *, group: Optional[str] = None,
                 entity: Optional[str] = None, mode: str = "offline",
                 tags: Optional[List[str]] = None, dir: Optional[str] = None,
                 api_key_file: Optional[str] = None, api_key: Any = None):
        _refuse_key("WandbLoggerCallback", api_key, "WANDB_API_KEY",
                    ", or give api_key_file (a file only you can read)")
        if mode not in self.MODES:
            raise ConfigError(f"WandbLoggerCallback: mode: expected one of "
                              f"{', '.join(self.MODES)}, got {mode!r}")
        for key, value in (("project", project), ("group", group), ("entity", entity),
                           ("dir", dir), ("api_key_file", api_key_file)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"WandbLoggerCallback: {key}: expected a string, got {value!r}")
        if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise ConfigError(f"WandbLoggerCallback: tags: expected a list of strings, got {tags!r}")
        self.project, self.group, self.entity, self.mode = project, group, entity, mode
        self.tags = list(tags or [])
        self.dir = dir
        self.api_key_file = api_key_file
        self._run = None
        self._last_step = -1
        self._info: Optional[RunInfo] = None

    def setup(self, run: RunInfo) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError("WandbLoggerCallback needs wandb.\nHINT: "
                              + pip_install("wandb")) from e
        state = run.load_state("wandb")
        run_id = state.get("id") or uuid.uuid4().hex[:12]
        self._last_step = int(state.get("last_step", -1))
        settings: Dict[str, Any] = dict(console="off", silent=True, disable_git=True,
                                        x_disable_stats=True, save_code=False)
        if self.api_key_file:
            with open(os.path.expanduser(self.api_key_file)) as f:
                settings["api_key"] = f.read().strip()
        directory = self.dir or run.path
        os.makedirs(directory, exist_ok=True)
        self._run = wandb.init(
            project=self.project or "hpctrain", group=self.group, entity=self.entity,
            name=run.name, id=run_id, mode=self.mode, dir=directory,
            # offline, a later allocation writes another offline-run-* of the same id
            # (`wandb sync --append` adds it, see the class docstring); online, it resumes
            **({} if self.mode == "offline" else {"resume": "allow"}),
            tags=self.tags or None, config=run.config, settings=wandb.Settings(**settings))
        self._info = run
        run.save_state("wandb", {"id": run_id, "last_step": self._last_step})

    def on_results(self, results: List[Dict[str, Any]]) -> None:
        for r in results:
            step = int(r.get("_training_iteration", 0))
            if step <= self._last_step:
                continue
            self._run.log(user_metrics(r), step=step)
            self._last_step = step
        if results and self._info is not None:
            self._info.save_state("wandb", {"id": self._run.id, "last_step": self._last_step})

    def on_end(self, status: str) -> None:
        if self._run is not None:
            self._run.finish(exit_code=1 if status == "FAILED" else 0)
            self._run = None

    def to_toml(self) -> Any:
        out = {k: getattr(self, k) for k in ("project", "group", "entity", "dir", "api_key_file")
               if getattr(self, k)}
        if self.mode != "offline":
            out["mode"] = self.mode
        if self.tags:
            out["tags"] = list(self.tags)
        return out or True

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_run": None, "_info": None}


_KINDS = {c.toml_name: c for c in (JsonLoggerCallback, CSVLoggerCallback,
                                   TensorBoardLoggerCallback, MLflowLoggerCallback,
                                   WandbLoggerCallback)}
TOML_NAMES = tuple(_KINDS)


def from_toml(table: Dict[str, Any]) -> List[Callback]:
    """The callbacks of a job file's ``[callbacks]`` table (``name = true`` or ``name =
    { option = value }``); a ConfigError naming ``callbacks.<name>[.<option>]`` otherwise."""

    out: List[Callback] = []
    for name, value in table.items():
        key = f"callbacks.{name}"
        cls = _KINDS.get(name)
        if cls is None:
            raise ConfigError(f"{key}: unknown callback; expected one of {', '.join(_KINDS)}",
                              hint="other callbacks: RunConfig(callbacks=[...]) from Python")
        if value is False:
            if name in ("json", "csv"):
                raise ConfigError(f"{key}: result.json and progress.csv are always written "
                                  "(the run's own record); false is not possible")
            continue
        if value is True:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected true, false or a table of options, got {value!r}")
        accepted = [p for p in inspect.signature(cls.__init__).parameters
                    if p not in ("self", "api_key")]
        for option, v in value.items():
            if CREDENTIAL_RE.search(option) and option != "api_key_file":
                raise ConfigError(
                    f"{key}.{option}: credentials do not go into job files (they are copied "
                    "into spec.toml and the batch script)",
                    hint="export the key (e.g. WANDB_API_KEY) in the environment that submits "
                         "the job" + (", or give api_key_file" if name == "wandb" else ""))
            if option not in accepted:
                raise ConfigError(f"{key}.{option}: unknown option; expected one of "
                                  f"{', '.join(accepted) or 'none'}")
        try:
            out.append(cls(**value))
        except ConfigError as e:
            option = e.message.split(": ", 2)[1] if e.message.count(": ") >= 2 else ""
            detail = e.message.split(": ", 2)[-1]
            raise ConfigError(f"{key}{'.' + option if option else ''}: {detail}",
                              hint=e.hint) from None
    return out


def to_toml(callbacks: List[Any]) -> Dict[str, Any]:
    """The ``[callbacks]`` table of the callbacks a job file can describe."""
    return {cb.toml_name: cb.to_toml() for cb in callbacks or []
            if isinstance(cb, Callback) and type(cb).toml_name and type(cb) is _KINDS.get(cb.toml_name)}


def check_callbacks(callbacks: List[Any]) -> None:
    """``RunConfig(callbacks=...)``: each one a :class:`Callback`, a :class:`UserCallback` or a seed-era
    ``TrainingCallback`` (``handle_result``)."""
    for i, cb in enumerate(callbacks):
        if not (isinstance(cb, (Callback, UserCallback)) or hasattr(cb, "on_result")
                or hasattr(cb, "handle_result")):
            raise ConfigError(f"run.callbacks[{i}]: expected a hpctrain.callbacks.Callback, got "
                              f"{type(cb).__name__}",
                              hint="subclass hpctrain.callbacks.Callback (override on_result) or "
                                   "hpctrain.callbacks.UserCallback (Ray v2: after_report)")
