"""Which blamed nodes are kept out of the next allocation, and the bound."""
from hpctrain.allocation.badnodes import blame, exclusion_limit, to_exclude


def test_the_newest_distinct_blamed_nodes_within_the_limit():
    state = {}
    for host in ("n1", "n2", "n1", "n3", ""):
        blame(state, host, "node", 1, "42")
    assert [r["host"] for r in state["bad_nodes"]] == ["n1", "n2", "n1", "n3"]
    assert to_exclude(state, 2) == ["n1", "n3"]
    assert to_exclude(state, 5) == ["n1", "n2", "n3"]
    assert to_exclude(state, 0) == [] == to_exclude({}, 3)


def test_never_so_many_that_the_job_cannot_fit_its_partition():
    assert exclusion_limit(4, 2, 1) == 1      # the 2-node test cluster, a 1-node job
    assert exclusion_limit(4, 2, 2) == 0      # a job of the whole partition: none
    assert exclusion_limit(4, 100, 8) == 4    # failure.max_excluded_nodes
    assert exclusion_limit(4, None, 8) == 4   # partition size unknown
