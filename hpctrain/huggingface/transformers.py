"""The Hugging Face ``Trainer`` inside an hpctrain training function
(``ray.train.huggingface.transformers``'s names).

Port a Ray Train Transformers script by changing its imports::

    import ray.train.huggingface.transformers -> import hpctrain.huggingface.transformers
                                                 (or hpctrain.train.huggingface.transformers)

```python
from transformers import Trainer, TrainingArguments
from hpctrain.huggingface.transformers import RayTrainReportCallback, prepare_trainer

def train_func(config):
    args = TrainingArguments(output_dir="out", save_strategy="epoch", ...)
    trainer = Trainer(model=model, args=args, train_dataset=..., eval_dataset=...)
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    ckpt = hpctrain.get_checkpoint()          # after a preemption: the last save's
    if ckpt:
        with ckpt.as_directory() as d:
            trainer.train(resume_from_checkpoint=os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()
```

Ranks: the ``Trainer`` (through Accelerate) finds hpctrain's process group initialized and
the variables hpctrain's torch backend sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), so it trains data-parallel on hpctrain's ranks.

Every time the ``Trainer`` saves (``save_strategy``), :class:`RayTrainReportCallback`
reports the latest logged metrics (``state.log_history[-1]``) with that save as an
hpctrain checkpoint::

    checkpoints/checkpoint_00000N/
    └─ checkpoint/        the Trainer's checkpoint-<step> folder: model, optimizer,
                          scheduler, trainer state and every rank's RNG state

so ``trainer.train(resume_from_checkpoint=...)`` continues with the optimizer, the
learning-rate schedule and the data order where they were. When the scheduler warns, the
run stops right after the next save and resumes from it in the next allocation.
"""
from __future__ import annotations

import os
import shutil
from typing import List

import transformers
from transformers.trainer_callback import TrainerCallback

import hpctrain
from hpctrain.worker.session import current_session

__all__ = ["RayTrainReportCallback", "prepare_trainer"]


def _context():

    if current_session() is None:
        raise RuntimeError(
            "hpctrain.huggingface.transformers: no hpctrain training session in this "
            "process.\nHINT: build the transformers.Trainer inside the training function "
            "that hpctrain.torch.TorchTrainer runs (train_loop_per_worker).")
    return hpctrain.get_context()


def _files(folder: str) -> List[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, names in os.walk(folder) for f in names)


def _rank0_files(files: List[str]) -> List[str]:
    """Rank 0's list of files, known on every rank (one small broadcast)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return files
    box = [files if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class RayTrainReportCallback(TrainerCallback):
    """Reports each of the ``Trainer``'s saves as an hpctrain checkpoint, with the latest
    logged metrics (``state.log_history[-1]``).

    Rank 0 hands in the whole ``checkpoint-<step>`` folder; another rank hands in only the
    files rank 0 cannot see (its ``rng_state_<rank>.pth`` when ``output_dir`` is not on a
    shared filesystem), so the committed checkpoint holds every rank's state once.
    Configure logging, evaluation and saving so that the metrics you want are logged
    before each save (as with Ray: e.g. ``eval_strategy == save_strategy == "epoch"``)."""

    CHECKPOINT_NAME = "checkpoint"

    def __init__(self) -> None:
        super().__init__()
        _context()  # fail early, with a hint, outside a training function

    def on_save(self, args, state, control, **kwargs):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every rank has written its files of this save
        source = os.path.join(args.output_dir,
                              f"{transformers.trainer_utils.PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        mine = _files(source) if os.path.isdir(source) else []
        rank0 = _rank0_files(mine)
        ctx = _context()
        rank = ctx.get_world_rank()
        share = mine if rank == 0 else [f for f in mine if f not in set(rank0)]
        checkpoint = None
        if share:
            staging = ctx.get_checkpoint_staging_dir()
            target = os.path.join(staging, self.CHECKPOINT_NAME)
            for rel in share:
                os.makedirs(os.path.dirname(os.path.join(target, rel)), exist_ok=True)
                shutil.copy2(os.path.join(source, rel), os.path.join(target, rel))
            checkpoint = hpctrain.Checkpoint.from_directory(staging)
        metrics = dict(state.log_history[-1]) if state.log_history else {}
        hpctrain.report(metrics, checkpoint=checkpoint)


def prepare_trainer(trainer: "transformers.Trainer") -> "transformers.Trainer":
    """Check that ``trainer`` trains on hpctrain's ranks; returns it.

    Ray's version also adapts Ray Data iterators; in hpctrain pass a torch ``Dataset``
    (each rank's share is chosen by the ``Trainer``'s distributed sampler)."""
    ctx = _context()
    world = trainer.args.world_size
    if world != ctx.get_world_size():
        raise RuntimeError(
            f"transformers.Trainer sees {world} process(es) but this hpctrain run has "
            f"{ctx.get_world_size()} workers.\nHINT: create the TrainingArguments inside "
            "the training function (after hpctrain set up the process group), not in the "
            "driver script.")
    return trainer
