"""Ray Train v2's preemption API on a batch system: :func:`hpctrain.get_preemption_info`
returns a :class:`PreemptionInfo` once the scheduler warned that the allocation ends (a
preemption or the time limit: ``FailureConfig(warning_signal=..., warning_time=...)``).

A batch scheduler ends the whole allocation, not one node: every node of the job and
every rank are in ``preempted_node_to_ranks``. The deadline is when the supervisor stops
ranks that have not checkpointed (about ``warning_time`` − 15 s after the warning).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

__all__ = ["PreemptionInfo", "allocation_ranks"]


@dataclass(frozen=True)
class PreemptionInfo:
    """Ray's ``ray.train.PreemptionInfo``: ``deadline_ms`` (UNIX time in milliseconds;
    None when no deadline is known: the scheduler's signal reached the ranks directly) and
    ``preempted_node_to_ranks`` (host name: the world ranks on it)."""

    deadline_ms: Optional[int]
    preempted_node_to_ranks: Dict[str, List[int]]

    @property
    def preempted_node_ids(self) -> List[str]:
        """The preempted nodes' host names, sorted."""
        return sorted(self.preempted_node_to_ranks)

    @property
    def preempted_ranks(self) -> List[int]:
        """Every affected world rank, ascending."""
        return sorted({r for ranks in self.preempted_node_to_ranks.values() for r in ranks})


def allocation_ranks(hosts: Sequence[str], world_size: int,
                     local_world_size: int) -> Dict[str, List[int]]:
    """{host: its world ranks} for ranks placed node by node (rank = node_rank ×
    local_world_size + local_rank, as the launchers place them); every rank under the
    first host when the sizes do not say so (uneven nodes).

    >>> allocation_ranks(["n1", "n2"], 4, 2)
    {'n1': [0, 1], 'n2': [2, 3]}
    """
    if hosts and len(hosts) * local_world_size == world_size:
        return {h: list(range(i * local_world_size, (i + 1) * local_world_size))
                for i, h in enumerate(hosts)}
    return {(hosts[0] if hosts else "localhost"): list(range(world_size))}
