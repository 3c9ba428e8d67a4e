"""What each rank brings to an agreement, as a typed value (``session.py`` runs the
rounds). An agreement is one element-wise max over the job's communicator: every rank
sends a :class:`Vote` as a list of integers (:meth:`Vote.to_wire`) and reads back the
combined vote (:meth:`Vote.from_wire`), the same on every rank, so every rank decides the
same thing from it. Flags combine as "any rank"; ``in_flight`` as the lowest report still
committing anywhere (it travels negated, so that the max gives the min); the fields only
rank 0 fills (the gap, the checkpoint policy, the deadline) are 0 on the other ranks.
"""
from __future__ import annotations

from typing import List, NamedTuple, Sequence

from hpctrain._internal.rundir.handed_in import NOTHING_IN_FLIGHT


class Vote(NamedTuple):
    #: a checkpoint was staged since the last agreement
    staged_since: bool = False
    #: a stop was asked (the scheduler's warning reached this rank)
    stop: bool = False
    #: rank 0: reports until the next agreement, from the pace of the reports
    gap: int = 0
    #: a checkpoint is handed in at this very report
    ckpt_now: bool = False
    #: rank 0 hands one in at this report (the others skip the names it writes)
    rank0_now: bool = False
    #: the lowest report whose commit runs in the background (NOTHING_IN_FLIGHT: none)
    in_flight: int = NOTHING_IN_FLIGHT
    #: this report's checkpoint commits in the background / synchronously
    async_now: bool = False
    sync_now: bool = False
    #: rank 0: checkpoint_frequency="auto" says a checkpoint is due
    due: bool = False
    #: rank 0: a checkpoint handed in at this report / at the next would end after the
    #: deadline (deadline.py)
    late_now: bool = False
    late_next: bool = False
    #: rank 0: a checkpoint handed in after this report's own commit ended would end after
    #: the deadline (a stop agreed at a checkpoint's report then takes that checkpoint)
    late_after: bool = False

    def to_wire(self) -> List[int]:
        return [-v if f == "in_flight" else int(v) for f, v in zip(self._fields, self)]

    @classmethod
    def from_wire(cls, values: Sequence[int]) -> "Vote":
        out = [(-v if f == "in_flight" else v if f == "gap" else bool(v))
               for f, v in zip(cls._fields, values)]
        return cls(*out)


__all__ = ["Vote"]
