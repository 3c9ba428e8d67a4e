"""The rule that decides which staged checkpoints the supervisor commits after the ranks
ended (``rundir/handed_in.py``): a report every rank got past, with no
background commit of it (or of an earlier one) unfinished; a missing mark commits nothing."""
import os

from hpctrain.rundir.handed_in import (MARK_FILE, NOTHING_IN_FLIGHT, ReportMark,
                                                 complete_through, read_marks)

NONE = NOTHING_IN_FLIGHT


def test_the_slowest_rank_bounds_what_is_complete():
    assert complete_through([(10, NONE), (7, NONE), (9, NONE)], lambda it, r: False) == 7


def test_a_background_commit_still_running_holds_back_its_report_and_later_ones():
    assert complete_through([(10, NONE), (10, 6)], lambda it, r: False) == 5


def test_a_background_commit_that_finished_after_the_last_report_counts():
    done = {(6, 1)}
    assert complete_through([(10, NONE), (10, 6)], lambda it, r: (it, r) in done) == 10


def test_marks_are_read_back_as_the_ranks_left_them(tmp_path):
    marks = [ReportMark(str(tmp_path), r, world_size=2, start_iteration=3, mode=0o600)
             for r in range(2)]
    marks[0].set(8, NONE)
    marks[1].set(7, 5)
    assert read_marks(str(tmp_path)) == [(8, NONE), (7, 5)]
    assert oct(os.stat(tmp_path / MARK_FILE.format(rank=1)).st_mode & 0o777) == "0o600"


def test_a_missing_or_short_mark_commits_nothing(tmp_path):
    ReportMark(str(tmp_path), 0, world_size=2, start_iteration=0, mode=0o600).set(5, NONE)
    assert read_marks(str(tmp_path)) is None  # rank 1 never made its mark
    (tmp_path / MARK_FILE.format(rank=1)).write_bytes(b"\0" * 5)
    assert read_marks(str(tmp_path)) is None


def test_ranks_that_disagree_about_the_world_size_commit_nothing(tmp_path):
    ReportMark(str(tmp_path), 0, world_size=2, start_iteration=0, mode=0o600)
    ReportMark(str(tmp_path), 1, world_size=3, start_iteration=0, mode=0o600)
    assert read_marks(str(tmp_path)) is None
