"""``ray.train.v2.api.data_parallel_trainer``."""
from ....trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
