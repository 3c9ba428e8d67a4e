"""PyTorch integration: ``TorchTrainer`` and the helpers a training function calls.

torch itself is imported only inside the helpers, so ``from hpctrain.torch import
TorchTrainer`` works on a login node without torch.
"""
from __future__ import annotations

import os
import random
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, cast

from ..backends.torch import TorchConfig, get_device, get_devices
from ..checkpoint import Checkpoint
from ..config import DataConfig, RunConfig, ScalingConfig, ValidationConfig
from ..trainer import DataParallelTrainer, SchedulerArg, TrainLoop
from hpctrain.common import progress
from hpctrain.common.context import current_session

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

__all__ = ["TorchTrainer", "TorchConfig", "prepare_model", "prepare_data_loader", "get_device",
           "get_devices", "enable_reproducibility", "backward", "prepare_optimizer"]


class TorchTrainer(DataParallelTrainer):
    """Ray Train's TorchTrainer: ``torch_config`` (a :class:`TorchConfig`) picks NCCL/Gloo
    and the timeout. The other parameters are :class:`~hpctrain.DataParallelTrainer`'s."""

    _backend_name = "torch"
    _backend_config_cls = TorchConfig

    def __init__(self, train_loop_per_worker: TrainLoop, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 torch_config: Optional[TorchConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 validation_config: Optional[ValidationConfig] = None) -> None:
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=self._backend_config(torch_config, "torch_config"),
                         scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, dataset_config=dataset_config,
                         resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
                         scheduler=scheduler, site=site,
                         validation_config=validation_config)


def _session() -> Any:

    return current_session()


def prepare_model(model: "torch.nn.Module", move_to_device: bool = True,
                  parallel_strategy: Optional[str] = "ddp",
                  parallel_strategy_kwargs: Optional[Dict[str, Any]] = None) -> "torch.nn.Module":
    """Move ``model`` to this rank's device and wrap it in DistributedDataParallel when the
    run has more than one rank (``parallel_strategy=None`` skips the wrap)."""
    import torch.distributed as dist

    device = get_device()
    if move_to_device:
        model = model.to(device)
    if parallel_strategy is None or not dist.is_initialized() or dist.get_world_size() == 1:
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index])
            kwargs.setdefault("output_device", device.index)
        return DistributedDataParallel(model, **kwargs)
    if parallel_strategy == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_id", device)
        return FullyShardedDataParallel(model, **kwargs)
    raise ValueError(f"parallel_strategy: expected \"ddp\", \"fsdp\" or None, got {parallel_strategy!r}")


class _SamplerEpochHook:
    """Put on a sampler instance in place of its ``set_epoch``: the loop's own calls
    (``train_loader.sampler.set_epoch(epoch)``, Ray's documented pattern) are recorded,
    so that the prepared loader's automatic count never overrides them.

    It holds the sampler weakly and its class's ``set_epoch``, not the bound method: a
    bound method in the sampler's own ``__dict__`` would be a reference cycle, and the
    sampler, the loader and the whole dataset would then outlive the loop's last use of
    them until the garbage collector's next full pass (a second dataset built meanwhile
    doubles the rank's memory: the bench's peak PSS)."""

    def __init__(self, sampler: Any) -> None:
        self.requested: Optional[int] = None
        self._own = getattr(sampler, "__dict__", {}).get("set_epoch")  # an instance's own
        self._sampler: Optional["weakref.ref[Any]"] = None
        if self._own is None:
            try:
                self._sampler = weakref.ref(sampler)
            except TypeError:  # no weak references (__slots__): the bound method, a cycle
                self._own = sampler.set_epoch
            self._method = type(sampler).set_epoch

    def __call__(self, epoch: int) -> None:
        self.requested = epoch
        self.original(epoch)

    def original(self, epoch: int) -> None:
        """The sampler's own ``set_epoch``."""
        if self._own is not None:
            self._own(epoch)
            return
        sampler = self._sampler() if self._sampler is not None else None
        if sampler is not None:
            self._method(sampler, epoch)


