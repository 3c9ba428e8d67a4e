"""Who wrote this? The checks that keep another user from deciding what a run does.

A center's machines are shared: other users share the login nodes, often the compute
nodes, and always the filesystem. Whatever decides what code a run executes (its payload
and callbacks, a sweep's control file, the ranks' return values, the driver's path list,
a script that is submitted again, ``spec.toml``) is read only through
:func:`read_trusted`: a regular file (no symbolic link, no FIFO: opened with
``O_NOFOLLOW | O_NONBLOCK``), of bounded size, owned by this user (or root) and writable
by nobody else, in a directory nobody else can write. Anything else is refused with an
:class:`~hpctrain.errors.UnsafePathError` that names the file and why, before a byte of
it is used.

Run directories are private by default: :func:`make_private_dir` creates them ``0700``
(files ``0600``) whatever the umask, or ``2750``/``0640`` when the run is shared with
the project group (``run.share = "group"``: read access, never write; the group is the
run directory's, which a setgid project directory gives). An existing
directory owned by another user, or writable by group or other, is refused before
anything is read from it. :func:`modes_of` tells a writer which modes a run directory
asks for, from the directory itself (the one source of truth, also on the compute nodes).
"""
from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
import stat
import tempfile
from typing import Any, Callable, Iterator, Optional, Tuple

import cloudpickle

from hpctrain.errors import UnsafePathError

#: run.share: who besides the user may read a run directory
SHARES = ("private", "group")
#: (directory mode, file mode, script mode) per share. A shared directory is setgid, so
#: that what is created inside keeps its group (a setgid project directory's group)
MODES = {"private": (0o700, 0o600, 0o700), "group": (0o2750, 0o640, 0o750)}

#: size limits of what is read through the checked loader
MAX_PAYLOAD_BYTES = 2 << 30      # the pickled training function, its config, datasets
MAX_CONTROL_BYTES = 256 << 20    # callbacks, a sweep's control file, return values
MAX_TEXT_BYTES = 16 << 20        # spec.toml, driver.json, job.sh, state.json

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH

HINT_FOREIGN = ("another user could make your job run their code through it. If you made "
                "it and trust it, remove the write permission of others (chmod -R go-w PATH); "
                "otherwise pick another run name or storage path, and tell your center's "
                "support about a file you did not make")


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def trusted_owner(uid: int) -> bool:
    """This user, or root (who could do anything anyway)."""
    return uid in (os.getuid(), 0)


def problem(st: os.stat_result) -> Optional[str]:
    """Why a file or directory with this ``stat`` must not be trusted, or None."""
    if not trusted_owner(st.st_uid):
        return f"it is owned by {_owner(st.st_uid)}, not by you ({_owner(os.getuid())})"
    if st.st_mode & _WRITABLE_BY_OTHERS:
        who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("other users", stat.S_IWOTH))
                           if st.st_mode & bit)
        return f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _refuse(path: str, what: str, why: str) -> UnsafePathError:
    return UnsafePathError(f"refusing {what} {path}: {why}", path=path,
                           hint=HINT_FOREIGN.replace("PATH", path))


def _too_big(path: str, what: str, size: int, limit: int) -> UnsafePathError:
    return UnsafePathError(
        f"refusing {what} {path}: it is {size} bytes, more than the {limit} hpctrain reads "
        "from such a file", path=path,
        hint="keep large data out of the training function's closure and its config (pass "
             "paths, read the data in the training function), and return small values")


def check_dir(path: str, what: str = "directory") -> os.stat_result:
    """Raise :class:`UnsafePathError` unless ``path`` is a directory of this user (or
    root) that nobody else can write; return its ``stat``."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, what, "it is not a directory")
    why = problem(st)
    if why:
        raise _refuse(path, what, why)
    return st


def read_trusted(path: str, *, what: str, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of ``path`` after the checks of this module's docstring (the file and its
    directory); :class:`UnsafePathError` when one fails, FileNotFoundError when it is
    missing."""
    parent = os.path.dirname(os.path.abspath(path))
    pst = os.stat(parent)
    if pst.st_mode & _WRITABLE_BY_OTHERS and not pst.st_mode & stat.S_ISVTX \
            or not trusted_owner(pst.st_uid):
        raise _refuse(path, what, f"its directory {parent}: {problem(pst)}")
    return _read_regular(path, what, max_bytes, owner_checked=True)


