"""``ray.train.collective``: :func:`barrier` and :func:`broadcast_from_rank_zero`, inside
a training function, over the ranks' own coordination group (the one ``report()``
agrees over: the backend's process group, MPI's communicator, or hpctrain's TCP group).

```python
from hpctrain import train
from hpctrain.train.collective import barrier, broadcast_from_rank_zero

def train_func():
    data = {"seed": 1234} if train.get_context().get_world_rank() == 0 else None
    data = broadcast_from_rank_zero(data)     # rank 0's dict, on every rank
    barrier()
```
Every rank must call them in the same order (as every collective).
"""
from __future__ import annotations

from typing import Optional, TypeVar

from hpctrain.common.context import get_session

__all__ = ["barrier", "broadcast_from_rank_zero"]

T = TypeVar("T", bound=Optional[object])


def broadcast_from_rank_zero(data: T) -> T:
    """Rank 0's ``data`` on every rank (what the other ranks pass is ignored); also a
    barrier. Meant for small values (a warning above 1000 bytes pickled, as Ray; a
    ValueError above 16 MiB). Pickling errors are raised on rank 0."""
    return get_session("train.collective.broadcast_from_rank_zero()").broadcast_from_rank_zero(
        data)


def barrier() -> None:
    """Return once every rank has called it."""
    get_session("train.collective.barrier()").barrier()
