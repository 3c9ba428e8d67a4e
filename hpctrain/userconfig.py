"""A user's own defaults: ``~/.config/hpctrain/config.toml`` and ``$HPCTRAIN_SITE``.

```toml
# ~/.config/hpctrain/config.toml  ($XDG_CONFIG_HOME/hpctrain/config.toml)
site = "perlmutter"                    # the site of job files that name none
account = "m1234"                      # scheduler.account of every batch job
storage_path = "$SCRATCH/hpctrain_runs"  # where run directories go
share = "group"                        # your project group may read your runs (0750/0640)
```

Where each value comes from, most specific first:

* the site: ``--site`` > the job file's ``site = "..."`` > ``$HPCTRAIN_SITE`` > the
  user config's ``site`` (job files only: a Python ``Trainer`` runs where its own
  ``scheduler``/``site`` say, locally by default);
* the account and the storage path: ``--set`` > the job file > the user config > the
  site config > hpctrain's defaults. The user config sits *above* the site config (as
  git's ``~/.gitconfig`` sits above ``/etc/gitconfig``): a center's site config holds
  defaults for everyone, the user config this user's choices on this machine.
  ``$HPCTRAIN_STORAGE_PATH``, when set, replaces the user config's ``storage_path``
  (a variable beats a file); without a job file (the Python API) the storage path is
  ``$HPCTRAIN_STORAGE_PATH``, else the user config's, else ``~/hpctrain_results``.

``hpctrain sites`` prints each value with the file (or variable) it came from.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from ._internal.base.tomlfile import did_you_mean, kind_name, read_toml, show_value
from .errors import ConfigError
from ._internal.base.trust import SHARES
from .sites import find_site

SITE_ENV = "HPCTRAIN_SITE"
STORAGE_ENV = "HPCTRAIN_STORAGE_PATH"
#: key → what it sets in a job spec
KEYS = {"site": "site", "account": "scheduler.account", "storage_path": "run.storage_path",
        "share": "run.share"}


def config_path() -> str:
    """``$XDG_CONFIG_HOME/hpctrain/config.toml`` (``~/.config`` when unset or empty, as
    the XDG Base Directory spec says)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".config")
    return os.path.join(base, "hpctrain", "config.toml")


@dataclass
class UserDefaults:
    """The user's defaults, and where each came from (a file path or ``$VARIABLE``)."""

    values: Dict[str, str] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> Optional[str]:
        return self.values.get(key)

    def layer(self, *, storage: bool = True) -> list:
        """``[(job-spec tables, where)]`` layers for account and storage path: the user
        config's values (a layer of its own, between site config and job file)."""
        data: Dict[str, Any] = {}
        if "account" in self.values:
            data["scheduler"] = {"account": self.values["account"]}
        if storage and "storage_path" in self.values and \
                not self.sources["storage_path"].startswith("$"):
            data["run"] = {"storage_path": self.values["storage_path"]}
        if "share" in self.values:
            data.setdefault("run", {})["share"] = self.values["share"]
        return [(data, self.sources.get("account") or self.sources.get("storage_path")
                 or self.sources.get("share"))] if data else []


def load_user_defaults() -> UserDefaults:
    """Read and check the user config (absent: no defaults), then the variables."""
    out = UserDefaults()
    path = config_path()
    if os.path.exists(path):
        data = read_toml(path)
        for key, value in data.items():
            if key not in KEYS:
                hint = did_you_mean(key, list(KEYS)) or ""
                raise ConfigError(f"{key}: unknown key in the user config", file=path,
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
    site = os.environ.get(SITE_ENV)
    if site:

        find_site(site, key="site", file=f"${SITE_ENV}")
        out.values["site"], out.sources["site"] = site, f"${SITE_ENV}"
    storage = os.environ.get(STORAGE_ENV)
    if storage:
        out.values["storage_path"], out.sources["storage_path"] = storage, f"${STORAGE_ENV}"
    return out


_EXAMPLES = {"site": "perlmutter", "account": "m1234", "storage_path": "$SCRATCH/hpctrain_runs",
             "share": "group"}


def _absolute(value: str, path: str) -> str:
    expanded = os.path.expandvars(os.path.expanduser(value))
    if "$" in expanded:
        raise ConfigError(f"storage_path: an environment variable in {value!r} is not set",
                          file=path, hint="export it, or give the path itself")
    if "://" in expanded:
        return expanded
    if not os.path.isabs(expanded):
        raise ConfigError(f"storage_path: expected an absolute path (or ~/…, $VAR/…), got "
                          f"{value!r}", file=path, hint='e.g. storage_path = "$SCRATCH/runs"')
    return expanded


def default_share() -> Optional[str]:
    """The user config's ``share`` (who besides the user reads new run directories), or
    None."""
    return load_user_defaults().values.get("share")


def default_storage_path() -> Optional[str]:
    """``$HPCTRAIN_STORAGE_PATH``, else the user config's storage path, else None."""
    return load_user_defaults().values.get("storage_path")
