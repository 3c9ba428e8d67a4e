"""Checkpoints of torch state for ``report(..., checkpoint_upload_mode="async")``.

* :func:`state_dict_checkpoint`: a (non-sharded) state dict copied to host memory now
  (every tensor detached and copied to the CPU, the rest deep-copied), written with
  ``torch.save`` when the checkpoint is committed — in the background with
  ``checkpoint_upload_mode="async"`` — so that the training may change the model as soon
  as ``report()`` returns.
* :func:`dcp_checkpoint`: sharded state (FSDP, DTensor) saved with
  ``torch.distributed.checkpoint.async_save`` into this rank's staging directory; the
  commit waits for DCP's future before it stages the files. DCP plans the save with a
  collective in the calling thread (every rank must call this, at the same point) and
  finishes it in its own thread over a process group of its own (Gloo, made here once),
  never the training's group, so that it cannot interleave with the training's
  collectives; a call waits for the previous save to finish (two saves in flight would
  interleave theirs). Load with ``torch.distributed.checkpoint.load(state, checkpoint_id=
  ckpt.path)``: the committed checkpoint holds every rank's ``.distcp`` files and
  rank 0's ``.metadata``.

Either can also be reported synchronously; then the writing happens in ``report()``.
"""
from __future__ import annotations

import copy
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import hpctrain
from hpctrain.checkpoint import Checkpoint

_DCP_GROUP = None
_DCP_PENDING = None  # the future of the save in flight


def _staging_dir() -> str:

    ctx = hpctrain.get_context()
    if ctx is None or not hasattr(ctx, "get_checkpoint_staging_dir"):
        raise RuntimeError("hpctrain.torch checkpoints must be made inside a training "
                           "function started by a trainer\nHINT: call it in train_func")
    return ctx.get_checkpoint_staging_dir()


class _HostBuffers:
    """Host memory for :func:`state_dict_checkpoint`'s copies, reused from one checkpoint
    to the next: page-locked (pinned) for tensors on a GPU, so the copy runs at the
    link's speed and needs no fresh pages (measured on an H200: 256 MiB took 170–190 ms
    into new pageable memory; see scripts/gpu-check.sh). A checkpoint holds its buffers
    until its file is written, then gives them back; the pool keeps the last set only, so
    the memory it holds is one state dict's size."""

    def __init__(self) -> None:
        self._free: Dict[Tuple[Any, ...], List[Any]] = {}
        self._lock = threading.Lock()

    def take(self, t):
        import torch

        key = (tuple(t.shape), t.dtype, t.is_cuda)
        with self._lock:
            free = self._free.get(key)
            if free:
                return free.pop()
        if t.is_cuda:
            try:
                return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            except RuntimeError:  # no page-locked memory left: pageable will do
                pass
        return torch.empty(t.shape, dtype=t.dtype)

    def give_back(self, buffers: List[Any]) -> None:
        free: Dict[Tuple[Any, ...], List[Any]] = {}
        for b in buffers:
            free.setdefault((tuple(b.shape), b.dtype, b.is_pinned()), []).append(b)
        with self._lock:
            self._free = free


_BUFFERS = _HostBuffers()


def _to_host(value: Any, taken: Optional[List[Any]] = None) -> Any:
    """A host copy of ``value``: plain dense tensors into buffers of ``_BUFFERS`` (listed
    in ``taken``; a GPU copy is issued asynchronously, so the caller synchronizes), any
    other tensor copied as torch does it, the rest deep-copied."""
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach()
        if taken is None or type(t) is not torch.Tensor or t.layout != torch.strided \
                or t.is_quantized or not (t.is_cuda or t.device.type == "cpu"):
            return t.to("cpu", copy=True)
        buf = _BUFFERS.take(t)
        buf.copy_(t, non_blocking=t.is_cuda)
        taken.append(buf)
        return buf
    if isinstance(value, dict):
        return type(value)((k, _to_host(v, taken)) for k, v in value.items())
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_to_host(v, taken) for v in value)
    return copy.deepcopy(value)


def state_dict_checkpoint(state_dict: Dict[str, Any], filename: str = "state.pt"
                          ) -> Checkpoint:
    """A checkpoint of ``state_dict`` (e.g. ``{"model": model.state_dict(), "opt":
    opt.state_dict(), "epoch": epoch}``) as one file, ``filename``, written by
    ``torch.save`` from a host-memory copy taken now."""
    import torch

    path = _staging_dir()
    taken: List[Any] = []
    host = _to_host(state_dict, taken)
    if any(b.is_pinned() for b in taken):  # the GPU copies were issued asynchronously
        torch.cuda.synchronize()

    def write() -> None:
        try:
            torch.save(host, os.path.join(path, filename))
        finally:
            _BUFFERS.give_back(taken)

    ckpt = Checkpoint(path)
    ckpt._complete = write
    return ckpt


def dcp_checkpoint(state_dict: Dict[str, Any], *, process_group: Optional[Any] = None
                   ) -> Checkpoint:
    """This rank's shard of ``state_dict`` saved with
    ``torch.distributed.checkpoint.async_save`` (every rank calls it at the same point).
    ``process_group``: DCP's group (default: a Gloo group of all ranks made for it)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    global _DCP_GROUP
    if process_group is None and dist.is_available() and dist.is_initialized():
        if _DCP_GROUP is None:
            _DCP_GROUP = dist.new_group(backend="gloo")
        process_group = _DCP_GROUP
    global _DCP_PENDING
    if _DCP_PENDING is not None:
        # the previous save finishes over the same group: one save at a time, or the
        # two interleave their collectives
        pending, _DCP_PENDING = _DCP_PENDING, None
        pending.result()
    path = _staging_dir()
    future = dcp.async_save(state_dict, checkpoint_id=path, process_group=process_group)
    result = getattr(future, "upload_completion", future)  # AsyncSaveResponse (newer torch)
    _DCP_PENDING = result

    ckpt = Checkpoint(path)
    ckpt._complete = result.result
    return ckpt


__all__ = ["state_dict_checkpoint", "dcp_checkpoint"]
