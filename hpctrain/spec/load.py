"""Loading a job spec: a job file layered over hpctrain's defaults, the site config and
the user config, with ``section.key=value`` overrides on top (:func:`load_job_spec`),
and :func:`spec_from_dict`, which checks the merged tables and builds the
:class:`~hpctrain.spec.JobSpec`."""
from __future__ import annotations

import copy
import datetime as _dt
import os
from typing import Any, Callable, Dict, List, Mapping, MutableMapping, Optional, Sequence

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from ..common.formats import SPEC_FORMAT, newer_format
from ..config import (CheckpointConfig, ContainerConfig, FailureConfig, RunConfig, ScalingConfig,
                      SchedulerConfig, SetupConfig, scheduler_config_class, toml_keys)
from ..config.scheduler import resolved_scheduler_table
from .. import sites
from ..errors import ConfigError, one_or_all
from ..sites import Site, derive_nodes
from ..sites import check_limits as check_site_limits
from ..userconfig import default_site, load_center_defaults, load_user_defaults
from ..common.tomlfile import kind_name as _kind
from ..common.tomlfile import loads_toml as _loads_toml
from ..common.tomlfile import read_toml as _read_toml
from ..common.tomlfile import show_value as _show
from ..common import registry as _registry
from .entrypoint import EntryPoint
from .jobspec import JobSpec
from .sections import (BACKENDS, MERGED_TABLES, SECTIONS, TOP_LEVEL, Ctx, check_callbacks,
                       check_data_config, check_datasets, check_table, check_value,
                       expand_path, unknown_key, unknown_section)
from .values import check_config, check_script_values