def read_for_display(path: str, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a file that is only shown, never acted on (a colleague's shared run's
    ``spec.toml``): no owner check, but a regular file (no FIFO to wait on, no symbolic
    link) of bounded size."""
    return _read_regular(path, "to show", max_bytes, owner_checked=False)


def _read_regular(path: str, what: str, max_bytes: int, *, owner_checked: bool) -> bytes:
    """Open ``path`` without following a symbolic link and without waiting (a FIFO),
    refuse what is not a regular file, bigger than ``max_bytes`` or (``owner_checked``)
    :func:`problem`'s, and read it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:  # the last component is a symbolic link
            raise _refuse(path, what, "it is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, what, "it is not a regular file")
        why = problem(st) if owner_checked else None
        if why:
            raise _refuse(path, what, why)
        if st.st_size > max_bytes:
            raise _too_big(path, what, st.st_size, max_bytes)
        os.set_blocking(fd, True)
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 8 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise _too_big(path, what, len(data), max_bytes)
        return data
    finally:
        os.close(fd)


def load_trusted_pickle(path: str, *, what: str, max_bytes: int = MAX_CONTROL_BYTES) -> Any:
    """Unpickle ``path`` (with cloudpickle) after :func:`read_trusted`'s checks."""

    return cloudpickle.loads(read_trusted(path, what=what, max_bytes=max_bytes))


def load_own_pickle(path: str, max_bytes: int) -> Any:
    """Like :func:`load_trusted_pickle`, but None for whatever cannot be loaded (missing,
    refused, a class this process cannot import): for best-effort reads (a worker's
    exception)."""
    try:
        data = read_trusted(path, what="a worker's exception", max_bytes=max_bytes)
    except OSError:  # UnsafePathError is a PermissionError
        return None
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 - whatever the pickle needs is missing here
        return None


def share_of(path: str) -> str:
    """``"group"`` when the directory ``path`` has exactly the group share's mode
    (``2750``, which only hpctrain sets on purpose), else ``"private"`` (also a directory
    that does not exist yet, or one an older hpctrain left ``0755``)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return "private"
    return "group" if mode == MODES["group"][0] else "private"


def modes_of(path: str) -> Tuple[int, int, int]:
    """(directory, file, script) modes that the run directory ``path`` asks for
    (:func:`share_of`)."""
    return MODES[share_of(path)]


def fix_mode(fd: int, mode: int) -> None:
    """Give the file open at ``fd`` exactly ``mode``: ``os.open(..., mode)`` is masked by
    the umask (under ``077`` a shared run's ``0640`` would be ``0600``)."""
    os.fchmod(fd, mode)


def make_private_dir(path: str, *, share: str = "private", what: str = "run directory") -> None:
    """Create ``path`` (its parents as the umask says: the storage path) with the share's directory mode whatever the
    umask, or, when it exists, check it (:func:`check_dir`) and set that mode. A directory
    that another user made first (or made writable to others) is refused."""
    mode = MODES[share][0]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # the storage path
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        lst = os.lstat(path)
        if stat.S_ISLNK(lst.st_mode) and not trusted_owner(lst.st_uid):
            raise _refuse(path, what, f"it is a symbolic link made by {_owner(lst.st_uid)}")
        st = check_dir(path, what)
        if stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)
        return
    os.chmod(path, mode)  # whatever the umask


def makedirs(path: str, mode: int) -> None:
    """``os.makedirs(path, exist_ok=True)`` whose new directories get ``mode`` whatever the
    umask (for directories inside a run directory: attempts, logs)."""
    missing = []
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue
        os.chmod(d, mode)


def trusted_pythonpath(value: str, *, warn: Callable[[str], None]) -> str:
    """The entries of the ``PYTHONPATH``-style ``value`` that no other user could change:
    each a file or directory of this user (or root) that nobody else can write. The
    others are left out (a missing one silently; one that fails the check with
    ``warn(message)``): what the ranks import must not be another user's choice."""
    kept = []
    for entry in filter(None, value.split(os.pathsep)):
        try:
            why = problem(os.stat(entry))
        except OSError:
            continue
        if why:
            warn(f"WARNING: {entry} is not put on the ranks' PYTHONPATH: {why}.\n"
                 f"HINT: another user could change the code your job imports from it; "
                 f"remove their write permission (chmod go-w {entry}) or install your code "
                 "as a package (pip install --user -e .)")
            continue
        kept.append(entry)
    return os.pathsep.join(kept)


def no_write_for_others() -> None:
    """Take group and other write out of this process's umask: what hpctrain's own
    processes (the batch step, the ranks) create is never writable by another user,
    whatever the login's umask (``002`` in a setgid project directory)."""
    os.umask(os.umask(0o022) | 0o022)


@contextlib.contextmanager
def private_copy(data: bytes, name: str) -> Iterator[str]:
    """The path of a file holding exactly ``data``, in a fresh directory only this user
    can enter (removed afterwards): for a command that reads a checked file by its path
    (``qsub job.sh``), so that what it reads is what was checked, whatever happens to
    the original meanwhile."""
    d = tempfile.mkdtemp(prefix="hpctrain-")
    try:
        path = os.path.join(d, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        shutil.rmtree(d, ignore_errors=True)

