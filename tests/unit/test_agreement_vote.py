"""The agreement's vote (``_internal/worker/agreement.py``): what travels is a list of
integers whose element-wise max across ranks is the combined vote."""
from hpctrain._internal.worker.agreement import Vote
from hpctrain._internal.rundir.handed_in import NOTHING_IN_FLIGHT


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
