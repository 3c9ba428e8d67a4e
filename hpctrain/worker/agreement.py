"""What each rank brings to an agreement, as a typed value; the rules every rank applies
to the combined vote (:func:`decide`); and the schedule of the rounds (:class:`Rounds`:
when the next agreement is, which rounds are posted and not yet applied). An agreement is one element-wise max over the job's communicator: every rank
sends a :class:`Vote` as a list of integers (:meth:`Vote.to_wire`) and reads back the
combined vote (:meth:`Vote.from_wire`), the same on every rank, so every rank decides the
same thing from it. Flags combine as "any rank"; ``in_flight`` as the lowest report still
committing anywhere (it travels negated, so that the max gives the min); the fields only
rank 0 fills (the gap, the checkpoint policy, the deadline) are 0 on the other ranks.
"""
from __future__ import annotations

import collections
import time
from typing import Callable, Deque, List, NamedTuple, Sequence

from hpctrain.common.context import Coordinator, Posted
from hpctrain.rundir.handed_in import NOTHING_IN_FLIGHT

AGREE_BUDGET_S = 0.005   # agree about this often, at most, when reports come faster
#: and at least every MAX_GAP reports. 256: where reports come back to back (about 10 µs
#: apart), the budget alone would space them some 500 apart; one report in 256 posting a
#: round (0.4 %) keeps the posting's cost (60-250 µs on 2 cores) out of the 99th
#: percentile of report(). The price is the case of reports that suddenly slow down:
#: the schedule agreed at the fast pace still holds, for up to
#: (POSTED_DEPTH + 1) * MAX_GAP reports (docs/guide/checkpoints.md)
MAX_GAP = 256
#: a posted agreement is applied this many agreement reports after it was posted (while
#: reports come fast: see Rounds.post), so a rank or a collective's thread that the
#: machine holds back for a few milliseconds does not make the others wait: 2 rounds of
#: at most 5 ms each
POSTED_DEPTH = 2


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


#: before the first agreement: nothing decided, nothing late, nothing to publish
NOTHING_DECIDED = Decision(
    ckpt_now=False, rank0_now=False, late_now=False, late_next=False, stop_now=False,
    stop_agreed=False, agreed_checkpoint=False, defer_now=False, need_proof=False,
    publish_below=NOTHING_IN_FLIGHT, checkpointed=False, due_here=False, publish_due=False,
    next_agreement=0, posting=False, gap=1)


def gap_for(pace: float) -> int:
    """Rank 0: the reports until the next agreement, at ``pace`` seconds a report (an
    agreement about every ``AGREE_BUDGET_S``, at least every ``MAX_GAP`` reports).

    >>> gap_for(0.0), gap_for(0.001), gap_for(1.0)
    (256, 5, 1)
    """
    return MAX_GAP if pace <= 0 else max(1, min(MAX_GAP, int(AGREE_BUDGET_S / pace)))


class Rounds:
    """One rank's side of the agreements: when the next one is, the rounds posted and
    not yet applied, and what the last synchronous agreement decided (the same on every
    rank). The session brings the votes; this object runs the collectives."""

    def __init__(self, coordinator: Coordinator, world_size: int, start_iteration: int):
        self.coordinator = coordinator
        self.world_size = world_size
        self.next_agreement = start_iteration + 1
        self._agreed_at, self._agreed_iteration = time.perf_counter(), start_iteration
        #: the next agreement report posts its round without waiting (an agreed decision)
        self.posting = False
        #: the rounds posted at the last such reports, oldest first (at most POSTED_DEPTH)
        self._posted: Deque[Posted] = collections.deque()
        self._posted_gap = 1  # the gap to the next agreement that round's poster used
        #: the last synchronous agreement's decision
        self.last = NOTHING_DECIDED
        self.stop_agreed = False
        self.publish_due = False

    def due(self, iteration: int) -> bool:
        """Report ``iteration`` is an agreement report (posted or synchronous)."""
        return iteration >= self.next_agreement

    def pace(self, iteration: int) -> float:
        """Seconds per report since the last agreement (rank 0 chooses the gap by it)."""
        return ((time.perf_counter() - self._agreed_at)
                / max(1, iteration - self._agreed_iteration))

    def post(self, iteration: int, vote: Callable[[], Vote]) -> bool:
        """An agreement report while reports come fast and nothing is to commit: post
        this report's round without waiting, and apply the round posted ``POSTED_DEPTH``
        agreement reports ago (every rank waits for that same round here, long after
        every rank posted it); the report then goes on like one between agreements (a
        checkpoint handed in now is committed at a later, synchronous agreement). Returns
        False when this report must agree synchronously instead: the applied round saw a
        checkpoint staged, a commit in flight, a stop asked, a checkpoint due, or reports
        slower than ``AGREE_BUDGET_S`` apart — the same decision on every rank, since
        every rank got the same values."""
        gap = self._posted_gap
        if len(self._posted) >= POSTED_DEPTH:
            v = Vote.from_wire(self._posted.popleft().wait())
            gap = v.gap
            # (a checkpoint that would end after the deadline: the waiting agreement
            # decides afresh which are skipped)
            if v.staged_since or v.stop or v.gap <= 1 or v.due or v.late_now or v.late_next \
                    or v.in_flight != NOTHING_IN_FLIGHT:
                self.posting = False
                return False
        self._posted.append(self.coordinator.allreduce_max_async(vote().to_wire()))
        self._posted_gap = gap
        self.next_agreement = iteration + gap
        self._agreed_at, self._agreed_iteration = time.perf_counter(), iteration
        return True

    def wait_posted(self) -> None:
        """Every posted round done (before another collective of the coordinator); they
        stay to be applied."""
        for posted in self._posted:
            posted.wait()

    def agree(self, iteration: int, vote: Callable[[], Vote], *, final: bool = False
              ) -> Decision:
        """One synchronous agreement at report ``iteration`` (every rank at the same
        report): the rounds posted before are settled (this one covers what they saw),
        then this rank's ``vote()`` taken (a warning that came meanwhile is in it), the
        votes combined, and :func:`decide` applied."""
        while self._posted:
            self._posted.popleft().wait()
        local = vote().to_wire()
        v = Vote.from_wire(self.coordinator.allreduce_max(local)
                           if self.world_size > 1 else local)
        d = decide(v, iteration=iteration, stop_agreed=self.stop_agreed,
                   publish_due=self.publish_due, final=final, world_size=self.world_size)
        self.last, self.stop_agreed, self.publish_due = d, d.stop_agreed, d.publish_due
        self.next_agreement = d.next_agreement
        self._agreed_at, self._agreed_iteration = time.perf_counter(), iteration
        self.posting, self._posted_gap = d.posting, d.gap
        return d

    def published(self) -> None:
        """Rank 0 published what the last agreement allowed: a checkpoint still in
        flight is published at a later agreement."""
        self.publish_due = self.publish_due and self.last.publish_below != NOTHING_IN_FLIGHT


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


__all__ = ["AGREE_BUDGET_S", "MAX_GAP", "NOTHING_DECIDED", "POSTED_DEPTH", "Decision",
           "Rounds", "Vote", "checkpoint_asked", "decide", "gap_for"]
