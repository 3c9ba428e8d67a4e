"""Horovod integration: ``HorovodTrainer`` for PyTorch training functions.

```python
import horovod.torch as hvd
from hpctrain.horovod import HorovodTrainer

def train_func(config):
    hvd.init()                       # rank/size match hpctrain.get_context()
    ...

HorovodTrainer(train_func, scaling_config=ScalingConfig(num_workers=4)).fit()
```

Horovod's last release does not build against torch 2.x as published:
``scripts/install-horovod.sh`` builds it (see :mod:`hpctrain.backends.horovod` for the
controllers and the rendezvous).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..backends.horovod import HorovodConfig
from ..trainer import DataParallelTrainer

__all__ = ["HorovodTrainer", "HorovodConfig"]


class HorovodTrainer(DataParallelTrainer):
    """Ray Train's HorovodTrainer (PyTorch training functions)."""

    _backend_name = "horovod"
    _backend_config_cls = HorovodConfig

    def __init__(self, train_loop_per_worker, *, train_loop_config: Optional[Dict[str, Any]] = None,
                 horovod_config: Optional[HorovodConfig] = None, **kwargs):
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=self._backend_config(horovod_config, "horovod_config"), **kwargs)
