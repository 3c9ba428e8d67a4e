"""Site configs: what one HPC center (or one cluster) needs, as data.

A site config is a TOML file named ``<name>.toml`` with:

* ``[site]``: ``name`` (the file stem), ``description``, ``scheduler`` (``slurm``/``pbs``),
  ``docs`` (the center's job-submission page);
* ``[limits]``: checked before anything is submitted — ``max_walltime``, ``max_nodes``,
  ``cpus_per_node``, ``gpus_per_node`` (0: CPU-only), ``mem_per_node``,
  ``required_directives``, ``max_array_size`` (sweeps: larger ones are split),
  ``min_nodes`` (a smaller request is refused: e.g. a queue that only takes big jobs),
  ``shared_paths`` (paths every node sees although they look node-local: see
  :mod:`hpctrain.rundir.checks`); and the numeric keys per ``[limits.partitions.<name>]`` (Slurm partition or PBS queue),
  ``[limits.qos.<name>]`` and ``[limits.constraints.<name>]``;
* any job-spec section (``[scheduler]``, ``[scaling]``, ``[env]``, ``[setup]``, ``[run]``,
  backend sections): a layer under the user's job file.

Sites are looked up, first match winning, in each directory of ``$HPCTRAIN_SITE_PATH``
(``:``-separated), then ``/etc/hpctrain/sites/`` (a center-wide install), then the
``site-configs/`` hpctrain ships (:mod:`hpctrain.common.shipped`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any, Callable, Dict, List, Optional, Tuple

from .common.registry import backend_names, describe, scheduler_names
from .common.shipped import shipped_dir
from .common.tomlfile import read_toml
from .errors import ConfigError
from .units import UnitError, format_walltime, parse_memory, parse_walltime

SITE_PATH_ENV = "HPCTRAIN_SITE_PATH"
SYSTEM_SITE_DIR = "/etc/hpctrain/sites"
PACKAGE_SITE_DIR = shipped_dir("site-configs")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SITE_KEYS = {"name": str, "description": str, "scheduler": str, "docs": str}
_LIMIT_KEYS = {"max_walltime": "walltime", "max_nodes": "int", "min_nodes": "int",
               "cpus_per_node": "int",
               "gpus_per_node": "int", "mem_per_node": "memory",
               # job arrays (sweeps): indices 0 … max_array_size - 1 (Slurm's MaxArraySize,
               # PBS's max_array_size); a larger sweep is split into several arrays
               "max_array_size": "int",
               # the scheduler.account a job must give, e.g. "<project>@h100" (Jean Zay):
               # <word> stands for letters, digits, '_', '-' and '.'; the rest is literal
               "account_form": "form"}
_SELECTORS = ("partitions", "qos", "constraints")
_SITE_SECTIONS = ("scheduler", "scaling", "env", "setup", "container", "run", "checkpoint",
                  "failure")


def site_sections() -> Tuple[str, ...]:
    """Job-spec sections a site may set (not the entry point, the run's name or its
    config): those above and every registered backend's section."""

    return _SITE_SECTIONS + backend_names()


def search_path() -> List[str]:
    """Directories searched for ``<name>.toml``, first match wins."""
    extra = [d for d in os.environ.get(SITE_PATH_ENV, "").split(os.pathsep) if d]
    return extra + [SYSTEM_SITE_DIR, PACKAGE_SITE_DIR]


