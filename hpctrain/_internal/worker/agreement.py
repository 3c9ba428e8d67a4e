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


class Decision(NamedTuple):
    """What every rank does after an agreement (the same on every rank: :func:`decide`
    reads only the combined vote and state every rank holds alike)."""
    #: a checkpoint is handed in at this report (not one skipped as too late), rank 0's
    #: among them; one of them commits synchronously
    ckpt_now: bool
    rank0_now: bool
    #: a checkpoint handed in at this report / at the next would end after the deadline:
    #: report() does not start it
    late_now: bool
    late_next: bool
    #: the stop's checkpoint would end after the deadline: end at this report without it
    stop_now: bool
    #: a stop is agreed (at this agreement or before)
    stop_agreed: bool
    #: this report's checkpoint is the stop's: end once it is committed
    agreed_checkpoint: bool
    #: a stop agreed at this very report, whose checkpoint no training function was told
    #: to write: the stop takes the next report's checkpoint
    defer_now: bool
    #: one more collective proves every rank staged, then rank 0 publishes
    need_proof: bool
    #: publish only the checkpoints of reports below this one (NOTHING_IN_FLIGHT: all)
    publish_below: int
    #: a checkpoint was staged since the last agreement, or is handed in now
    checkpointed: bool
    #: checkpoint_frequency="auto": should_checkpoint() says so after this report
    due_here: bool
    #: agree at the next report as well (rank 0's names known before others copy)
    publish_due: bool
    #: the report of the next agreement
    next_agreement: int
    #: the next agreement reports post their rounds instead of waiting for them
    posting: bool
    #: the gap rank 0 chose (what a posted round's poster used)
    gap: int


def decide(v: Vote, *, iteration: int, stop_agreed: bool, publish_due: bool,
           final: bool = False, world_size: int = 2) -> Decision:
    """The rules of an agreement at report ``iteration``, from the combined vote ``v``
    and the state every rank holds alike (a stop agreed before, a publication due):
    a pure function, the same on every rank.

    >>> d = decide(Vote(gap=8), iteration=10, stop_agreed=False, publish_due=False)
    >>> d.next_agreement, d.posting, d.stop_agreed
    (18, True, False)
    >>> d = decide(Vote(stop=True, ckpt_now=True, sync_now=True, gap=8), iteration=10,
    ...            stop_agreed=False, publish_due=False)
    >>> d.defer_now, d.agreed_checkpoint, d.next_agreement
    (True, False, 11)
    """
    ckpt_now, rank0_now, sync_now, in_flight = v.ckpt_now, v.rank0_now, v.sync_now, v.in_flight
    # a stop's checkpoint handed in too late to be committed: the training ends at once,
    # without it (a loop that hands in none is stopped at the deadline)
    stop_now = bool(v.late_now and ckpt_now) and (v.stop or stop_agreed)
    if v.late_now:
        # this report's checkpoints are not started (report() skips them): the agreement
        # goes on as if none was handed in
        ckpt_now = rank0_now = sync_now = False
        if in_flight == iteration:
            in_flight = NOTHING_IN_FLIGHT
    any_inflight = in_flight != NOTHING_IN_FLIGHT
    newly_stopped = v.stop and not stop_agreed
    stop_agreed = stop_agreed or v.stop
    # a checkpoint of this very report: stopping after it loses no iteration. Not the
    # report that agrees the stop: no training function was told yet (should_checkpoint,
    # get_preemption_info say so from this report on), so the stop takes the next one;
    # unless that one would end after the deadline: then this one, the last in time
    agreed_checkpoint = ckpt_now and (not newly_stopped or v.late_after)
    defer_now = ckpt_now and newly_stopped and not v.late_after
    if final or stop_agreed:
        # every rank waits for its commit in flight and stages synchronously; one more
        # collective proves it, then rank 0 publishes everything staged
        need_proof, publish_below = ckpt_now or any_inflight, NOTHING_IN_FLIGHT
    else:
        # what a rank still has in flight (this report's included) is not complete:
        # publish only the checkpoints of earlier reports
        need_proof, publish_below = sync_now, in_flight
    checkpointed = v.staged_since or ckpt_now
    # after a checkpoint, agree at the next report too: a loop that checkpoints at every
    # report then agrees at every one, so that rank 0's names are known before the other
    # ranks copy (no name is written twice); the same while a commit is in flight, so
    # that it is published soon after it ends
    publish_due = publish_due or checkpointed
    soon = stop_agreed or checkpointed or any_inflight or publish_due
    return Decision(
        ckpt_now=ckpt_now, rank0_now=rank0_now, late_now=v.late_now, late_next=v.late_next,
        stop_now=stop_now, stop_agreed=stop_agreed, agreed_checkpoint=agreed_checkpoint,
        defer_now=defer_now, need_proof=need_proof, publish_below=publish_below,
        checkpointed=checkpointed, due_here=v.due and not (ckpt_now or final),
        publish_due=publish_due, next_agreement=iteration + (1 if soon else max(1, v.gap)),
        # nothing to commit, no stop, reports faster than the budget: the next agreement
        # reports post their rounds instead of waiting for them
        posting=world_size > 1 and v.gap > 1 and not (
            final or soon or v.due or v.late_now or v.late_next),
        gap=v.gap)


def checkpoint_asked(stop_agreed: bool, late_next: bool, due: bool) -> bool:
    """``should_checkpoint()``: after an agreed stop, always (the stop's checkpoint takes
    precedence: handed in too late, it is not started and the training ends at once);
    else not when the next checkpoint would end after the deadline; else when one is due
    (by count, or as the agreement said).

    >>> checkpoint_asked(False, False, True), checkpoint_asked(False, True, True)
    (True, False)
    >>> checkpoint_asked(True, True, False)
    True
    """
    return stop_agreed or (not late_next and due)


__all__ = ["Decision", "Vote", "checkpoint_asked", "decide"]
