"""PyTorch Lightning inside an hpctrain training function (``ray.train.lightning``'s names).

Port a Ray Train Lightning script by changing its imports::

    import ray.train.lightning           ->  import hpctrain.lightning   (or hpctrain.train.lightning)
    from ray.train.torch import TorchTrainer  ->  from hpctrain.torch import TorchTrainer

```python
import lightning.pytorch as pl
from hpctrain.lightning import (RayDDPStrategy, RayLightningEnvironment,
                                RayTrainReportCallback, prepare_trainer)

def train_func(config):
    trainer = pl.Trainer(max_epochs=10, devices="auto", accelerator="auto",
                         strategy=RayDDPStrategy(), plugins=[RayLightningEnvironment()],
                         callbacks=[RayTrainReportCallback()], enable_checkpointing=False)
    trainer = prepare_trainer(trainer)
    ckpt = hpctrain.get_checkpoint()          # after a preemption: the last epoch's
    if ckpt:
        with ckpt.as_directory() as d:
            trainer.fit(model, dl, ckpt_path=os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(model, dl)
```

What hpctrain does for Lightning:

- The process group is hpctrain's (``TorchTrainer`` sets it up; Gloo on CPU, NCCL on
  GPU): the strategies find it initialized and use it, so ``process_group_backend`` and
  ``timeout`` belong in :class:`hpctrain.torch.TorchConfig`, as in Ray.
- :class:`RayLightningEnvironment` takes ranks and sizes from hpctrain's context, so
  Lightning does not pick its own ``SLURMEnvironment`` inside an hpctrain Slurm job.
- hpctrain owns the signals of a worker: its warning signal (``SIGUSR1`` by default)
  asks for a checkpoint-and-stop at the next report, and ``SIGTERM`` ends the rank.
  Lightning's ``Trainer`` would otherwise install its own ``SIGTERM`` handler (which
  swallows the signal and broadcasts from inside the handler) and, under a detected
  ``SLURMEnvironment``, a ``SIGUSR1`` auto-requeue handler. The strategies below keep
  hpctrain's handlers in place for the whole ``fit``.
- :class:`RayTrainReportCallback` reports ``trainer.callback_metrics`` (plus ``epoch`` and
  ``step``) with a checkpoint ``checkpoint.ckpt`` at every training epoch end; the file
  is written in hpctrain's staging area on the run's filesystem, so committing it is a
  rename. When the scheduler warns, the run stops right after that epoch's checkpoint
  and resumes from it (``trainer.fit(..., ckpt_path=...)``) in the next allocation.
"""
from __future__ import annotations

import os
from typing import Any, Dict

import torch

try:
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments import LightningEnvironment
    from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector
except ModuleNotFoundError:  # the standalone ``pytorch_lightning`` package
    import pytorch_lightning as pl
    from lightning_fabric.plugins.environments import LightningEnvironment
    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

import hpctrain
from .common.context import get_session
from .torch import get_device
from hpctrain.worker.session import current_session

__all__ = ["RayDDPStrategy", "RayFSDPStrategy", "RayDeepSpeedStrategy",
           "RayLightningEnvironment", "RayTrainReportCallback", "prepare_trainer"]


def _context():

    session = current_session()
    if session is None:
        raise RuntimeError(
            "hpctrain.lightning: no hpctrain training session in this process.\n"
            "HINT: build the Lightning Trainer inside the training function that "
            "hpctrain.torch.TorchTrainer runs (train_loop_per_worker).")
    return hpctrain.get_context()


def _keep_hpctrain_signal_handlers(trainer: "pl.Trainer") -> None:
    """Stop ``trainer`` from installing its signal handlers (SIGTERM; SIGUSR1 under a
    SLURMEnvironment) over hpctrain's for this and later runs of the trainer."""
    connector = trainer._signal_connector
    if not isinstance(connector, _HpctrainSignalConnector):
        connector.__class__ = _HpctrainSignalConnector


class _HpctrainSignalConnector(_SignalConnector):
    """Lightning's signal connector, minus the handlers: inside an hpctrain worker the
    warning signal and SIGTERM are hpctrain's."""

    def register_signal_handlers(self) -> None:
        self.received_sigterm = False
        self._original_handlers = {}


class _RayStrategyMixin:
    """What the three strategies share: this rank's device, samplers over hpctrain's
    ranks, and hpctrain's signal handlers kept during ``fit``."""

    @property
    def root_device(self) -> torch.device:

        return get_device()

    @property
    def distributed_sampler_kwargs(self) -> Dict[str, Any]:
        return dict(num_replicas=self.world_size, rank=self.global_rank)

    def setup(self, trainer: "pl.Trainer") -> None:
        _keep_hpctrain_signal_handlers(trainer)
        super().setup(trainer)