@dataclass
class Limits:
    """Resource limits of one site, with per-partition/QOS/constraint refinements."""

    base: Dict[str, Any] = field(default_factory=dict)
    partitions: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    qos: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    constraints: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    required_directives: List[str] = field(default_factory=list)
    #: Paths shared by every node although they look node-local (``[limits] shared_paths``).
    shared_paths: List[str] = field(default_factory=list)

    def effective(self, *, partition: Optional[str], qos: Optional[str],
                  constraint: Optional[str]) -> Tuple[Dict[str, Any], Dict[str, str]]:
        """The limits that apply to a request, and which table each came from
        (``"site"``, ``"partition 'gpu'"``, …).

        Per-node sizes: a constraint's beat the partition's, which beat the base.
        ``max_walltime`` and ``max_nodes``: the smallest of every table that applies;
        ``min_nodes``: the largest.
        """
        tables = [("site", self.base)]
        if partition in self.partitions:
            tables.append((f"partition {partition!r}", self.partitions[partition]))
        if constraint in self.constraints:
            tables.append((f"constraint {constraint!r}", self.constraints[constraint]))
        if qos in self.qos:
            tables.append((f"qos {qos!r}", self.qos[qos]))
        out: Dict[str, Any] = {}
        source: Dict[str, str] = {}
        for where, table in tables:
            for key, value in table.items():
                if key in ("max_walltime", "max_nodes") and key in out:
                    if _limit_value(key, value) >= _limit_value(key, out[key]):
                        continue
                if key == "min_nodes" and key in out and value <= out[key]:
                    continue
                out[key] = value
                source[key] = where
        return out, source


def _limit_value(key: str, value: Any) -> int:
    if key == "max_walltime":

        return parse_walltime(value)
    return int(value)


@dataclass
class Site:
    name: str
    path: str
    description: str = ""
    scheduler: str = ""               # a batch scheduler's name (hpctrain.schedulers)
    docs: str = ""
    limits: Limits = field(default_factory=Limits)
    #: The job-spec sections this site sets (a layer under the job file).
    layer: Dict[str, Any] = field(default_factory=dict)


#: The site name that means "no site config: this machine, on purpose" (``site="local"``
#: in Python, ``site = "local"`` in a job file): it silences the login-node warning.
LOCAL_SITE = "local"


def find_site(name: str, *, key: str = "site", file: Optional[str] = None) -> str:
    """Path of the site config ``name``; a clear error listing the known ones if none."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ConfigError(f"{key}: expected a site name (letters, digits, '.', '_', '-'), "
                          f"got {name!r}", file=file, hint="`hpctrain sites` lists them")
    for directory in search_path():
        path = os.path.join(directory, f"{name}.toml")
        if os.path.isfile(path):
            return path
    known = sorted(available_sites())

    close = get_close_matches(name, known, n=1)
    hint = (f"did you mean {close[0]!r}? " if close else "") + \
        f"known sites: {', '.join(known)}; add your own in ${SITE_PATH_ENV} or {SYSTEM_SITE_DIR}"
    raise ConfigError(f"{key}: unknown site {name!r}", file=file, hint=hint)


def available_sites() -> Dict[str, str]:
    """``{name: path}`` of every site config on the search path (first match wins)."""
    found: Dict[str, str] = {}
    for directory in search_path():
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".toml") and _NAME.match(entry[:-5]):
                found.setdefault(entry[:-5], os.path.join(directory, entry))
    return found


def load_site(name: str, *, key: str = "site", file: Optional[str] = None) -> Site:
    """Find the site config ``name`` and check its own tables ([site], [limits]); its
    settings are checked against the job spec's schema by :func:`hpctrain.spec.load_site`."""
    return load_site_file(find_site(name, key=key, file=file))


def load_site_file(path: str) -> Site:
    """Read one site config and check its own tables; errors name this file and the key."""
    data = read_toml(path)  # one TOML reader, one set of error messages
    stem = os.path.splitext(os.path.basename(path))[0]

    def err(k: str, message: str, hint: Optional[str] = None) -> ConfigError:
        return ConfigError(f"{k}: {message}", file=path, hint=hint)

    meta = data.pop("site", {})
    if not isinstance(meta, dict):
        raise err("site", "expected a table ([site] section)")
    for k, v in meta.items():
        if k not in _SITE_KEYS:
            raise err(f"site.{k}", "unknown key in [site]", "valid keys: " + ", ".join(_SITE_KEYS))
        if not isinstance(v, str):
            raise err(f"site.{k}", f"expected a string, got {v!r}")
    if meta.get("name", stem) != stem:
        raise err("site.name", f"expected {stem!r} (the file's name), got {meta['name']!r}")

    batch = scheduler_names(batch_only=True)
    scheduler = meta.get("scheduler", batch[0])  # the first registered batch scheduler
    if scheduler not in batch:
        raise err("site.scheduler", f"expected {describe(batch)}, got {scheduler!r}")
    limits = _parse_limits(data.pop("limits", {}), err)
    for section in data:
        if section not in site_sections():
            raise err(section, "a site config cannot set this section",
                      "site configs hold [site], [limits] and " +
                      ", ".join(f"[{s}]" for s in site_sections()))
    layer = dict(data)
    layer.setdefault("scheduler", {})
    if not isinstance(layer["scheduler"], dict):
        raise err("scheduler", "expected a table ([scheduler] section)")
    layer["scheduler"].setdefault("kind", scheduler)
    return Site(name=stem, path=path, description=meta.get("description", ""),
                scheduler=scheduler, docs=meta.get("docs", ""), limits=limits, layer=layer)


