"""Step time per rank from heartbeat records: ranks at their own pace, and ranks in lock
step whose late arrival names the slow one."""
from hpctrain.allocation.stragglers import Pace


def _feed(pace, rank, step_s, offset=0.0, steps=20, host="n1"):
    for c in range(1, steps + 1):
        pace.observe(rank, {"rank": rank, "progress": c, "time": 1000 + offset + c * step_s,
                            "phase": "train", "host": host})


def test_ranks_at_their_own_pace():
    pace = Pace(2.0)
    _feed(pace, 0, 0.1)
    _feed(pace, 1, 0.1)
    _feed(pace, 2, 0.35, host="n7")
    s = pace.summary()
    assert (s["slowest_rank"], s["slowest_host"], s["ratio"]) == (2, "n7", 3.5)
    assert pace.warning() == ("straggler: rank 2 on n7 takes 0.35 s per step, 3.50× the "
                              "other ranks' median (0.1 s; failure.straggler_factor = 2)")
    assert pace.warning() is None  # once per attempt


def test_ranks_in_lock_step_the_late_one_is_the_slow_one():
    pace = Pace(2.0)
    _feed(pace, 0, 0.5, offset=0.1)    # works 0.1 s, then waits 0.4 s for rank 1
    _feed(pace, 1, 0.5, offset=0.5)    # works 0.5 s: arrives 0.4 s later every step
    s = pace.summary()
    assert s["slowest_rank"] == 1 and abs(s["ranks"]["0"]["step_s"] - 0.1) < 1e-6
    assert abs(s["ratio"] - 5.0) < 1e-3


def test_no_warning_before_every_rank_made_enough_steps_or_when_off():
    pace = Pace(2.0)
    _feed(pace, 0, 0.1, steps=3)
    _feed(pace, 1, 0.5, steps=3)
    assert pace.summary()["ratio"] == 5.0 and pace.warning() is None
    off = Pace(0)
    _feed(off, 0, 0.1)
    _feed(off, 1, 0.5)
    assert off.warning() is None


def test_the_first_move_is_taken_back_at_the_ranks_pace():
    pace = Pace(2.0)
    assert pace.first_move() is None
    pace.observe(0, {"progress": 5, "time": 1010.0, "phase": "train"})
    assert pace.first_move() is None  # one record past the first move: unknown
    pace.observe(0, {"progress": 9, "time": 1012.0, "phase": "train"})
    assert pace.first_move() == 1008.0  # 0.5 s a move, 4 moves before count 5
    pace.observe(1, {"progress": 1, "time": 1008.5, "phase": "train"})
    assert pace.first_move() == 1008.5  # the last rank to start
