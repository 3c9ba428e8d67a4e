"""The agreement (``worker/agreement.py``): what travels is a list of integers
whose element-wise max across ranks is the combined vote, and what every rank does after
it is a pure function of that vote and the state every rank holds alike (``decide``):
tested here without processes."""
import time

import pytest

from hpctrain.common.checkpoint_interval import FrequencyPolicy
from hpctrain.common.deadline import SLACK_S, checkpoint_deadline, lateness
from hpctrain.common.context import Posted
from hpctrain.worker.agreement import (POSTED_DEPTH, Rounds, Vote, checkpoint_asked,
                                                 decide)
from hpctrain.rundir.handed_in import NOTHING_IN_FLIGHT


def _combine(*votes):
    return Vote.from_wire([max(col) for col in zip(*(v.to_wire() for v in votes))])


def test_a_vote_survives_the_wire():
    v = Vote(staged_since=True, gap=17, in_flight=42, late_after=True)
    assert Vote.from_wire(v.to_wire()) == v
    assert Vote.from_wire(Vote().to_wire()).in_flight == NOTHING_IN_FLIGHT


def test_the_max_of_the_wire_is_any_flag_and_the_lowest_report_in_flight():
    rank0 = Vote(gap=8, ckpt_now=True, rank0_now=True, in_flight=12)
    rank1 = Vote(stop=True, in_flight=9)
    rank2 = Vote()
    combined = _combine(rank0, rank1, rank2)
    assert combined == Vote(stop=True, gap=8, ckpt_now=True, rank0_now=True, in_flight=9)
    assert _combine(rank2, rank2).in_flight == NOTHING_IN_FLIGHT


def _decide(vote, iteration=10, stop_agreed=False, publish_due=False, **kw):
    return decide(vote, iteration=iteration, stop_agreed=stop_agreed,
                  publish_due=publish_due, **kw)


def test_fast_quiet_reports_agree_after_the_gap_and_post_their_rounds():
    d = _decide(Vote(gap=16))
    assert (d.next_agreement, d.posting, d.stop_agreed, d.need_proof) == (26, True, False, False)
    assert not _decide(Vote(gap=16), world_size=1).posting  # one rank: nothing to post
    assert not _decide(Vote(gap=1)).posting  # reports slower than the budget
    assert _decide(Vote(gap=0)).next_agreement == 11


def test_a_stop_agreed_at_a_checkpoint_report_takes_the_next_reports_checkpoint():
    """No training function was told when the report that agrees the stop handed its
    checkpoint in; the stop takes the next report's (every rank told by then)."""
    first = _decide(Vote(stop=True, ckpt_now=True, rank0_now=True, sync_now=True, gap=8))
    assert first.stop_agreed and first.defer_now and not first.agreed_checkpoint
    assert first.next_agreement == 11 and not first.posting
    assert first.need_proof and first.publish_below == NOTHING_IN_FLIGHT
    second = _decide(Vote(ckpt_now=True, rank0_now=True, sync_now=True), iteration=11,
                     stop_agreed=True, publish_due=first.publish_due)
    assert second.agreed_checkpoint and not second.defer_now and second.stop_agreed


def test_a_stop_whose_next_checkpoint_would_be_late_takes_this_one():
    d = _decide(Vote(stop=True, ckpt_now=True, sync_now=True, late_after=True))
    assert d.agreed_checkpoint and not d.defer_now


def test_a_checkpoint_that_would_end_after_the_deadline_is_not_started():
    """late_now: this report's checkpoints are dropped (also from what is in flight); a
    stop's checkpoint dropped so ends the training now."""
    d = _decide(Vote(ckpt_now=True, rank0_now=True, async_now=True, in_flight=10,
                     late_now=True, gap=8))
    assert (d.ckpt_now, d.rank0_now, d.late_now, d.stop_now) == (False, False, True, False)
    assert d.publish_below == NOTHING_IN_FLIGHT and not d.checkpointed and not d.posting
    stop = _decide(Vote(stop=True, ckpt_now=True, sync_now=True, late_now=True))
    assert stop.stop_now and not stop.agreed_checkpoint and not stop.need_proof
    assert not _decide(Vote(late_now=True), stop_agreed=True).stop_now  # nothing handed in