def _parse_limits(table: Any, err) -> Limits:
    if not isinstance(table, dict):
        raise err("limits", "expected a table ([limits] section)")

    def one(where: str, t: Any, allow_required: bool) -> Dict[str, Any]:

        if not isinstance(t, dict):
            raise err(where, "expected a table")
        out: Dict[str, Any] = {}
        for k, v in t.items():
            if k == "required_directives" and allow_required:
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise err(f"{where}.{k}", "expected an array of directive names")
                continue
            if k == "shared_paths" and allow_required:
                if not isinstance(v, list) or not all(isinstance(x, str) and x.startswith("/")
                                                      for x in v):
                    raise err(f"{where}.{k}", f"expected an array of absolute paths, got {v!r}",
                              'e.g. shared_paths = ["/tmp"] where /tmp is one filesystem '
                              "for every node")
                continue
            if k in _SELECTORS and allow_required:
                continue
            kind = _LIMIT_KEYS.get(k)
            if kind is None:
                raise err(f"{where}.{k}", "unknown limit",
                          "valid limits: " + ", ".join(_LIMIT_KEYS))
            if kind == "int":
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise err(f"{where}.{k}", f"expected an integer ≥ 0, got {v!r}")
            elif kind == "form":
                if not isinstance(v, str) or not v.strip():
                    raise err(f"{where}.{k}", f"expected a string such as "
                              f"\"<project>@h100\", got {v!r}")
            else:
                try:
                    (parse_walltime if kind == "walltime" else parse_memory)(v)
                except UnitError as e:
                    raise err(f"{where}.{k}", str(e), e.hint) from None
            out[k] = v
        return out

    limits = Limits(base=one("limits", table, True),
                    required_directives=list(table.get("required_directives", [])),
                    shared_paths=list(table.get("shared_paths", [])))
    for selector in _SELECTORS:
        group = table.get(selector, {})
        if not isinstance(group, dict):
            raise err(f"limits.{selector}", "expected a table of names")
        setattr(limits, selector, {n: one(f"limits.{selector}.{n}", t, False)
                                   for n, t in group.items()})
    return limits


