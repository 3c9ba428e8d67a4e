"""``CheckpointConfig(checkpoint_frequency=...)``: the Young–Daly interval as a pure
function (tables of inputs → interval), the interruption rate from a run's attempts, the
schedule a session follows, the config and job-file keys, the progress output, and real
runs whose ranks are all told to checkpoint after the same reports."""
import io
import json
import math
import os

import pytest

import async_workloads
from helpers import fit, out
from hpctrain import CheckpointConfig, ConfigError, FailureConfig
from hpctrain.common.checkpoint_interval import (DEFAULT_MTBI_S, FrequencyPolicy,
                                                     describe_interval, frequency_value,
                                                     observed_mtbi, young_daly_interval)
from hpctrain.rundir.layout import RunDir


@pytest.mark.parametrize("cost, mtbi, expected", [
    # C (s), M (s) -> Daly's interval (s), rounded to 0.1 s
    (10, 86400, 1307.9),      # 10 s checkpoints, one interruption a day: ~22 min
    (1, 3600, 84.2),          # 1 s, one an hour
    (60, 43200, 2237.0),      # a minute, twice a day: ~37 min
    (300, 7 * 86400, 18849.9),  # 5 min, once a week: ~5.2 h
    (0.5, 86400, 293.6),      # an async snapshot of half a second: ~5 min
    (100, 40, 40.0),          # C >= 2M: checkpoint every M
    (80, 40, 40.0),           # C == 2M: the same
    (0, 3600, 1.0),           # free checkpoints: the floor, 1 s
    (0.001, 60, 1.0),         # nearly free: the floor too
])
def test_young_daly_interval_table(cost, mtbi, expected):
    assert round(young_daly_interval(cost, mtbi), 1) == expected


@pytest.mark.parametrize("cost, mtbi", [(1, 86400), (10, 86400), (60, 604800)])
def test_first_order_term_is_youngs(cost, mtbi):
    """For C much smaller than M, Daly's estimate is Young's sqrt(2 C M) minus about C."""
    young = math.sqrt(2 * cost * mtbi)
    assert abs(young_daly_interval(cost, mtbi) - (young - cost)) / young < 0.01


@pytest.mark.parametrize("cost, mtbi", [(-1, 3600), (1, 0), (1, -5), (float("nan"), 1),
                                        (1, float("inf"))])
def test_young_daly_interval_refuses_nonsense(cost, mtbi):
    with pytest.raises(ValueError):
        young_daly_interval(cost, mtbi)


NOW = 10_000.0


@pytest.mark.parametrize("attempts, site, expected", [
    ([], 3600, 3600),                                                   # the site's figure
    ([{"started": 0, "ended": 600, "outcome": "PREEMPTED"},
      {"started": 700, "ended": 1300, "outcome": "FAILED"}], 3600, 1600),
    # a finished attempt adds time, no interruption
    ([{"started": 0, "ended": 1000, "outcome": "FINISHED"}], 3600, 4600),
    # the running attempt (no "ended") counts until now, not as an interruption
    ([{"started": NOW - 400}], 3600, 4000),
    ([{"started": 0, "ended": 100, "outcome": "LOST"},
      {"started": 100, "ended": 200, "outcome": "PREEMPTED"},
      {"started": 200, "ended": 300, "outcome": "FAILED"},
      {"started": NOW - 100}], 700, 275),   # (400 s + 700 s) / (3 + 1)
    ([{"outcome": "FAILED"}], 3600, 3600),                              # no times: ignored
])
def test_observed_mtbi_table(attempts, site, expected):
    assert observed_mtbi(attempts, site, now=NOW) == pytest.approx(expected)


@pytest.mark.parametrize("value, expected", [(None, None), (0, None), ("auto", "auto"),
                                             ("AUTO", "auto"), (" auto ", "auto"), (1, 1),
                                             (25, 25)])
def test_frequency_values(value, expected):
    assert frequency_value(value) == expected
    assert CheckpointConfig(checkpoint_frequency=value).checkpoint_frequency == expected


