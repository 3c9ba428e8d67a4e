"""The storage axis: where a run's checkpoints live (``run.storage_path``).

One module per kind behind :class:`~hpctrain.storage.base.Storage`; hpctrain's own kinds
are registered here, by URI scheme (``object.py``: every ``pyarrow.fs`` URI). A new kind is one
module and one :func:`register_storage` line — or a line in a plugin's own package: no
other hpctrain file needs editing.
"""
from hpctrain.common.registry import STORAGES, is_local_path, register_storage, storage_for

register_storage("file", "hpctrain.storage.posix:PosixStorage")
# pyarrow.fs's own URIs (what FileSystem.from_uri opens), and a filesystem object
for _scheme in ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "pyarrowfs"):
    register_storage(_scheme, "hpctrain.storage.object:ObjectStorage")

__all__ = ["STORAGES", "is_local_path", "register_storage", "storage_for"]
