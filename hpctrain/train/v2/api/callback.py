"""``ray.train.v2.api.callback``."""
from ....user_callback import UserCallback

__all__ = ["UserCallback"]