@pytest.mark.parametrize("value", [-1, "often", True, 1.5, [3]])
def test_bad_frequency_is_refused_with_a_hint(value):
    with pytest.raises(ConfigError) as info:
        CheckpointConfig(checkpoint_frequency=value)
    assert "checkpoint.checkpoint_frequency: expected \"auto\"" in str(info.value)
    assert "HINT:" in str(info.value)


def test_frequency_is_a_shorter_spelling():
    assert CheckpointConfig(frequency="auto").checkpoint_frequency == "auto"
    with pytest.raises(ConfigError, match="not both"):
        CheckpointConfig(frequency="auto", checkpoint_frequency=3)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_auto_policy_follows_the_measured_cost():
    clock = Clock()
    p = FrequencyPolicy("auto", mtbi_s=3600, clock=clock)
    assert p.interval_s() == pytest.approx(young_daly_interval(1.0, 3600))  # assumed cost
    clock.t = 84.0
    assert not p.due_by_time()
    clock.t = 84.3
    assert p.due_by_time()
    p.checkpointed()
    assert not p.due_by_time()
    for cost in (4.0, 4.2, 3.9):  # measured: ~4 s per checkpoint
        p.observe_cost(cost)
    assert p.interval_s() == pytest.approx(young_daly_interval(4.0, 3600))
    assert not p.due_by_count(2)


def test_auto_policy_with_a_local_tier_knows_the_local_commit_and_the_drain():
    """Two costs: the local commit (C, what report() blocks) sets Young–Daly's interval;
    the drain to the shared tier (D, in the background) is its lower bound."""
    p = FrequencyPolicy("auto", mtbi_s=86400)
    for cost in (2.0, 2.1, 1.9):
        p.observe_cost(cost)
    p.observe_drain(30.0)
    assert p.interval_s() == pytest.approx(young_daly_interval(2.0, 86400))  # ≈ 586 s
    assert round(p.interval_s(), 1) == 586.5
    for drain in (900.0, 880.0, 910.0):  # a slow shared filesystem: ~15 min per drain
        p.observe_drain(drain)
    assert p.interval_s() == 890.0  # the median of the drains measured (30, 880, 900, 910)


def test_count_policy_and_no_policy():
    p = FrequencyPolicy(3)
    assert [it for it in range(10) if p.due_by_count(it)] == [2, 5, 8]  # reports 3, 6, 9
    assert p.interval_s() is None and not p.due_by_time()
    none = FrequencyPolicy(None)
    assert not any(none.due_by_count(it) for it in range(10)) and not none.due_by_time()


def test_mtbi_config_and_job_file(tmp_path):
    from hpctrain.spec import load_job_spec

    assert FailureConfig().mtbi_s is None and FailureConfig(mtbi="12h").mtbi_s == 43200
    assert FailureConfig(mtbi=600).mtbi_s == 600
    with pytest.raises(ConfigError, match="failure.mtbi"):
        FailureConfig(mtbi="soon")
    (tmp_path / "train.py").write_text("def main(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text('[job]\nentrypoint = "train.py:main"\n[checkpoint]\n'
                   'checkpoint_frequency = "auto"\ncheckpoint_upload_mode = "async"\n'
                   '[failure]\nmtbi = "6h"\n')
    spec = load_job_spec(str(job))
    ck = spec.run.checkpoint_config
    assert ck.checkpoint_frequency == "auto" and ck.checkpoint_upload_mode == "async"
    assert spec.run.failure_config.mtbi_s == 6 * 3600
    again = spec.to_toml_dict()
    assert again["checkpoint"]["checkpoint_frequency"] == "auto"
    assert again["failure"]["mtbi"] == "21600s"
    job.write_text('[job]\nentrypoint = "train.py:main"\n[checkpoint]\n'
                   'checkpoint_frequency = "hourly"\n')
    with pytest.raises(ConfigError) as info:
        load_job_spec(str(job))
    assert "checkpoint.checkpoint_frequency" in str(info.value) and "job.toml" in str(info.value)