def _build(ctx: Ctx, cls: Any, **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ctx.reraise(e) from e


def _check_spec_format(ctx: Ctx, value: int) -> None:
    """``format`` (what a run directory's spec.toml records): 1 up to the version this
    hpctrain writes; a newer one is refused."""

    if value < 1:
        raise ctx.error("format", f"expected a format version (1, 2…), got {_show(value)}",
                        "leave it out: hpctrain writes it into a run directory's spec.toml")
    if value > SPEC_FORMAT:
        raise newer_format(ctx.where("format") or "the job spec", value, SPEC_FORMAT,
                           "the spec")


def resolved_spec(data: Mapping[str, Any], *, file: str, base_dir: str) -> JobSpec:
    """The :class:`JobSpec` of a spec hpctrain resolved and wrote itself: a run
    directory's ``spec.toml``, the spec a job script carries. As :func:`spec_from_dict`,
    with a ``[scheduler]`` written by an earlier version read as this one names its keys
    (:func:`~hpctrain.config.scheduler.resolved_scheduler_table`), so that a run started
    before an upgrade continues, requeues and restores."""
    data = dict(data)
    if isinstance(data.get("scheduler"), Mapping):
        data["scheduler"] = resolved_scheduler_table(data["scheduler"])
    return spec_from_dict(data, file=file, base_dir=base_dir)


def spec_from_dict(data: Mapping[str, Any], *, file: Optional[str] = None, base_dir: str = ".",
                   origins: Optional[Mapping[str, str]] = None) -> JobSpec:
    """Validate a parsed TOML document and build the :class:`JobSpec`.

    ``base_dir`` resolves relative paths (entry point file, storage path); ``origins``
    maps dotted keys set by overrides to the override text, so errors name the override
    (and its relative paths resolve against the working directory instead).
    """
    ctx = Ctx(file, origins)
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a table of sections, got {_kind(data)}", file=file)
    # every problem of the file, reported together: a section's checks run even after an
    # earlier section failed (with that section left out: its defaults)
    problems: List[ConfigError] = []

    def checked(fn: Callable[..., Any], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            problems.append(e)
            return default

    data_order = dict(data)  # (as given: the report's order)
    data = dict(data)  # (less the sections that are no tables)
    _check_top_level(ctx, data, problems, checked)

    def base_for(key: str) -> str:
        where = ctx.where(key)
        if ctx.override_for(key) is not None:
            return os.getcwd()
        if where and where != file and os.path.isfile(where):
            return os.path.dirname(os.path.abspath(where))  # a site config's own directory
        return base_dir

    def table(section: str) -> Dict[str, Any]:
        return checked(check_table, ctx, section, data.get(section, {}), default={})

    job = table("job")
    backend_tables = {b: table(b) for b in BACKENDS if b in data}
    entrypoint = _entrypoint(ctx, job, checked, base_for)
    scaling = checked(_build, ctx, ScalingConfig, **table("scaling"))
    run_config = _run_config(ctx, checked, table, base_for)
    scheduler = checked(_build, ctx, SchedulerConfig, **table("scheduler"))
    setup = checked(_build, ctx, SetupConfig, **table("setup"))
    container = checked(_build, ctx, ContainerConfig, **table("container"))
    sweep = table("sweep")
    _check_sweep_ranking(ctx, sweep, problems)
    backend = job.get("backend", "torch")
    datasets = checked(check_datasets, ctx, data.get("datasets", {}), base_for, default={})
    data_config = checked(check_data_config, ctx, table("data"), datasets)
    if problems:
        raise _in_file_order(problems, data_order)
    spec = _build(ctx, JobSpec, entrypoint=entrypoint, backend=backend, scaling=scaling,
                  run=run_config, config=copy.deepcopy(dict(data.get("config", {}))),
                  backend_options=backend_tables.get(backend, {}), scheduler=scheduler,
                  setup=setup, container=container, env=dict(data.get("env", {})), site=data.get("site"),
                  datasets=datasets, data_config=data_config,
                  sweep=sweep, source=file, origins=dict(ctx.origins))
    check_script_values(ctx, data)  # after the keys' own checks, whose errors say more
    return spec


def _check_top_level(ctx: Ctx, data: Dict[str, Any], problems: List[ConfigError],
                     checked: Callable[..., Any]) -> None:
    """Check the top-level keys; drop from ``data`` unknown sections and those that are no tables."""
    if "format" in data:  # first, alone: a newer format's keys are no typos
        _check_spec_format(ctx, check_value(ctx, "format", TOP_LEVEL["format"], data["format"]))
    for name, value in list(data.items()):
        if name in TOP_LEVEL:
            checked(check_value, ctx, name, TOP_LEVEL[name], value)
            continue
        if name not in SECTIONS:
            problems.append(unknown_section(ctx, name))
            del data[name]
        elif not isinstance(value, dict):
            problems.append(ctx.error(name, f"expected a table ([{name}] section), got "
                                      f"{_show(value)} ({_kind(value)})",
                                      "sections hold key = value lines under a [name] header"))
            del data[name]


def _entrypoint(ctx: Ctx, job: Dict[str, Any], checked: Callable[..., Any],
                base_for: Callable[[str], str]) -> Optional[EntryPoint]:
    """``job.entrypoint`` parsed (its file under ``job.entrypoint_dir`` if set), else ``None``."""
    entrypoint = None
    if "entrypoint" in job:
        entry_base = base_for("job.entrypoint")
        if "entrypoint_dir" in job:
            entry_base = checked(expand_path, ctx, "job.entrypoint_dir", job["entrypoint_dir"],
                                 base_for("job.entrypoint_dir"), default=entry_base)
        entrypoint = checked(EntryPoint.parse, job["entrypoint"], base_dir=entry_base,
                             file=ctx.where("job.entrypoint"))
    return entrypoint


def _run_config(ctx: Ctx, checked: Callable[..., Any], table: Callable[[str], Dict[str, Any]],
                base_for: Callable[[str], str]) -> Any:
    """The :class:`RunConfig` of ``[run]``, ``[checkpoint]``, ``[failure]`` and ``[callbacks]``."""
    checkpoint = checked(_build, ctx, CheckpointConfig, **table("checkpoint"))
    failure = checked(_build, ctx, FailureConfig, **table("failure"))
    run = table("run")
    if "storage_path" in run:
        run["storage_path"] = checked(expand_path, ctx, "run.storage_path", run["storage_path"],
                                      base_for("run.storage_path"), default=".")
    callbacks = checked(check_callbacks, ctx, table("callbacks"), default=[])
    return checked(_build, ctx, RunConfig, checkpoint_config=checkpoint,
                   failure_config=failure, callbacks=callbacks, **run)


def _check_sweep_ranking(ctx: Ctx, sweep: Dict[str, Any], problems: List[ConfigError]) -> None:
    """Record a problem when ``[sweep]`` sets only one of ``metric`` and ``mode``."""
    if ("metric" in sweep) != ("mode" in sweep):
        given, missing = ("metric", "mode") if "metric" in sweep else ("mode", "metric")
        problems.append(ctx.error(f"sweep.{missing}", f"expected sweep.{missing} too, since "
                                  f"sweep.{given} is set (trials are ranked by a metric, "
                                  "\"min\" or \"max\")", 'e.g. metric = "loss" and mode = "min"'))


def _in_file_order(problems: List[ConfigError], data_order: Dict[str, Any]) -> ConfigError:
    """All the problems as one error, sorted in the file's order of sections and keys."""
    order = {name: (i, list(v) if isinstance(v, dict) else [])
             for i, (name, v) in enumerate(data_order.items())}

    def in_file(e: ConfigError) -> tuple:  # the file's order of sections and keys
        section, _, key = getattr(e, "message", "").split(":", 1)[0].partition(".")
        i, keys = order.get(section, (len(order), []))
        return (i, keys.index(key) if key in keys else len(keys))

    return one_or_all(sorted((one for e in problems for one in e.errors), key=in_file))


def load_job_spec(path: str, overrides: Sequence[str] = (), *, site: Optional[str] = None,
                  require_entrypoint: bool = True, check_limits: bool = True) -> JobSpec:
    """Read ``path`` (TOML), layer it, validate it.

    Layers, last wins: hpctrain's defaults < the center config (account, storage path,
    share: :mod:`hpctrain.userconfig`) < the site config (``site``, else the overrides'
    or the job file's ``site = "..."``, else ``$HPCTRAIN_SITE``, else the user config's
    ``site``, else the center config's; ``"local"``: none, this machine on purpose) < the
    user config (account, storage path, share) < the job file < ``overrides``
    (``"section.key=value"``).
    Tables of options (``scheduler.directives``,
    ``scaling.resources_per_worker``, ``[env]``, ``[config]``) merge key by key; other
    values, arrays included, are replaced whole. With ``check_limits`` the request is
    checked against the site's limits.
    """
    path = os.fspath(path)
    data = _read_toml(path)
    origins: Dict[str, str] = {}
    over = _apply_overrides({}, overrides, origins, keep_deletes=True)
    user, center = load_user_defaults(), load_center_defaults()
    site_name = site if site is not None else over.get("site", data.get("site"))
    site_file = ("command line (--site)" if site is not None else
                 origins.get("site", path))
    if site_name is None and "site" not in over:
        site_name, site_file = default_site(user, center)
    over.pop("site", None)
    data = {k: v for k, v in data.items() if k != "site"}
    site_key = "site"
    # (the center's storage path yields to $HPCTRAIN_STORAGE_PATH, as the user config's does)
    layers: List[tuple] = center.layer(storage="storage_path" not in user.values)
    site_config = None
    if site_name is not None:
        if not isinstance(site_name, str):
            raise ConfigError(f"site: expected a site name (a string), got {_show(site_name)}",
                              file=site_file, hint="`hpctrain sites` lists them")
        if site_name != sites.LOCAL_SITE:  # "local": this machine, on purpose; no config
            site_config = load_site(site_name, key=site_key, file=site_file)
            layers.append((site_config.layer, site_config.path))
    layers.extend(user.layer())
    layers.append((data, None))
    layers.append((over, "overrides"))
    merged = merge_layers(layers, origins, job_file=path)
    _prefer_later_layer(merged, origins, path)
    if site_name is not None:
        merged["site"] = site_name
    # (here, not in spec_from_dict: the spec embedded in the job.sh of a run started from
    # Python before credentials were redacted must still load when the job is requeued)
    check_config(Ctx(path, origins), merged.get("config", {}))
    spec = spec_from_dict(merged, file=path, base_dir=os.path.dirname(os.path.abspath(path)),
                          origins=origins)
    spec.site_config = site_config
    if require_entrypoint and spec.entrypoint is None:
        raise ConfigError('job.entrypoint: missing; expected "module:function" or '
                          '"file.py:function"', file=Ctx(path, origins).where("job.entrypoint"),
                          hint='add  [job]  entrypoint = "train.py:train_func"')
    if spec.site_config is None or Ctx(path, origins).where("container.runtime") \
            != spec.site_config.path:  # a site's runtime waits for a job's image
        spec.container.check_complete(Ctx(path, origins).where("container.image"))
    derive_nodes(spec)
    if check_limits:
        check_site_limits(spec)
    return spec


def load_site(name: str, *, key: str = "site", file: Optional[str] = None) -> Site:
    """The site config ``name`` (:func:`hpctrain.sites.load_site`), its settings checked on
    their own against the job spec's schema, so that a broken site config is blamed on
    itself (``<site file>: scheduler.queu: unknown key``)."""
    site = sites.load_site(name, key=key, file=file)
    check_config(Ctx(site.path), site.layer.get("config", {}))
    spec_from_dict(site.layer, file=site.path, base_dir=os.path.dirname(site.path))
    return site


#: Pairs of keys that say the same thing; when both are set by different layers, the later
#: layer's wins (a job file's ``cpus_per_worker`` beats its site's resources_per_worker.CPU).
_SYNONYMS = [("scaling.cpus_per_worker", "scaling.resources_per_worker.CPU"),
             ("scaling.gpus_per_worker", "scaling.resources_per_worker.GPU")]


def _prefer_later_layer(merged: Dict[str, Any], origins: Mapping[str, str],
                        job_file: str) -> None:
    def rank(key: str) -> int:
        where = Ctx(job_file, origins).where(key)
        if where and where.startswith("override "):
            return 3
        return 2 if where == job_file else 1

    def lookup(key: str):
        node: Any = merged
        for part in key.split(".")[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        last = key.split(".")[-1]
        return (node, last) if isinstance(node, dict) and last in node else (None, last)

    for a, b in _SYNONYMS:
        (na, ka), (nb, kb) = lookup(a), lookup(b)
        if na is None or nb is None:
            continue
        ra, rb = rank(a), rank(b)
        if ra > rb:
            del nb[kb]
        elif rb > ra:
            del na[ka]
    _drop_other_schedulers_keys(merged, rank)


def _drop_other_schedulers_keys(merged: Dict[str, Any], rank: Callable[[str], int]) -> None:
    """A layer that chose the scheduler (``kind``) drops what a lower layer set for
    another one: a job file's ``kind = "pbs"`` over a Slurm site's ``partition``. A key of
    another scheduler set at the same layer as ``kind``, or above it, stays and is refused
    (:func:`hpctrain.config.check_scheduler_keys` names the scheduler that has it)."""
    sched = merged.get("scheduler")
    kind = sched.get("kind", "local") if isinstance(sched, dict) else None
    if not isinstance(kind, str) or kind not in _registry.SCHEDULERS or "kind" not in sched:
        return
    own = toml_keys(scheduler_config_class(kind))
    for key in [k for k in sched if k not in own and k in SECTIONS["scheduler"]]:
        if rank(f"scheduler.{key}") < rank("scheduler.kind"):
            del sched[key]


def _without_deletes(value: Any) -> Any:
    """A copy of ``value`` without delete markers (an override ``key=`` that removes a
    key no lower layer set)."""
    if isinstance(value, dict):
        return {k: _without_deletes(v) for k, v in value.items() if v is not _DELETE}
    return copy.deepcopy(value)


def merge_layers(layers: Sequence[tuple], origins: MutableMapping[str, str],
                  job_file: Optional[str] = None) -> Dict[str, Any]:
    """Merge ``(data, where)`` layers, last wins; record in ``origins`` where each key set
    by a site layer came from (``where=None``: the job file; ``"overrides"``: origins
    already hold the override texts)."""
    merged: Dict[str, Any] = {}

    def record(key: str, where: Optional[str]) -> None:
        if where is None:
            for k in [k for k in origins if k == key or k.startswith(key + ".")]:
                if not origins[k].startswith("override "):
                    del origins[k]
            if job_file is not None and not origins.get(key, "").startswith("override "):
                origins[key] = job_file  # beats a site's origin recorded for a parent table
        elif where != "overrides" and not origins.get(key, "").startswith("override "):
            origins[key] = where

    for data, where in layers:
        for section, table in data.items():
            if not isinstance(table, dict) or section not in SECTIONS:
                merged[section] = _without_deletes(table)
                record(section, where)
                continue
            target = merged.setdefault(section, {})
            if not isinstance(target, dict):
                merged[section] = target = {}
            schema = SECTIONS[section]
            for key, value in table.items():
                dotted = f"{section}.{key}"
                kind = schema.get(key) if schema is not None else None
                if value is _DELETE:
                    target.pop(key, None)
                    record(dotted, where)
                elif isinstance(value, dict) and isinstance(target.get(key), dict) and (
                        schema is None or kind in MERGED_TABLES):
                    for sub, item in value.items():
                        if item is _DELETE:
                            target[key].pop(sub, None)
                        else:
                            target[key][sub] = _without_deletes(item)
                        record(f"{dotted}.{sub}", where)
                else:
                    target[key] = _without_deletes(value)
                    record(dotted, where)
    return merged


# --------------------------------------------------------------------------- overrides
_DELETE = object()


def _override_key(text: str, raw_key: str) -> List[str]:
    where = f"override {text!r}"
    if not raw_key:
        raise ConfigError("empty key; expected section.key=value, e.g. scaling.num_workers=8",
                          file=where)
    try:
        node: Any = _loads_toml(f"{raw_key} = 0", file=where)
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"malformed key {raw_key!r}; expected section.key=value",
                          file=where) from None
    path: List[str] = []
    while isinstance(node, dict) and len(node) == 1:
        (name, node), = node.items()
        path.append(name)
    if node != 0 or not path:
        raise ConfigError(f"malformed key {raw_key!r}; expected section.key=value", file=where)
    return path


def _override_value(text: str, raw: str) -> Any:
    if raw == "":
        return _DELETE
    try:
        return _loads_toml(f"v = {raw}", file=f"override {text!r}")["v"]
    except tomllib.TOMLDecodeError:
        if raw[:1] in "[{\"'":
            raise ConfigError(f"value {raw} is not a valid TOML value",
                              file=f"override {text!r}",
                              hint='quote strings: run.name="x"; arrays: config.sizes=[1, 2]'
                              ) from None
        return raw  # a bare word: a string


def _apply_overrides(data: Mapping[str, Any], overrides: Sequence[str],
                     origins: MutableMapping[str, str], *,
                     keep_deletes: bool = False) -> Dict[str, Any]:
    result = copy.deepcopy(dict(data))
    problems: List[ConfigError] = []  # every bad override, reported together
    for text in overrides:
        try:
            _apply_override(result, text, origins, keep_deletes)
        except ConfigError as e:
            problems.append(e)
    if problems:
        raise one_or_all(problems)
    return result


def _apply_override(result: Dict[str, Any], text: str, origins: MutableMapping[str, str],
                    keep_deletes: bool) -> None:
    """Apply one ``section.key=value`` to ``result``."""
    where = f"override {text!r}"
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError("expected section.key=value, e.g. scaling.num_workers=8",
                          file=where)
    raw_key, _, raw_value = text.partition("=")
    path = _override_key(text, raw_key.strip())
    ctx = Ctx(where)
    section, dotted = path[0], ".".join(path)
    if path == ["site"]:
        value = _override_value(text, raw_value.strip())
        if value is _DELETE:
            result["site"] = None
        else:
            result["site"] = raw_value.strip() if not isinstance(value, str) else value
        origins["site"] = where
        return
    if section not in SECTIONS:
        raise unknown_section(ctx, section)
    if len(path) < 2:
        raise ctx.error(section, "expected section.key=value, not a whole section")
    value = _override_value(text, raw_value.strip())
    schema = SECTIONS[section]
    if schema is not None:
        key = path[1]
        if key not in schema:
            raise unknown_key(ctx, section, key)
        if len(path) > (3 if schema[key] in MERGED_TABLES else 2):
            raise ctx.error(dotted, f"{section}.{key} is not a table")
        if schema[key] in ("str", "walltime", "memory") and len(path) == 2 and isinstance(
                value, (bool, int, float, _dt.date, _dt.time)):
            value = raw_value.strip()  # run.name=2024 means the string "2024"
    node: Any = result
    for i, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ctx.error(".".join(path[: i + 1]),
                            f"cannot set {dotted}: {_show(child)} is not a table")
        node = child
    if value is _DELETE and not keep_deletes:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    origins[dotted] = where


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> Dict[str, Any]:
    """Return a copy of ``data`` with each ``"section.key=value"`` set.

    The value is read as a TOML value (``8``, ``true``, ``0.1``, ``[1, 2]``, ``"x"``); a
    bare word is a string, and an empty value (``run.name=``) removes the key so the
    default applies.
    """
    return _apply_overrides(data, overrides, {})

