"""PyTorch backend: a process group (NCCL on GPU, Gloo on CPU) per worker group.

Rendezvous is TCP at ``master_addr:master_port`` from :class:`WorkerInfo` — the host of
rank 0 and a port chosen per job (a free port for local runs, a job-derived one on a
cluster), so two jobs sharing a node never meet. ``report()`` agrees across ranks over a
Gloo group (the default group on CPU; a separate small Gloo group beside NCCL, so no
GPU memory or stream is involved in bookkeeping).
"""
from __future__ import annotations

import datetime
import inspect
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Sequence

from hpctrain.common.context import Coordinator, Posted, current_session
from ..cluster_env import WorkerInfo
from ..config import toml
from ..errors import ConfigError
from .base import Backend
from hpctrain.cluster_env import local_gpu_indices, visible_gpu_count

if TYPE_CHECKING:
    import torch


@dataclass
class TorchConfig:
    """``backend``: "nccl", "gloo" or None (NCCL when GPUs are used, else Gloo).
    ``timeout_s``: collective timeout for the process group."""

    backend: Optional[str] = field(default=None, metadata=toml(
        "str", "The process group backend (auto: NCCL on GPUs, Gloo on CPUs).",
        choices=("gloo", "nccl", "auto")))
    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the process group before giving up.", minimum=1))

    def __post_init__(self) -> None:
        if self.backend == "auto":
            self.backend = None
        if self.backend not in (None, "nccl", "gloo"):
            raise ConfigError(f"torch.backend: expected \"nccl\", \"gloo\" or \"auto\", got {self.backend!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise ConfigError(f"torch.timeout_s: expected a positive integer, got {self.timeout_s!r}")


class TorchCoordinator(Coordinator):
    def __init__(self, group) -> None:
        import torch
        import torch.distributed as dist

        self._torch = torch
        self._dist = dist
        self._group = group

    def allreduce_max(self, values: Sequence[int]) -> List[int]:
        buf = self._torch.tensor(list(values), dtype=self._torch.int64)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.MAX, group=self._group)
        return buf.tolist()

    def allreduce_max_async(self, values: Sequence[int]) -> Posted:
        """Gloo's own non-blocking all_reduce (its worker threads run it, in the order
        the collectives of this group were issued)."""
        buf = self._torch.tensor(list(values), dtype=self._torch.int64)
        work = self._dist.all_reduce(buf, op=self._dist.ReduceOp.MAX, group=self._group,
                                     async_op=True)

        def finish() -> List[int]:
            work.wait()
            return buf.tolist()
        return Posted(finish)


class TorchBackend(Backend):
    def __init__(self, config: Optional[TorchConfig] = None):
        super().__init__(config or TorchConfig())
        self._control = None
        self.backend_name = "gloo"

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        import torch
        import torch.distributed as dist

        cfg: TorchConfig = self.config
        gpu = use_gpu and torch.cuda.is_available()
        if use_gpu and not torch.cuda.is_available():
            raise RuntimeError(
                "ScalingConfig(use_gpu=True) but torch sees no CUDA device on "
                f"{info.hosts[info.node_rank] if info.hosts else 'this host'}.\n"
                "HINT: request GPUs from the scheduler, or set use_gpu=False.")
        device = None
        if gpu:
            device = torch.device("cuda", gpu_indices(
                info.local_rank, info.local_world_size,
                int(os.environ.get("HPCTRAIN_GPUS_PER_WORKER", "1")))[0])
            torch.cuda.set_device(device)
        self.backend_name = cfg.backend or ("nccl" if gpu else "gloo")
        # Code that reads the usual variables (torchrun conventions, and Ray's
        # NODE_RANK, set by its TorchTrainer beside them) sees the same truth.
        os.environ.update(
            MASTER_ADDR=info.master_addr, MASTER_PORT=str(info.master_port),
            RANK=str(info.world_rank), WORLD_SIZE=str(info.world_size),
            LOCAL_RANK=str(info.local_rank), LOCAL_WORLD_SIZE=str(info.local_world_size),
            GROUP_RANK=str(info.node_rank), NODE_RANK=str(info.node_rank),
        )
        _tell_accelerate(device)
        _tell_deepspeed(gpu)
        # NCCL is told this rank's GPU (else it guesses it from the global rank, which
        # PyTorch warns "can cause a hang" where ranks and GPUs do not line up: seen on
        # the first GPU run, scripts/gpu-check.sh)
        bind = {"device_id": device} if device is not None and self.backend_name == "nccl" \
            and "device_id" in inspect.signature(dist.init_process_group).parameters else {}
        dist.init_process_group(
            backend=self.backend_name,
            init_method=f"tcp://{_bracket(info.master_addr)}:{info.master_port}",
            rank=info.world_rank,
            world_size=info.world_size,
            timeout=datetime.timedelta(seconds=cfg.timeout_s),
            **bind,
        )
        if self.backend_name != "gloo" and info.world_size > 1:
            self._control = dist.new_group(backend="gloo")

    def coordinator(self, info: WorkerInfo) -> Coordinator:
        return TorchCoordinator(self._control)

    def on_shutdown(self, info: WorkerInfo) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _tell_accelerate(device) -> None:
    """Hugging Face Accelerate (and the transformers ``Trainer``, built on it) reads the
    ranks from the variables above, but on a CPU-only run it trains data-parallel only
    when told ``ACCELERATE_USE_CPU`` (else each rank trains alone); its device is this
    rank's hpctrain device (``ACCELERATE_TORCH_DEVICE``, the GPU the rank is bound to).
    A value the user set wins."""
    if device is not None:
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", str(device))
    else:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")


def _tell_deepspeed(gpu: bool) -> None:
    """DeepSpeed picks its accelerator by probing the machine (CUDA when torch sees a GPU),
    not from the run's ``use_gpu``: a CPU run on a GPU node would train on the GPU with
    NCCL. ``DS_ACCELERATOR=cpu`` makes it follow hpctrain's device; it then reuses the
    Gloo process group hpctrain made. A value the user set wins."""
    if not gpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def gpu_indices(local_rank: int, local_world_size: int, gpus_per_worker: int):
    """This rank's CUDA device indices, from what it sees (``CUDA_VISIBLE_DEVICES``, else
    the driver's count); the backend binds the first one before the process group."""
    import torch


    visible = visible_gpu_count(os.environ.get("CUDA_VISIBLE_DEVICES"),
                                torch.cuda.device_count())
    return local_gpu_indices(visible, local_rank=local_rank,
                             local_world_size=local_world_size,
                             gpus_per_worker=gpus_per_worker)


def get_device() -> "torch.device":
    """This rank's (first) device: ``cuda:<i>`` when the run uses GPUs, else ``cpu``
    (Ray: ``get_devices()[0]``)."""
    return get_devices()[0]


def get_devices() -> List["torch.device"]:
    """Every device of this rank, as ``torch.device``s (Ray's ``get_devices()``): its
    ``gpus_per_worker`` GPUs (``cuda:0``, ``cuda:1``… among those it sees: see
    :func:`hpctrain.cluster_env.local_gpu_indices`) when the run uses GPUs, else
    ``[cpu]``."""
    import torch

    s = current_session()
    use_gpu = s.use_gpu if s is not None else torch.cuda.is_available()
    if use_gpu and torch.cuda.is_available():
        indices = gpu_indices(s.info.local_rank if s is not None else 0,
                              s.info.local_world_size if s is not None else 1,
                              (s.gpus_per_worker if s is not None else 0) or 1)
        if indices:
            return [torch.device("cuda", i) for i in indices]
    return [torch.device("cpu")]