class _PreparedLoader:
    """A DataLoader whose sampler is a DistributedSampler, and batches moved to the device.

    The sampler's epoch for each pass: the one the loop set for it — on the sampler
    (``loader.sampler.set_epoch(e)``) or on this loader (``loader.set_epoch(e)``) — and
    otherwise the automatic count: one more than the previous pass's, from 0. Ray never
    sets the epoch itself (without ``set_epoch`` every Ray epoch has epoch 0's order);
    here a loop that forgets gets a new order each pass. After a restart the count goes
    on where the checkpoint left it: every report records each prepared loader's next
    epoch (the epoch of a pass still being iterated, else the next pass's) in the
    checkpoint's metadata, and the loader prepared in the same order by the resumed run
    starts from it."""

    def __init__(self, loader: "DataLoader[Any]", device: "torch.device", move: bool,
                 first_epoch: int = 0) -> None:
        self._loader = loader
        self._device = device
        self._move = move and device.type != "cpu"
        self._next = first_epoch       # the automatic count: the next pass's epoch
        self._requested: Optional[int] = None
        self._set_on_loader = False
        self._current: Optional[int] = None  # the epoch of the pass being iterated
        sampler: Any = getattr(loader, "sampler", None)
        self._hook: Optional[_SamplerEpochHook] = None
        if callable(getattr(sampler, "set_epoch", None)):
            hook = getattr(sampler, "__dict__", {}).get("set_epoch")
            if not isinstance(hook, _SamplerEpochHook):
                hook = _SamplerEpochHook(sampler)
                try:
                    sampler.set_epoch = hook
                except (AttributeError, TypeError):  # a sampler with __slots__
                    hook = None
            self._hook = hook

    def set_epoch(self, epoch: int) -> None:
        """The next pass reads ``epoch`` (then ``epoch + 1``… unless set again)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"set_epoch: expected an integer >= 0, got {epoch!r}")
        self._requested = epoch

    def _take_epoch(self) -> int:
        epoch = self._next
        if self._hook is not None and self._hook.requested is not None:
            epoch, self._hook.requested = self._hook.requested, None
        self._set_on_loader = self._requested is not None
        if self._requested is not None:  # the loader's own set_epoch, called last
            epoch, self._requested = self._requested, None
        self._next = epoch + 1
        return epoch

    def resume_epoch(self) -> int:
        """The epoch a resumed run's first pass reads (recorded with each checkpoint)."""
        return self._current if self._current is not None else self._next

    def __iter__(self) -> Iterator[Any]:
        epoch = self._take_epoch()
        if self._hook is not None:
            self._hook.original(epoch)
        elif self._set_on_loader and callable(getattr(self._loader.sampler, "set_epoch", None)):
            # an untracked sampler (__slots__): only when asked here. A sampler with no
            # epoch (one rank keeps the loader's own RandomSampler) ignores it, as Ray's does
            self._loader.sampler.set_epoch(epoch)
        self._current = epoch
        it = iter(self._loader)
        # the hang watchdog's sign of life: torch's iterator counts its batches itself,
        # which the heartbeat thread reads; nothing more per batch here
        counted = isinstance(getattr(it, "_num_yielded", None), int)
        progress.reading(it)
        try:
            if self._move:
                for batch in it:
                    yield _to_device(batch, self._device)
            elif counted:
                yield from it
            else:
                for batch in it:
                    progress.beat()
                    yield batch
        finally:
            progress.done_reading(it)
            if self._current == epoch:
                self._current = None

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _to_device(batch: Any, device: "torch.device") -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def prepare_data_loader(data_loader: "DataLoader[Any]", add_dist_sampler: bool = True,
                        move_to_device: bool = True) -> "DataLoader[Any]":
    """Give each rank its own part of the data (DistributedSampler, shuffled iff the
    original loader shuffled) and move batches to this rank's device. The loader given
    back wraps the new one (its attributes are the DataLoader's) and records its epoch
    with each checkpoint."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

    loader = data_loader
    if (add_dist_sampler and dist.is_initialized() and dist.get_world_size() > 1
            and not isinstance(data_loader.sampler, DistributedSampler)):
        shuffle = isinstance(data_loader.sampler, RandomSampler)
        sampler = DistributedSampler(data_loader.dataset, shuffle=shuffle,
                                     num_replicas=dist.get_world_size(), rank=dist.get_rank())
        loader = DataLoader(
            data_loader.dataset, batch_size=data_loader.batch_size, sampler=sampler,
            num_workers=data_loader.num_workers, collate_fn=data_loader.collate_fn,
            pin_memory=data_loader.pin_memory, drop_last=data_loader.drop_last,
            timeout=data_loader.timeout, worker_init_fn=data_loader.worker_init_fn,
            generator=data_loader.generator,
            persistent_workers=data_loader.persistent_workers if data_loader.num_workers else False,
        )
    return cast("DataLoader[Any]", _register(_PreparedLoader(loader, get_device(), move_to_device)))


def _register(loader: "_PreparedLoader") -> "_PreparedLoader":
    """Let the session record the loader's epoch with each checkpoint, and start it
    where the checkpoint this run resumes from left it."""
    s = _session()
    if s is not None:
        loader._next = s.register_epoch_counter(loader)
    return loader


def enable_reproducibility(seed: int = 0) -> None:
    """Seed Python, NumPy and torch, and make torch choose deterministic kernels."""
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def backward(tensor: "torch.Tensor") -> None:
    """Ray Train compatibility (AMP is the user's own business here)."""
    tensor.backward()


def prepare_optimizer(optimizer: "torch.optim.Optimizer") -> "torch.optim.Optimizer":
    """Ray Train compatibility: the optimizer as given."""
    return optimizer