class RayDDPStrategy(_RayStrategyMixin, pl.strategies.DDPStrategy):
    """Lightning's ``DDPStrategy`` on hpctrain's process group and ranks (all of
    ``DDPStrategy``'s arguments apply, except ``process_group_backend`` and ``timeout``:
    set those in :class:`hpctrain.torch.TorchConfig`)."""


class RayFSDPStrategy(_RayStrategyMixin, pl.strategies.FSDPStrategy):
    """Lightning's ``FSDPStrategy`` on hpctrain's process group and ranks. With
    ``state_dict_type="sharded"`` each rank's shard files become part of one committed
    checkpoint."""


class RayDeepSpeedStrategy(_RayStrategyMixin, pl.strategies.DeepSpeedStrategy):
    """Lightning's ``DeepSpeedStrategy`` on hpctrain's ranks (needs the ``deepspeed``
    package). ZeRO's per-rank shard files become one committed checkpoint."""


class RayLightningEnvironment(LightningEnvironment):
    """Lightning's cluster environment for an hpctrain worker: ranks and sizes come from
    :func:`hpctrain.get_context`, the main address and port from the variables hpctrain's
    torch backend sets (``MASTER_ADDR``, ``MASTER_PORT``). Passed in ``plugins=[...]`` it
    replaces Lightning's own detection (SLURM, torchelastic, MPI, LSF)."""

    def world_size(self) -> int:
        return _context().get_world_size()

    def global_rank(self) -> int:
        return _context().get_world_rank()

    def local_rank(self) -> int:
        return _context().get_local_rank()

    def node_rank(self) -> int:
        return _context().get_node_rank()

    def set_world_size(self, size: int) -> None:
        pass  # hpctrain's context is the truth

    def set_global_rank(self, rank: int) -> None:
        pass

    def teardown(self) -> None:
        pass  # the environment variables are hpctrain's; leave them for the next fit


_STRATEGIES = (RayDDPStrategy, RayFSDPStrategy, RayDeepSpeedStrategy)


def prepare_trainer(trainer: "pl.Trainer") -> "pl.Trainer":
    """Check that ``trainer`` runs on hpctrain's ranks (one of the strategies above and
    :class:`RayLightningEnvironment`) and keep hpctrain's signal handlers; returns it."""
    if not isinstance(trainer.strategy, _STRATEGIES):
        raise RuntimeError(
            f"Invalid strategy class: {type(trainer.strategy)}. To use PyTorch Lightning "
            "with hpctrain, the strategy object should be one of "
            f"{[cls.__name__ for cls in _STRATEGIES]} class or its subclass.\n"
            "HINT: pl.Trainer(strategy=hpctrain.lightning.RayDDPStrategy(), "
            "plugins=[hpctrain.lightning.RayLightningEnvironment()], ...)")
    env = getattr(trainer.strategy, "cluster_environment", None)
    if env is not None and not isinstance(env, RayLightningEnvironment):
        raise RuntimeError(
            "Invalid cluster environment plugin. The expected class is "
            f"`hpctrain.lightning.RayLightningEnvironment` but got {type(env)}!\n"
            "HINT: pass plugins=[hpctrain.lightning.RayLightningEnvironment()] to "
            "pl.Trainer; without it Lightning detects the batch system itself (e.g. "
            "SLURMEnvironment) and installs its own requeue handler.")
    _keep_hpctrain_signal_handlers(trainer)
    return trainer


class RayTrainReportCallback(pl.callbacks.Callback):
    """Reports ``trainer.callback_metrics`` (plus ``epoch`` and ``step``) and a
    checkpoint at every training epoch end (with ``CheckpointConfig(checkpoint_frequency=
    ...)``: at the epoch ends where ``get_context().should_checkpoint()`` says so)::

        checkpoints/checkpoint_00000N/
        └─ checkpoint.ckpt          the Lightning checkpoint (trainer.save_checkpoint)

    Every rank calls ``trainer.save_checkpoint`` (a collective); what each rank writes
    (rank 0's file for DDP, every rank's shard for sharded strategies) is committed as
    one checkpoint."""

    CHECKPOINT_NAME = "checkpoint.ckpt"

    def __init__(self) -> None:
        super().__init__()
        _context()  # fail early, with a hint, outside a training function

    def on_train_epoch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        metrics = {k: (v.item() if isinstance(v, torch.Tensor) else v)
                   for k, v in trainer.callback_metrics.items()}
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step

        if not get_session("RayTrainReportCallback").checkpoint_wanted():
            # CheckpointConfig(checkpoint_frequency=...): not due at this epoch
            hpctrain.report(metrics)
            return
        # on the run's filesystem: the commit moves the file instead of copying it
        staging = _context().get_checkpoint_staging_dir()
        trainer.save_checkpoint(os.path.join(staging, self.CHECKPOINT_NAME), weights_only=False)
        hpctrain.report(metrics, checkpoint=hpctrain.Checkpoint.from_directory(staging))
