"""Is a storage path usable, and do all the nodes of a job see it?

Two checks made before anything is started or submitted:

* :func:`ensure_storage_dir` creates the storage directory (``run.storage_path``) and
  turns what can go wrong (a file in the way, a read-only or missing mount, no
  permission) into a :class:`~hpctrain.errors.ConfigError` naming the key and the file
  that set it, with a HINT, instead of a traceback.
* :func:`check_shared_storage` refuses a multi-node job whose run directory is on a
  filesystem only one node sees (tmpfs, ``/tmp``, a local disk): ranks on the other
  nodes would not find the run's payload, and checkpoints would be split across
  machines. The filesystem type comes from ``/proc/self/mountinfo`` (the mount that
  holds the path: the longest mount point that is a prefix of it). A site config whose
  local-looking paths are in fact shared (or one machine playing several nodes, as
  hpctrain's test cluster) lists them in ``[limits] shared_paths``.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import List, Optional, Tuple

from hpctrain.config import DEFAULT_STORAGE_ENV
from hpctrain.errors import ConfigError

#: Filesystem types that live on one machine only.
LOCAL_FS_TYPES = frozenset({"tmpfs", "ramfs", "devtmpfs", "overlay", "ext2", "ext3", "ext4",
                            "xfs", "btrfs", "zfs", "f2fs", "vfat", "squashfs", "fuse.sshfs"})
#: Paths that are node-local on every cluster, whatever their filesystem type says.
LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run")

_HINT_SHARED = ("put run.storage_path on a filesystem every node mounts (e.g. "
                "--set run.storage_path=$SCRATCH/hpctrain_runs: Lustre, GPFS, NFS…)")


def _storage_key_where(spec) -> Tuple[str, Optional[str]]:
    key = "run.storage_path"
    if spec is None:
        return key, None
    if spec.run.storage_path is None:

        return key, (f"the default storage path (${DEFAULT_STORAGE_ENV}, the user config's "
                     "storage_path, the default site's, the center config's, or "
                     "~/hpctrain_results)")
    return key, spec.where(key)


def ensure_storage_dir(storage_path: str, spec=None) -> None:
    """Create ``storage_path`` (and its parents) or explain, as a ConfigError with a
    HINT, why it cannot hold run directories."""
    key, where = _storage_key_where(spec)
    hint = ("give a directory you can write, e.g. --set run.storage_path=$HOME/hpctrain_runs "
            "(on a cluster: a filesystem every node sees, such as $SCRATCH)")
    blocker = _first_non_directory(storage_path)
    if blocker is not None:
        raise ConfigError(f"{key}: {storage_path} cannot hold run directories: {blocker} is "
                          "a file, not a directory", file=where, hint=hint)
    created = not os.path.isdir(storage_path)
    try:
        os.makedirs(storage_path, exist_ok=True)
        if created:  # no rename of run directories by another user in one made here
            os.chmod(storage_path, stat.S_IMODE(os.stat(storage_path).st_mode) & ~0o022)
    except OSError as e:
        reason = {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
                  errno.EROFS: "the filesystem is read-only",
                  errno.ENOSPC: "no space left on the device"}.get(e.errno, e.strerror or str(e))
        raise ConfigError(f"{key}: cannot create {storage_path}: {reason}", file=where,
                          hint=hint) from None
    if not os.access(storage_path, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: {storage_path} is not writable by this user", file=where,
                          hint=hint)


def _first_non_directory(path: str) -> Optional[str]:
    """The first existing component of ``path`` that is not a directory, if any."""
    probe = os.path.abspath(path)
    parts: List[str] = []
    while True:
        parts.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for p in reversed(parts):  # from / down
        if not os.path.lexists(p):
            return None
        if not os.path.isdir(p):
            return p
    return None


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> Optional[Tuple[str, str]]:
    """``(mount point, filesystem type)`` of the mount holding ``path`` (which need not
    exist yet: its nearest existing parent counts), from ``mountinfo``; None if
    unreadable."""
    probe = os.path.realpath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best: Optional[Tuple[str, str]] = None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = fields[4].encode().decode("unicode_escape")  # \040 = a space
        inside = probe == point or probe.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, right.split()[0])  # the last matching line is the visible one
    return best


def _under(path: str, prefix: str) -> bool:
    prefix = os.path.realpath(prefix).rstrip("/") or "/"
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def local_storage_reason(path: str, shared_paths=()) -> Optional[str]:
    """Why ``path`` is seen by this node only, or None when it may be shared (a shared
    filesystem type, or under one of ``shared_paths``)."""
    real = os.path.realpath(path)
    if any(_under(real, p) for p in shared_paths):
        return None
    for prefix in LOCAL_PREFIXES:
        if _under(real, prefix):
            return f"it is under {prefix}, which is local to each node"
    found = mount_of(real)
    if found is not None and found[1] in LOCAL_FS_TYPES:
        return (f"it is on a {found[1]} filesystem (mounted at {found[0]}), which is local "
                "to each node")
    return None


def check_shared_storage(spec, run_path: str) -> None:
    """Refuse a job on several nodes whose run directory is local to one node."""
    if spec.scheduler.kind == "local" or spec.scaling.nodes < 2:
        return
    site = spec.site_config
    shared = list(getattr(site.limits, "shared_paths", []) if site is not None else [])
    reason = local_storage_reason(run_path, shared)
    if reason is None:
        return
    key, where = _storage_key_where(spec)
    hint = _HINT_SHARED
    if site is not None:
        hint += (f"; if this path is shared on site {site.name!r}, list it in [limits] "
                 f"shared_paths of {site.path}")
    else:
        hint += "; if it is shared on your cluster, list it in [limits] shared_paths of its site config"
    raise ConfigError(f"{key}: a job on {spec.scaling.nodes} nodes needs its run directory "
                      f"on a filesystem every node sees, but {run_path} is not: {reason}",
                      file=where, hint=hint)
