"""Defaults outside the job file: the center's ``/etc/hpctrain/config.toml``, the user's
``~/.config/hpctrain/config.toml``, ``$HPCTRAIN_SITE`` and ``$HPCTRAIN_STORAGE_PATH``.

```toml
# ~/.config/hpctrain/config.toml  ($XDG_CONFIG_HOME/hpctrain/config.toml), and the same
# keys in the center config /etc/hpctrain/config.toml ($HPCTRAIN_CENTER_CONFIG)
site = "perlmutter"                    # the site of job files that name none
account = "m1234"                      # scheduler.account of every batch job
storage_path = "$SCRATCH/hpctrain_runs"  # where run directories go
share = "group"                        # your project group may read your runs (0750/0640)
```

Where each value comes from, most specific first:

* the site: ``--site`` > the job file's ``site = "..."`` > ``$HPCTRAIN_SITE`` > the
  user config's ``site`` > the center config's ``site`` (job files only: a Python
  ``Trainer`` runs where its own ``scheduler``/``site`` say, locally by default);
* the account and the storage path: ``--set`` > the job file > the user config > the
  site config > the center config > hpctrain's defaults. The user config sits *above*
  the site config (as git's ``~/.gitconfig`` sits above ``/etc/gitconfig``): a
  center's site config holds defaults for everyone on one cluster, the user config this
  user's choices. The center config is the most general file of all (every cluster of
  the center, every user), so it sits *below* the site config: a cluster's own
  ``[run] storage_path`` beats the center-wide one. ``$HPCTRAIN_STORAGE_PATH``, when set,
  replaces the user config's ``storage_path`` and the center config's (a variable beats a
  file) as a default: it is not written in the spec, and a job file's or its site's
  storage path beats it.
* without a job file (the Python API, and the commands that find a run by its name:
  ``results``, ``status``, ``logs``, ``cancel``, ``list``) the storage path is found in
  the same order: ``$HPCTRAIN_STORAGE_PATH``, the user config's, the default site's
  (``$HPCTRAIN_SITE``, the user's or the center's ``site``) ``[run] storage_path``, the
  center config's, else ``~/hpctrain_results``; a run named on the command line is
  looked for in each of them, in this order.

The center config is read through the checked loader (:mod:`hpctrain.common.trust`):
it must be a regular file owned by root (or by this user), writable by nobody else, in a
directory nobody else can write; anything else is refused before it is read.

``hpctrain sites`` prints each value with the file (or variable) it came from.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .common.tomlfile import did_you_mean, kind_name, loads_toml, read_toml, show_value
from .errors import ConfigError, UnsafePathError
from .common.registry import uri_scheme
from .common.trust import SHARES, read_trusted
from .sites import LOCAL_SITE, find_site, load_site

SITE_ENV = "HPCTRAIN_SITE"
STORAGE_ENV = "HPCTRAIN_STORAGE_PATH"
CENTER_ENV = "HPCTRAIN_CENTER_CONFIG"
CENTER_CONFIG = "/etc/hpctrain/config.toml"
#: key → what it sets in a job spec
KEYS = {"site": "site", "account": "scheduler.account", "storage_path": "run.storage_path",
        "share": "run.share"}


def config_path() -> str:
    """``$XDG_CONFIG_HOME/hpctrain/config.toml`` (``~/.config`` when unset or empty, as
    the XDG Base Directory spec says)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".config")
    return os.path.join(base, "hpctrain", "config.toml")


def center_config_path() -> str:
    """``$HPCTRAIN_CENTER_CONFIG``, else ``/etc/hpctrain/config.toml``."""
    return os.environ.get(CENTER_ENV) or CENTER_CONFIG


@dataclass
class UserDefaults:
    """The user's defaults, and where each came from (a file path or ``$VARIABLE``)."""

    values: Dict[str, str] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> Optional[str]:
        return self.values.get(key)

    def layer(self, *, storage: bool = True) -> list:
        """``[(job-spec tables, where)]`` layers for account, storage path and share: this
        file's values (and the variables'), one layer per source, so that each value's
        origin is its own file or variable."""
        layers: Dict[str, Dict[str, Any]] = {}
        for key in ("account", "storage_path", "share"):
            if key not in self.values or key == "storage_path" and (
                    not storage or self.sources[key].startswith("$")):
                continue  # ($HPCTRAIN_STORAGE_PATH is a default, not written in the spec)
            section, _, name = KEYS[key].partition(".")
            layers.setdefault(self.sources[key], {}).setdefault(section, {})[name] = \
                self.values[key]
        return [(data, where) for where, data in layers.items()]


def load_user_defaults() -> UserDefaults:
    """Read and check the user config (absent: no defaults), then the variables."""
    path = config_path()
    out = _read_defaults(path, read_toml(path)) if os.path.exists(path) else UserDefaults()
    site = os.environ.get(SITE_ENV)
    if site:

        find_site(site, key="site", file=f"${SITE_ENV}")
        out.values["site"], out.sources["site"] = site, f"${SITE_ENV}"
    storage = os.environ.get(STORAGE_ENV)
    if storage:
        out.values["storage_path"], out.sources["storage_path"] = storage, f"${STORAGE_ENV}"
    return out


