"""The floor: the workload under plain ``torchrun --nproc-per-node 2`` (NCCL with
``--device cuda``, one GPU per rank, bound by ``LOCAL_RANK``).

Plain DDP + DistributedSampler; a report is one JSON line appended (and flushed) by rank
0; a checkpoint commit is ``shutil.copytree`` (+ fsync of each file when
``--sync 1``); a staged checkpoint is written in place, then (fsync'd and) renamed.
"""
import time

T_SCRIPT = time.time()

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import _workload  # noqa: E402


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Loader:
    def __init__(self, loader: DataLoader):
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.sampler.set_epoch(epoch)

    def __iter__(self):
        return iter(self.loader)


class TorchrunAdapter(_workload.Adapter):
    name = "torchrun"

    def __init__(self, cfg):
        self.cfg = cfg
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        base = os.path.join(cfg["workdir"], "torchrun-run")
        self.ckpt_dir = os.path.join(base, "checkpoints")
        os.makedirs(self.ckpt_dir, exist_ok=True)
        self._results = open(os.path.join(base, f"result.rank-{self.rank}.json"), "a") \
            if self.rank == 0 else None
        self._committed = None
        self.retention_ms = []

    def prepare_model(self, model):
        if self.world == 1:  # as hpctrain's and Ray's prepare_model: no DDP for one rank
            return model
        if self.cfg["device"] == "cuda":
            return DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
        return DistributedDataParallel(model)

    def prepare_loader(self, dataset, batch_size, seed):
        sampler = DistributedSampler(dataset, num_replicas=self.world, rank=self.rank,
                                     shuffle=True, seed=seed)
        return _Loader(DataLoader(dataset, batch_size=batch_size, sampler=sampler))

    def report(self, metrics):
        if self._results is not None:
            row = dict(metrics)
            row["_timestamp"] = int(time.time())
            self._results.write(json.dumps(row) + "\n")
            self._results.flush()

    def _final(self, index):
        return os.path.join(self.ckpt_dir, f"checkpoint_{index:06d}")

    def commit(self, src_dir, index):
        if self.rank != 0:
            return
        dst = self._final(index)
        shutil.copytree(src_dir, dst)
        if self.cfg["sync"]:
            for name in os.listdir(dst):
                _fsync(os.path.join(dst, name))

    def staging_dir(self, index):
        return os.path.join(self.ckpt_dir, f".tmp_checkpoint_{index:06d}")

    def commit_staged(self, staged_dir, index):
        if self.rank != 0:
            return
        if self.cfg["sync"]:
            for name in os.listdir(staged_dir):
                _fsync(os.path.join(staged_dir, name))
        os.rename(staged_dir, self._final(index))
        if self.cfg["sync"]:
            _fsync(self.ckpt_dir)

    def after_commit(self, index):
        # retention by hand (num_to_keep=1), outside the timed section
        if self.rank == 0:
            if self._committed is not None:
                t = time.perf_counter()
                shutil.rmtree(self._final(self._committed), ignore_errors=True)
                self.retention_ms.append((time.perf_counter() - t) * 1e3)
            self._committed = index


def main():
    args, cfg = _workload.common_args()
    if cfg["device"] == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cfg["device"] == "cuda" else "gloo")
    cfg["t_pg_ready"] = time.time()
    cfg["t_worker_script_start"] = T_SCRIPT
    _workload.run(TorchrunAdapter(cfg), cfg)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
