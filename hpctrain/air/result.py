"""``ray.air.result``: :class:`hpctrain.Result` under Ray's module path."""
from ..result import Result

__all__ = ["Result"]
