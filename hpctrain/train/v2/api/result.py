"""``ray.train.v2.api.result``."""
from ....result import Result

__all__ = ["Result"]