def load_center_defaults() -> UserDefaults:
    """Read and check the center config (absent: no defaults): a file every user's
    hpctrain reads, so read only when root (or this user) owns it and nobody else can
    write it or its directory."""
    path = center_config_path()
    try:
        data = read_trusted(path, what="the center config")
    except FileNotFoundError:
        return UserDefaults()
    except UnsafePathError as e:
        raise ConfigError(f"the center config is refused: {e.message}", file=path,
                          hint=f"every user's hpctrain reads it, so it must be owned by root "
                               f"and writable by nobody else: chown root: {path} && "
                               f"chmod 644 {path} (or ask your center's support)") from None
    except IsADirectoryError:
        raise ConfigError("expected a TOML file, got a directory", file=path) from None
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise ConfigError(f"invalid TOML: not UTF-8 text ({e.reason} at byte {e.start})",
                          file=path) from None
    try:
        table = loads_toml(text, file=path)
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise ConfigError(f"invalid TOML: {e}", file=path) from None
    return _read_defaults(path, table, what="the center config")


def _read_defaults(path: str, data: Dict[str, Any], *,
                   what: str = "the user config") -> UserDefaults:
    """Check the keys of one defaults file (user or center) and keep them with ``path``."""
    out = UserDefaults()
    for key, value in data.items():
        if key not in KEYS:
            hint = did_you_mean(key, list(KEYS)) or ""
            raise ConfigError(f"{key}: unknown key in {what}", file=path,
                              hint=(hint + " " if hint else "") +
                              "valid keys: " + ", ".join(KEYS))
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{key}: expected a non-empty string, got {show_value(value)} "
                              f"({kind_name(value)})", file=path,
                              hint=f'e.g. {key} = "{_EXAMPLES[key]}"')
        out.values[key] = value
        out.sources[key] = path
    if "site" in out.values:

        find_site(out.values["site"], key="site", file=path)
    if "storage_path" in out.values:
        out.values["storage_path"] = _absolute(out.values["storage_path"], path)
    if out.values.get("share", "private") not in SHARES:
        raise ConfigError(f"share: expected one of {', '.join(map(repr, SHARES))}, got "
                          f"{out.values['share']!r}", file=path,
                          hint='share = "group" lets your project group read your runs')
    return out


def default_site(user: Optional[UserDefaults] = None,
                 center: Optional[UserDefaults] = None) -> Tuple[Optional[str], Optional[str]]:
    """``(site, where it came from)`` of a job file that names none: ``$HPCTRAIN_SITE``,
    the user config's, the center config's, else ``(None, None)``."""
    for defaults in (user or load_user_defaults(), center or load_center_defaults()):
        if defaults.get("site"):
            return defaults.values["site"], defaults.sources["site"]
    return None, None


def storage_defaults() -> List[Tuple[str, str]]:
    """``[(storage path, where it came from)]`` without a job file, first wins (module
    docstring): ``$HPCTRAIN_STORAGE_PATH`` or the user config's, the default site's
    ``[run] storage_path``, the center config's. A run is looked up by name in each."""
    user, center = load_user_defaults(), load_center_defaults()
    out = []
    if "storage_path" in user.values:
        out.append((user.values["storage_path"], user.sources["storage_path"]))
    name, _ = default_site(user, center)
    if name is not None and name != LOCAL_SITE:  # ("local": no site config)
        site = load_site(name)
        run = site.layer.get("run")
        value = run.get("storage_path") if isinstance(run, dict) else None
        if isinstance(value, str) and value.strip():
            out.append((_absolute(value, site.path, key="run.storage_path",
                                  base=os.path.dirname(site.path)), site.path))
    if "storage_path" in center.values:
        out.append((center.values["storage_path"], center.sources["storage_path"]))
    return out


def storage_default() -> Tuple[Optional[str], Optional[str]]:
    """The first of :func:`storage_defaults`, or ``(None, None)`` (hpctrain's own
    default)."""
    found = storage_defaults()
    return found[0] if found else (None, None)


_EXAMPLES = {"site": "perlmutter", "account": "m1234", "storage_path": "$SCRATCH/hpctrain_runs",
             "share": "group"}


def _absolute(value: str, path: str, *, key: str = "storage_path",
              base: Optional[str] = None) -> str:
    """``value`` with ``~`` and ``$VARS`` expanded; a relative path is an error (a site
    config's: relative to its ``base`` directory, as the job spec reads it)."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    if "$" in expanded:
        raise ConfigError(f"{key}: an environment variable in {value!r} is not set",
                          file=path, hint="export it, or give the path itself")
    if uri_scheme(expanded) is not None:  # a URI (file:// too), as it is
        return expanded
    if base is not None:
        return os.path.abspath(os.path.join(base, expanded))
    if not os.path.isabs(expanded):
        raise ConfigError(f"{key}: expected an absolute path (or ~/…, $VAR/…), got "
                          f"{value!r}", file=path, hint='e.g. storage_path = "$SCRATCH/runs"')
    return expanded


def default_share() -> Optional[str]:
    """The user config's ``share`` (who besides the user reads new run directories), else
    the center config's, or None."""
    return load_user_defaults().values.get("share") or load_center_defaults().get("share")


def default_storage_path() -> Optional[str]:
    """The storage path without a job file (:func:`storage_default`), else None."""
    return storage_default()[0]
