"""bench/goodput_sim.py: the Young–Daly interval, the simulation's bookkeeping in cases
with a known answer, and that "auto" lands near the scanned optimum."""
import math
import os
import sys

import pytest
from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT,
                                "bench"))
import goodput_sim as gs  # noqa: E402


def test_auto_is_the_products_own_rule():
    from hpctrain.common.checkpoint_interval import young_daly_interval

    c, m = 30, 36000
    assert gs.young_daly(c, m) == young_daly_interval(c, m)
    # Daly's higher-order estimate: Young's sqrt(2CM) plus its correction, minus C
    assert gs.young_daly(c, m) == pytest.approx(
        math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m)) - c)
    assert gs.young_daly(1, math.inf) == math.inf
    with pytest.raises(ValueError):
        gs.young_daly(0, 100)


def test_without_interruptions_goodput_is_work_over_work_plus_checkpoints():
    sc = gs.Scenario("none", 10, math.inf, 0, 10, 60, 60)
    assert gs.simulate(sc, 90) == pytest.approx(0.9)
    assert gs.model(sc, 90) == pytest.approx(0.9)


def test_warned_preemptions_lose_no_work():
    """Only preemptions, all warned: each costs C + Rp of allocated time, nothing else."""
    sc = gs.Scenario("preempt", 10, math.inf, 24, 1e-6, 0, 100)
    g = gs.simulate(sc, 1e9, horizon_interruptions=2000)
    assert g == pytest.approx(1 - sc.preempt_rate * 100, rel=0.02)
    assert sc.mtbi_s == math.inf  # warned preemptions do not shorten the interval


def test_the_simulation_is_seeded():
    sc = gs.SCENARIOS[2]
    assert gs.simulate(sc, 3000, horizon_interruptions=200, seed=3) == \
        gs.simulate(sc, 3000, horizon_interruptions=200, seed=3)


def test_auto_is_within_two_percent_of_the_scanned_optimum():
    sc = gs.Scenario("1000 nodes", 1000, 2 * 8760, 2, 60, 120, 300)
    r = gs.evaluate(sc, [600.0], interruptions=300, seed=1)
    assert r["auto"] >= 0.98 * r["best"]
    assert abs(r["auto"] - r["auto_model"]) < 0.02  # simulation and Daly's model agree


def test_tiered_checkpoints_auto_and_bookkeeping():
    """A local tier: "auto" is the product's tiered rule (never below the drain); a
    checkpoint counts only once drained; restarts from the local copy raise goodput."""
    from hpctrain.common.checkpoint_interval import tiered_interval

    sc = gs.Scenario("tier", 1000, 8760, 0, 2, 60, 120, drain_s=30, local_restart_s=20,
                     node_loss=0.5)
    assert gs.young_daly(2, sc.mtbi_s, 30) == tiered_interval(2, sc.mtbi_s, 30)
    assert gs.young_daly(2, sc.mtbi_s, 5000) == 5000
    # no interruptions: a drain longer than the interval stretches every cycle
    quiet = gs.Scenario("quiet", 10, math.inf, 0, 1, 60, 60, drain_s=50,
                        local_restart_s=5)
    assert gs.simulate(quiet, 99) == pytest.approx(99 / 100)
    assert gs.simulate(quiet, 25) == pytest.approx(25 / (25 + 1 + 25))
    # the same failures: a restart from the local copy beats one from the shared copy,
    # and a drain (work not yet counted) costs something
    shared_only = gs.Scenario("shared", 1000, 8760, 0, 2, 60, 120, drain_s=30,
                              local_restart_s=60, node_loss=0.5)
    no_drain = gs.Scenario("nodrain", 1000, 8760, 0, 2, 60, 120, drain_s=0,
                           local_restart_s=20, node_loss=0.5)
    kw = dict(horizon_interruptions=3000, seed=2)
    assert gs.simulate(sc, 600, **kw) > gs.simulate(shared_only, 600, **kw)
    assert gs.simulate(no_drain, 600, **kw) > gs.simulate(sc, 600, **kw)