def derive_nodes(spec) -> None:
    """Spread a GPU job over as many nodes as its GPUs need: ``num_workers = 8`` with one
    GPU each on a site whose nodes have 4 GPUs becomes 2 nodes × 4 workers (as Ray places
    8 one-GPU workers on two 4-GPU machines). Only when the job sets neither
    ``num_nodes`` nor ``workers_per_node``; a count that does not fill whole nodes, or a
    worker needing more GPUs than a node has, is an error naming the key."""
    site: Optional[Site] = spec.site_config
    scaling = spec.scaling
    if site is None or spec.scheduler.kind == "local" or scaling.num_nodes or \
            scaling.workers_per_node or not scaling.gpus_each:
        return
    sched = spec.scheduler
    limits, source = site.limits.effective(**sched.selectors())
    have = limits.get("gpus_per_node")
    if not have or scaling.gpus_each * scaling.num_workers <= have:
        return  # CPU-only nodes (check_limits says so) or one node is enough
    where = source.get("gpus_per_node", "site")
    of = f"site {site.name!r}" if where == "site" else f"{where} of site {site.name!r}"
    hint = ("set scaling.num_nodes and scaling.workers_per_node yourself; limits of "
            f"{of} ({site.path})")
    if scaling.gpus_each > have:
        raise ConfigError(f"scaling.gpus_per_worker: each worker asks for "
                          f"{scaling.gpus_each} GPUs but nodes of {of} have {have}",
                          file=spec.where("scaling.gpus_per_worker"), hint=hint)
    fit = have // scaling.gpus_each                    # workers one node can hold
    nodes = -(-scaling.num_workers // fit)             # the fewest nodes that hold them
    if scaling.num_workers % nodes:
        raise ConfigError(
            f"scaling.num_workers: {scaling.num_workers} workers × {scaling.gpus_each} GPU(s) "
            f"need {nodes} nodes of {have} GPUs ({of}), but do not spread evenly over "
            f"{nodes} nodes", file=spec.where("scaling.num_workers"),
            hint=f"use a multiple of {nodes} workers (up to {nodes * fit}), or " + hint)
    scaling.workers_per_node = scaling.num_workers // nodes


def check_limits(spec) -> None:
    """Refuse a request the site cannot run, before anything is written or submitted:
    a walltime over the limit, too many nodes, GPUs on a CPU partition, more GPUs, CPUs
    or memory per node than a node has, a missing mandatory directive, an unknown
    partition. Errors name the key, the file that set it and the limit."""
    site: Optional[Site] = spec.site_config
    if site is None:
        return

    sched, scaling = spec.scheduler, spec.scaling
    lim = site.limits
    _check_partition(spec, site)
    limits, source = lim.effective(**sched.selectors())

    def of(key: str) -> str:
        where = source.get(key, "site")
        return f"site {site.name!r}" if where == "site" else where

    ref = f"site {site.name!r} ({site.path})"
    # which key to blame: the one the user set (num_nodes, else the per-node count)
    nodes_key = "scaling.num_nodes" if scaling.num_nodes else "scaling.num_workers"
    per_node_key = ("scaling.workers_per_node" if scaling.workers_per_node
                    else "scaling.num_workers")

    def fail(key: str, message: str, hint: str) -> ConfigError:
        return ConfigError(f"{key}: {message}", file=spec.where(key), hint=f"{hint}; limits of {ref}")

    _check_walltime_limit(sched, limits, of, fail)
    nodes, per_node = scaling.nodes, scaling.per_node
    _check_node_limits(nodes, nodes_key, limits, of, fail)
    _check_per_node_limits(scaling, per_node, per_node_key, limits, of, fail)
    form = limits.get("account_form")
    if form:
        _check_account(spec, form, of("account_form"), ref)
    _check_required_directives(spec, site)


#: ``of(limit key)``: who set that limit; ``fail(key, message, hint)``: the error.
_Of = Callable[[str], str]
_Fail = Callable[[str, str, str], ConfigError]


def _check_partition(spec: Any, site: Site) -> None:
    """Refuse a partition (or queue) the site does not have, naming the closest one."""
    sched = spec.scheduler
    partition = sched.queue_name  # Slurm's partition, PBS's queue…
    part_key = f"scheduler.{sched.queue_option}"
    lim = site.limits
    if partition and lim.partitions and partition not in lim.partitions:
        close = get_close_matches(partition, list(lim.partitions), n=1)
        raise ConfigError(
            f"{part_key}: site {site.name!r} has no {sched.queue_option} {partition!r}",
            file=spec.where(part_key),
            hint=(f"did you mean {close[0]!r}? " if close else "") +
                 f"known: {', '.join(sorted(lim.partitions))} ({site.path})")


def _check_walltime_limit(sched: Any, limits: Dict[str, Any], of: _Of, fail: _Fail) -> None:
    """Refuse a walltime over ``max_walltime``."""
    if sched.time is not None and "max_walltime" in limits:
        asked, most = parse_walltime(sched.time), parse_walltime(limits["max_walltime"])
        if asked > most:
            raise fail("scheduler.time",
                       f"walltime {sched.time} ({format_walltime(asked)}) is over the limit of "
                       f"{limits['max_walltime']} ({format_walltime(most)}) for "
                       f"{of('max_walltime')}",
                       "ask for less time, or pick a partition/qos with a longer limit")


def _check_node_limits(nodes: int, nodes_key: str, limits: Dict[str, Any], of: _Of,
                       fail: _Fail) -> None:
    """Refuse more nodes than ``max_nodes`` or fewer than ``min_nodes``."""
    if "max_nodes" in limits and limits["max_nodes"] and nodes > limits["max_nodes"]:
        raise fail(nodes_key, f"{nodes} nodes requested, {of('max_nodes')} allows at most "
                   f"{limits['max_nodes']}", "use fewer nodes")
    if limits.get("min_nodes") and nodes < limits["min_nodes"]:
        raise fail(nodes_key, f"{nodes} node(s) requested, but {of('min_nodes')} takes jobs "
                   f"of {limits['min_nodes']} nodes or more",
                   "ask for more nodes, or pick a queue/partition for small jobs")


def _check_per_node_limits(scaling: Any, per_node: int, per_node_key: str, limits: Dict[str, Any],
                           of: _Of, fail: _Fail) -> None:
    """Refuse more GPUs, CPUs or memory per node than a node of the site has."""
    gpus = scaling.gpus_each * per_node
    if "gpus_per_node" in limits:
        have = limits["gpus_per_node"]
        if gpus and have == 0:
            raise fail("scaling.use_gpu", f"GPUs requested ({scaling.gpus_each} per worker) "
                       f"but {of('gpus_per_node')} has CPU-only nodes",
                       "set use_gpu = false, or pick a GPU partition/constraint")
        if gpus > have:
            raise fail(per_node_key,
                       f"{per_node} workers × {scaling.gpus_each} GPUs = {gpus} GPUs per node, "
                       f"but nodes of {of('gpus_per_node')} have {have}",
                       "use fewer workers per node and more nodes")
    cpus = (scaling.cpus_each or 0) * per_node
    if cpus and "cpus_per_node" in limits and cpus > limits["cpus_per_node"]:
        raise fail("scaling.cpus_per_worker",
                   f"{per_node} workers × {scaling.cpus_each} CPUs = {cpus} CPUs per node, but "
                   f"nodes of {of('cpus_per_node')} have {limits['cpus_per_node']}",
                   "lower cpus_per_worker or workers_per_node")
    if scaling.mem_per_worker and "mem_per_node" in limits:
        need = parse_memory(scaling.mem_per_worker) * per_node
        have_mem = parse_memory(limits["mem_per_node"])
        if need > have_mem:
            raise fail("scaling.mem_per_worker",
                       f"{per_node} workers × {scaling.mem_per_worker} is more than the "
                       f"{limits['mem_per_node']} of a node of {of('mem_per_node')}",
                       "ask for less memory")


def _check_required_directives(spec: Any, site: Site) -> None:
    """Refuse a job that leaves out a directive the site requires."""
    for name in site.limits.required_directives:
        if spec.scheduler.directives.get(name) in (None, ""):
            raise ConfigError(
                f"scheduler.directives.{name}: site {site.name!r} requires this directive",
                file=spec.where(f"scheduler.directives.{name}"),
                hint=f"set it in the job file, e.g. [scheduler.directives] {name} = \"...\" "
                     f"(see {site.docs or site.path})")


def account_regex(form: str) -> "re.Pattern[str]":
    """``"<project>@h100"`` → a pattern matching ``abc@h100``, not ``abc@v100``.

    >>> bool(account_regex("<project>@h100").fullmatch("xyz1@h100"))
    True
    >>> bool(account_regex("<project>@h100").fullmatch("xyz1"))
    False
    """
    parts = re.split(r"<[^<>]*>", form)
    return re.compile(r"[A-Za-z0-9_.-]+".join(re.escape(p) for p in parts))


def _check_account(spec, form: str, of: str, ref: str) -> None:
    account = spec.scheduler.account
    if account is None:
        raise ConfigError(f"scheduler.account: {of} requires an account of the form {form}",
                          file=spec.where("scheduler.account") or spec.source,
                          hint=f"--set scheduler.account={form}, or account = \"...\" in "
                               f"your user config (`hpctrain sites` shows it); limits of {ref}")
    if not account_regex(form).fullmatch(account):
        raise ConfigError(f"scheduler.account: {account!r} is not of the form {form} that "
                          f"{of} requires", file=spec.where("scheduler.account"),
                          hint=f"the project's account for this kind of node, e.g. "
                               f"{form}; limits of {ref}")