def test_progress_shows_the_chosen_interval(tmp_path):
    from hpctrain.driver.progress import Progress

    run = RunDir(str(tmp_path / "run"))
    run.create()
    with open(run.result_file, "w") as f:
        f.write(json.dumps({"loss": 0.5, "_training_iteration": 3, "_timestamp": 1.0,
                            "_checkpoint_interval_s": 1307.9}) + "\n")
    stream = io.StringIO()
    p = Progress(run, stream=stream, force_plain=True)
    p.close()
    assert "checkpoint every 21m48s (auto)" in stream.getvalue()
    assert describe_interval(1307.9) == "21m48s"


def _fit(func, storage, *, name, config, ckpt, failure):
    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    return TorchTrainer(func, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                                             checkpoint_config=ckpt,
                                             failure_config=failure)).fit()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_auto_tells_every_rank_after_the_same_reports(storage, mode):
    """failure.mtbi of 2 s (plus the seconds the attempt has run when the ranks start):
    the first checkpoint is due a few seconds in (cost assumed 1 s), then about every
    second (the measured cost is small; 1 s is the floor)."""
    result = _fit(async_workloads.told, storage, name=f"auto-{mode}",
                  config={"steps": 50, "sleep": 0.1, "mode": mode},
                  ckpt=CheckpointConfig(checkpoint_frequency="auto"),
                  failure=FailureConfig(mtbi=2))
    told = [json.load(open(out(result, f"told-rank-{r}"))) for r in (0, 1)]
    assert told[0] == told[1] and len(told[0]) >= 1
    committed = RunDir(result.path).list_checkpoints()
    assert [c.iteration for c in committed] == [it + 1 for it in told[0]]
    rows = [json.loads(line) for line in open(os.path.join(result.path, "result.json"))]
    assert all(0 < row["_checkpoint_interval_s"] < young_daly_interval(1.0, 120)
               for row in rows)


def test_auto_uses_the_failure_configs_mtbi(storage):
    result = fit(async_workloads.told, storage, name="auto-mtbi",
                 config={"steps": 3}, ckpt=CheckpointConfig(checkpoint_frequency="auto"))
    rows = [json.loads(line) for line in open(os.path.join(result.path, "result.json"))]
    # no checkpoint yet: the assumed 1 s cost, and the default (one interruption a day)
    # plus the seconds this run has been going
    assert rows[0]["_checkpoint_interval_s"] == pytest.approx(
        young_daly_interval(1.0, DEFAULT_MTBI_S), rel=0.01)


def test_every_nth_report(storage):
    result = fit(async_workloads.told, storage, name="every-3", config={"steps": 8},
                 ckpt=CheckpointConfig(checkpoint_frequency=3))
    assert json.load(open(out(result, "told-rank-1"))) == [2, 5]
    assert [c.iteration for c in RunDir(result.path).list_checkpoints()] == [3, 6]


def test_lightning_report_callback_checkpoints_at_the_epochs_due(storage):
    """RayTrainReportCallback with checkpoint_frequency=2 (and async commits): a report
    at every epoch end, a checkpoint at epochs 2 and 4 only."""
    pytest.importorskip("lightning", reason="Lightning is not installed")
    import framework_workloads
    from hpctrain.rundir.commit import verify_checkpoint

    result = fit(framework_workloads.lightning_deterministic, storage, name="pl-every-2",
                 config={"epochs": 4},
                 ckpt=CheckpointConfig(checkpoint_frequency=2, checkpoint_upload_mode="async"))
    rows = [json.loads(line) for line in open(os.path.join(result.path, "result.json"))]
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3]
    committed = RunDir(result.path).list_checkpoints()
    assert [c.iteration for c in committed] == [2, 4]
    assert [c.metrics["epoch"] for c in committed] == [1, 3]
    assert all(verify_checkpoint(c.path) == [] for c in committed)
