"""The run's Prometheus text file for operators (Ray's train_controller_state,
train_worker_group_start_total_time_s, train_report_total_blocked_time_s): real runs,
the file parsed back as Prometheus reads it."""
import builtins
import json
import os
import re
import time

import pytest

import validation_workloads as wl
from helpers import fit, run_state
from hpctrain import TrainingFailedError
from hpctrain.allocation.metrics import ENV_DIR, MetricsFile, collector_path
from hpctrain.rundir.layout import RunDir

RUN_ID = 'ray_train_run_name="{name}",ray_train_run_id="{path}"'


def parse(text):
    """{(name, frozenset(labels)): value}, read by prometheus_client's parser when it is
    installed, else by a strict reading of the exposition format."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:  # the strict reading
        out = {}
        sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="'
                            r'(?:[^"\\\n]|\\.)*",?)*)\} (-?[0-9.eE+-]+|NaN)$')
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                continue
            m = sample.match(line)
            assert m, f"not a sample line of the exposition format: {line!r}"
            labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                          m.group(2)))
            out[(m.group(1), labels)] = float(m.group(3))
        return out
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _figures(path, name, run_path):
    with open(path) as f:
        text = f.read()
    assert text.endswith("\n")
    base = {("ray_train_run_name", name), ("ray_train_run_id", run_path)}
    out = {}
    for (metric, labels), value in parse(text).items():
        assert base <= labels, (metric, labels)
        rest = dict(labels - base)
        out[(metric, tuple(sorted(rest.items())))] = value
    return out


def test_the_metrics_file_shows_the_run_s_state_start_time_and_time_in_report(
        storage, tmp_path, monkeypatch):
    collector = tmp_path / "textfile"
    collector.mkdir()
    monkeypatch.setenv(ENV_DIR, str(collector))
    started = time.time()
    result = fit(wl.train_reads_its_metrics_file, storage, name="metered")
    elapsed = time.time() - started
    assert result.metrics["saw_running"] is True  # while the ranks ran
    path = os.path.join(result.path, "metrics.prom")
    figures = _figures(path, "metered", result.path)
    states = {labels[0][1]: v for (m, labels), v in figures.items()
              if m == "train_controller_state"}
    assert states == {"INITIALIZING": 0, "RUNNING": 0, "RESTARTING": 0, "REQUEUED": 0,
                      "FINISHED": 1, "ERRORED": 0, "ABORTED": 0}
    start = figures[("train_worker_group_start_total_time_s", ())]
    attempt = run_state(result.path)["attempts"][0]
    assert 0 < start < attempt["ended"] - attempt["started"] < elapsed
    blocked = {labels[0][1]: v for (m, labels), v in figures.items()
               if m == "train_report_total_blocked_time_s"}
    assert sorted(blocked) == ["0", "1"] and all(0 < v < elapsed for v in blocked.values())
    # the textfile collector's copy: the same text, readable by the exporter's user
    copy = collector_path(RunDir(result.path), str(collector))
    assert open(copy).read() == open(path).read()
    assert os.stat(copy).st_mode & 0o777 == 0o644
    assert os.stat(path).st_mode & 0o777 == 0o600  # the run's own: private as the run
    assert [p for p in os.listdir(collector)] == [os.path.basename(copy)]  # no temporary left


def test_a_failed_attempt_adds_its_start_and_report_time_and_the_state_follows(storage):
    result = fit(wl.fail_once, storage, workers=1, name="twice", max_failures=1)
    state = run_state(result.path)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    figures = _figures(os.path.join(result.path, "metrics.prom"), "twice", result.path)
    assert figures[("train_controller_state", (("ray_train_controller_state", "FINISHED"),))] == 1
    start = figures[("train_worker_group_start_total_time_s", ())]
    run = RunDir(result.path)
    each = []
    for a in state["attempts"]:  # each attempt: from its start to its rank's readiness
        with open(os.path.join(run.attempt_dir(a["attempt"]), "heartbeat.rank-0.json")) as f:
            each.append(json.load(f)["ready_at"] - a["started"])
    assert all(s > 0 for s in each) and start == pytest.approx(sum(each), abs=1e-5)
    blocked = figures[("train_report_total_blocked_time_s",
                       (("ray_train_worker_world_rank", "0"),))]
    assert blocked > 0


def test_a_failed_run_s_metrics_file_says_errored(storage):
    with pytest.raises(TrainingFailedError):
        fit(wl.fail_once, storage, workers=1, name="errored")
    path = os.path.join(storage, "errored")
    figures = _figures(os.path.join(path, "metrics.prom"), "errored", path)
    assert [labels[0][1] for (m, labels), v in figures.items()
            if m == "train_controller_state" and v == 1] == ["ERRORED"]


def _attempt(run, n, started, ranks_ready, blocked):
    with run.update_state() as s:
        s.setdefault("attempts", []).append({"attempt": n, "started": started})
        s["status"] = "RUNNING"
    os.makedirs(run.attempt_dir(n), exist_ok=True)
    for rank, ready in enumerate(ranks_ready):
        with open(os.path.join(run.attempt_dir(n), f"heartbeat.rank-{rank}.json"), "w") as f:
            json.dump({"rank": rank, "ready_at": ready, "report_blocked_s": blocked[rank]}, f)


def test_states_while_starting_and_restarting_and_both_readings_of_the_format(
        tmp_path, monkeypatch):
    """The figures of a run's state files as they are mid-run (no ranks started here),
    read by prometheus_client and by the strict reading alike."""
    run = RunDir(str(tmp_path / "mid"))
    run.create()
    metrics = MetricsFile(run, num_workers=2)

    def current():
        metrics.write()
        figures = _figures(os.path.join(run.path, "metrics.prom"), "mid", run.path)
        return [labels[0][1] for (m, labels), v in figures.items()
                if m == "train_controller_state" and v == 1], figures

    _attempt(run, 1, 100.0, [103.0, None], [0.0, 0.0])  # rank 1 not ready yet
    assert current()[0] == ["INITIALIZING"]
    _attempt(run, 1, 100.0, [103.0, 104.5], [1.5, 2.0])
    with run.update_state() as s:
        s["attempts"] = s["attempts"][:1]
    state, figures = current()
    assert state == ["RUNNING"]
    assert figures[("train_worker_group_start_total_time_s", ())] == 4.5
    _attempt(run, 2, 200.0, [201.0, None], [0.25, 0.0])  # a restart, starting
    state, figures = current()
    assert state == ["RESTARTING"]
    assert figures[("train_worker_group_start_total_time_s", ())] == 4.5  # not yet ready
    assert figures[("train_report_total_blocked_time_s",
                    (("ray_train_worker_world_rank", "0"),))] == 1.75  # both attempts'
    # the same file through the strict reading of the exposition format
    real_import = builtins.__import__

    def no_client(name, *args, **kwargs):
        if name.startswith("prometheus_client"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    with open(os.path.join(run.path, "metrics.prom")) as f:
        text = f.read()
    with_client = parse(text)
    monkeypatch.setattr(builtins, "__import__", no_client)
    assert parse(text) == with_client and len(with_client) == 7 + 1 + 2
