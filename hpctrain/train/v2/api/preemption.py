"""``ray.train.v2.api.preemption``."""
from ....preemption import PreemptionInfo

__all__ = ["PreemptionInfo"]