def test_a_commit_in_flight_is_published_only_below_it_and_agreed_again_soon():
    d = _decide(Vote(in_flight=7, gap=32))
    assert d.publish_below == 7 and d.next_agreement == 11 and not d.posting
    final = _decide(Vote(in_flight=7), final=True)
    assert final.need_proof and final.publish_below == NOTHING_IN_FLIGHT


def test_after_a_checkpoint_the_next_report_agrees_too():
    d = _decide(Vote(staged_since=True, gap=32))
    assert d.checkpointed and d.publish_due and d.next_agreement == 11
    assert _decide(Vote(gap=32), publish_due=True).next_agreement == 11


def test_a_checkpoint_due_by_time_is_asked_for_after_this_report_unless_one_came_now():
    assert _decide(Vote(due=True, gap=4)).due_here
    assert not _decide(Vote(due=True, ckpt_now=True, sync_now=True)).due_here
    assert not _decide(Vote(due=True), final=True).due_here
    assert not _decide(Vote(due=True, gap=4)).posting


@pytest.mark.parametrize("left, late", [(10.0, False), (2.0, True)])
def test_should_checkpoint_is_false_when_the_next_checkpoint_would_be_late(left, late):
    """The allocation's end in ``left`` + 15 s (the requeue's slack), checkpoints that
    cost 3 s: with 2 s left should_checkpoint() says no, even when a checkpoint is due by
    count; with 10 s it says yes; after a stop was agreed, yes."""
    frequency = FrequencyPolicy(1, history_commit_s=3.0)
    now = time.time()
    deadline = checkpoint_deadline(now + SLACK_S + left, None)
    late_next = lateness(now, 0.0, frequency.commit_cost_s(), deadline)[1]
    due = frequency.due_by_count(3)  # after report 3, a checkpoint every report
    assert checkpoint_asked(False, late_next, due) is (not late)
    assert checkpoint_asked(True, late_next, due) is True  # the stop's checkpoint


class _Recorder:
    """A coordinator for one rank standing in for two: a round's result is this rank's
    own values (or, for a posted round, the values it is told to return); every call is
    written down in order."""

    def __init__(self):
        self.log, self.posted_result = [], None

    def allreduce_max(self, values):
        self.log.append("agree")
        return list(values)

    def allreduce_max_async(self, values):
        result = list(self.posted_result or values)

        def finish():
            self.log.append("posted round done")
            return result
        return Posted(finish)


def test_a_synchronous_round_settles_the_posted_ones_before_taking_the_vote():
    """A warning that reaches the rank while it waits for the posted rounds is in the
    vote of the round that follows them (not found a posted round later)."""
    coordinator = _Recorder()
    rounds = Rounds(coordinator, world_size=2, start_iteration=0)
    for it in (1, 2):
        assert rounds.post(it, lambda: Vote(gap=4))

    def vote():  # the warning came while the rank waited for the posted rounds
        coordinator.log.append("vote")
        return Vote(stop="posted round done" in coordinator.log, gap=4)
    d = rounds.agree(3, vote)
    assert coordinator.log == ["posted round done", "posted round done", "vote", "agree"]
    assert d.stop_agreed and rounds.stop_agreed and d.next_agreement == 4


def test_a_posted_round_that_saw_a_stop_makes_the_next_agreement_wait():
    coordinator = _Recorder()
    rounds = Rounds(coordinator, world_size=2, start_iteration=0)
    coordinator.posted_result = Vote(stop=True, gap=4).to_wire()  # another rank was warned
    assert rounds.post(1, lambda: Vote(gap=4))
    coordinator.posted_result = None
    for it in range(2, POSTED_DEPTH + 1):
        assert rounds.post(it, lambda: Vote(gap=4))
    # the round posted first is applied now: it saw the stop, so this report agrees
    assert not rounds.post(POSTED_DEPTH + 1, lambda: Vote(gap=4))
    assert not rounds.posting
