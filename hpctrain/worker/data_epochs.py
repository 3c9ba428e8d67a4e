"""A rank's datasets and where its data epochs stand: the dataset shards of
``get_dataset_shard``, the prepared loaders that joined the record, and the epochs the
resumed checkpoint recorded (``metadata.json``'s ``data_epochs``), so that a resumed run
starts each loader and shard where the run that wrote the checkpoint left off."""
from __future__ import annotations

import os
import weakref
from typing import Any, Dict, List, Optional

from hpctrain.checkpoint import METADATA_FILE
from hpctrain.cluster_env import WorkerInfo
from hpctrain.errors import ConfigError
from hpctrain.common.fsutil import read_json


class DataEpochs:
    def __init__(self, *, info: WorkerInfo, run_name: str, datasets: Dict[str, Any],
                 datasets_to_split: Any, resume_checkpoint: Optional[str]):
        self.info = info
        self.run_name = run_name
        self.datasets = datasets
        self.datasets_to_split = datasets_to_split
        self.resume_checkpoint = resume_checkpoint
        self._shards: Dict[str, Any] = {}
        self._counters: List[Any] = []  # weak references, in the order they were made
        self._resumed: Optional[Dict[str, Any]] = None

    def shard(self, name: str) -> Any:
        """This rank's :class:`~hpctrain.data.DatasetShard` of ``datasets[name]`` (one
        per name and process: its epoch counter carries over between calls); the whole
        dataset when ``DataConfig.datasets_to_split`` leaves ``name`` out."""
        if name not in self._shards:
            if name not in self.datasets:
                have = ", ".join(repr(n) for n in self.datasets) or "none"
                raise ConfigError(
                    f"get_dataset_shard: no dataset named {name!r} (this run has {have})",
                    hint="pass datasets={%r: \"/path/file.h5:images,labels\"} to the "
                         "trainer, or add it to the job file's [datasets]" % name)
            # hpctrain.data imports pyarrow's side of the datasets: only a run that has one
            from hpctrain.data import as_dataset

            source = as_dataset(self.datasets[name], f"datasets.{name}")
            split = self.datasets_to_split == "all" or name in self.datasets_to_split
            rank, world_size = (self.info.world_rank, self.info.world_size) if split else (0, 1)
            shard = source.shard(rank, world_size, run_name=self.run_name)
            start = self.resumed().get("shards", {}).get(name)
            if isinstance(start, int) and start >= 0:
                shard.set_epoch(start)
            self._shards[name] = shard
        return self._shards[name]

    def resumed(self) -> Dict[str, Any]:
        """The data epochs recorded with the checkpoint this run resumes from ({} when
        it starts afresh, or the checkpoint predates them)."""
        if self._resumed is None:
            self._resumed = {}
            if self.resume_checkpoint:
                meta = read_json(os.path.join(self.resume_checkpoint, METADATA_FILE))
                epochs = meta.get("data_epochs") if isinstance(meta, dict) else None
                if isinstance(epochs, dict):
                    self._resumed = epochs
        return self._resumed

    def register(self, loader: Any) -> int:
        """A prepared DataLoader joins the recorded epochs; returns the epoch its first
        pass reads: where the same loader (the same in creation order) of the run that
        wrote the resumed checkpoint left off, else 0. Loaders are matched by the order
        they are prepared in: a loop that prepares its loaders once, before the epochs,
        resumes exactly; one that prepares a new loader each epoch starts it at the
        recorded epoch of the loader prepared at that position."""
        index = len(self._counters)
        self._counters.append(weakref.ref(loader))  # a loader gone is not kept alive
        recorded = self.resumed().get("loaders") or []
        start = recorded[index] if index < len(recorded) else 0
        return start if isinstance(start, int) and start >= 0 else 0

    def now(self) -> Optional[Dict[str, Any]]:
        """Where each prepared loader and dataset shard would resume now (None: none)."""
        if not self._counters and not self._shards:
            return None
        loaders = [ref() for ref in self._counters]
        return {"loaders": [c.resume_epoch() if c is not None else None for c in loaders],
                "shards": {n: s.resume_epoch() for n, s in self._shards.items()}}
