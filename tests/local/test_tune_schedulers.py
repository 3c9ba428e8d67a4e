"""Trial schedulers (ASHA, HyperBand, PBT), stopping criteria and Optuna search in local
sweeps: the rules on made-up results (fast), then real sweeps of toy trials
(tests/support/tune_sched_workloads.py)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import tune_sched_workloads as w
from helpers import ROOT, SUPPORT, run_state, wait_for
from hpctrain import RunConfig, tune
from hpctrain.errors import ConfigError
from hpctrain.tune.schedulers import (ASHAScheduler, AsyncHyperBandScheduler,
                                      HyperBandScheduler, PopulationBasedTraining)

Q8 = [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]  # best first: later trials meet the cutoffs


def read(path, *parts):
    with open(os.path.join(path, *parts)) as f:
        return json.load(f)


@pytest.fixture
def four_at_once(monkeypatch):
    """Toy trials sleep most of the time: run a population side by side on 2 cores."""
    import hpctrain.tune.tuner as tuner

    monkeypatch.setattr(tuner, "local_concurrency", lambda *a, **k: 4)


# --------------------------------------------------------------------------- the rules
def test_asha_keeps_a_trial_only_in_the_top_fraction_of_its_rung_as_ray_does():
    s = ASHAScheduler(metric="loss", mode="min", max_t=8, grace_period=1, reduction_factor=2)
    assert s.rungs() == [8, 4, 2, 1]  # Ray's milestones, highest first
    state, rng = {}, random.Random(0)
    act = lambda t, it, loss: s.on_result(state, t, {"training_iteration": it, "loss": loss},
                                          rng)[0]
    assert act("a", 1, 1.0) == "CONTINUE"      # first at the rung: nothing to compare
    assert act("b", 1, 2.0) == "STOP"          # below the median of {1.0}
    assert act("c", 1, 0.5) == "CONTINUE"
    assert act("a", 2, 0.9) == "CONTINUE"      # rung 2: first there
    assert act("a", 3, 5.0) == "CONTINUE"      # between rungs: no decision
    assert act("c", 2, 0.95) == "STOP"         # worse than a at rung 2
    assert act("a", 8, 0.1) == "STOP"          # max_t reached
    assert state["rungs"]["0"]["1.0"] == {"a": -1.0, "b": -2.0, "c": -0.5}
    # between rungs a trial's process need not read the shared state at all
    memo = {}
    assert s.due({"training_iteration": 3, "loss": 1.0}, memo)      # knows nothing yet
    s.remember(state, "a", memo)
    assert memo == {"bracket": 0, "recorded": {1, 2}}
    assert not s.due({"training_iteration": 3, "loss": 1.0}, memo)
    assert s.due({"training_iteration": 4, "loss": 1.0}, memo)
    assert not s.due({"training_iteration": 5}, memo)                 # no metric
    assert AsyncHyperBandScheduler is ASHAScheduler
    assert len(HyperBandScheduler(max_t=81, reduction_factor=3).rungs(0)) == 5
    assert HyperBandScheduler(max_t=81, reduction_factor=3).brackets == 5


def test_pbt_exploits_from_the_top_quantile_and_perturbs_as_ray_does():
    s = PopulationBasedTraining(time_attr="training_iteration", metric="acc", mode="max",
                                perturbation_interval=2,
                                hyperparam_mutations={"lr": tune.uniform(0.1, 1.0),
                                                      "bs": [16, 32, 64],
                                                      "opt": {"m": [0.8, 0.9]}})
    state, rng = {}, random.Random(1)
    for t, acc in [("a", 0.1), ("b", 0.5), ("c", 0.7), ("d", 0.9)]:
        assert s.on_result(state, t, {"training_iteration": 1, "acc": acc}, rng)[0] \
            == "CONTINUE"
    action, info = s.on_result(state, "a", {"training_iteration": 2, "acc": 0.1}, rng)
    assert action == "EXPLOIT" and info["candidates"] == ["d"]
    assert s.on_result(state, "d", {"training_iteration": 2, "acc": 0.9}, rng)[0] == "CONTINUE"
    new = [s.explore({"lr": 0.5, "bs": 32, "opt": {"m": 0.9}, "keep": 1}, random.Random(i))
           for i in range(200)]
    assert all(n["keep"] == 1 and n["bs"] in (16, 32, 64) and n["opt"]["m"] in (0.8, 0.9)
               for n in new)
    lrs = {round(n["lr"], 6) for n in new}
    assert {0.6, 0.4} <= lrs and len(lrs) > 3   # ×1.2, ×0.8, and resampled ones
    with pytest.raises(ConfigError, match="synch"):
        PopulationBasedTraining(hyperparam_mutations={"lr": [1]}, synch=True)
    with pytest.raises(ConfigError, match="hyperparam_mutations"):
        PopulationBasedTraining()


def test_bad_scheduler_settings_are_refused_with_a_hint():
    with pytest.raises(ConfigError, match="reduction_factor"):
        ASHAScheduler(reduction_factor=1)
    with pytest.raises(ConfigError, match="scheduler") as e:
        tune.TuneConfig(scheduler="asha")
    assert "HINT" in str(e.value)
    with pytest.raises(ConfigError, match="run.stop"):
        RunConfig(stop={"loss": "low"})
    with pytest.raises(ConfigError, match="needs a metric"):
        tune.Tuner(w.quality, param_space={"q": 0.5},
                   tune_config=tune.TuneConfig(scheduler=ASHAScheduler()))._control()


# --------------------------------------------------------------------------- sweeps
def test_asha_stops_weak_trials_early_keeps_their_checkpoints_and_finds_the_grids_best(
        storage, four_at_once):
    space = {"q": tune.grid_search(Q8), "steps": 8, "sleep": 0.05}
    full = tune.Tuner(w.quality, param_space=space,
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=RunConfig(name="full", storage_path=storage, verbose=0)).fit()
    asha = tune.Tuner(w.quality, param_space=space, tune_config=tune.TuneConfig(
        metric="loss", mode="min",
        scheduler=ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2)),
        run_config=RunConfig(name="asha", storage_path=storage, verbose=0)).fit()
    assert asha.get_best_result().config == full.get_best_result().config
    assert asha.num_errors == 0 and asha.num_terminated == 8
    manifest = read(asha.experiment_path, "sweep.json")
    assert manifest["scheduler"]["type"] == "ASHAScheduler"
    iterations = [r.metrics["_training_iteration"] for r in asha]
    early = [i for i, n in enumerate(iterations) if n < 8]
    assert len(early) >= 4, iterations  # weak trials stopped below max_t
    for i in early:
        r = asha[i]
        state = run_state(r.path)
        assert state["status"] == "FINISHED"
        assert "below the cutoff" in state["stopped_by"]
        assert manifest["trials"][i]["stopped_by"] == state["stopped_by"]
        # the last report is the one at the rung; its checkpoint (and the earlier ones) stay
        assert r.checkpoint is not None and os.path.isdir(r.checkpoint.path)
        ckpt = read(r.checkpoint.path, ".hpctrain_checkpoint.json")
        assert ckpt["iteration"] == iterations[i]
        assert len(os.listdir(os.path.join(r.path, "checkpoints"))) == iterations[i]
    # a re-run runs nothing: stopped trials count as ended
    again = tune.Tuner.restore(asha.experiment_path, w.quality).fit()
    assert [r.metrics["_training_iteration"] for r in again] == iterations


def test_hyperband_places_trials_in_brackets_and_stops_them_at_their_brackets_rungs(
        storage, four_at_once):
    """HyperBandScheduler in a sweep: each trial placed in one of s_max + 1 brackets (the
    placement recorded in the sweep's scheduler state), a trial stopped early only at a
    milestone of its own bracket, its checkpoints kept, and the grid's best found."""
    space = {"q": tune.grid_search(Q8), "steps": 8, "sleep": 0.05}
    hb = HyperBandScheduler(max_t=8, reduction_factor=2)
    grid = tune.Tuner(w.quality, param_space=space, tune_config=tune.TuneConfig(
        metric="loss", mode="min", scheduler=hb),
        run_config=RunConfig(name="hyperband", storage_path=storage, verbose=0)).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 8
    assert grid.get_best_result().config["q"] == max(Q8)
    manifest = read(grid.experiment_path, "sweep.json")
    assert manifest["scheduler"]["type"] == "HyperBandScheduler"
    placed = read(grid.experiment_path, "scheduler_state.json")["bracket_of"]
    assert len(placed) == 8 and set(placed.values()) <= set(range(hb.brackets))
    iterations = [r.metrics["_training_iteration"] for r in grid]
    early = [i for i, n in enumerate(iterations) if n < 8]
    assert early, (iterations, placed)  # the weak trials of the brackets with rungs stop
    for i in early:
        r = grid[i]
        bracket = placed[os.path.basename(r.path)]  # trial_0000i
        assert iterations[i] in hb.rungs(bracket)[1:], (i, bracket, iterations[i])
        assert "below the cutoff" in run_state(r.path)["stopped_by"]
        assert len(os.listdir(os.path.join(r.path, "checkpoints"))) == iterations[i]


def test_a_trial_of_two_ranks_stopped_at_a_rung_ends_both_and_keeps_the_rungs_checkpoint(
        storage):
    from hpctrain import ScalingConfig
    from hpctrain.torch import TorchTrainer

    trainer = TorchTrainer(w.quality, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="two", storage_path=storage, verbose=0))
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {
        "q": tune.grid_search([0.7, 0.1]), "steps": 6, "sleep": 0.1}},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=ASHAScheduler(
            max_t=6, grace_period=2, reduction_factor=2))).fit()
    assert [r.metrics["_training_iteration"] for r in grid] == [6, 2]
    weak = run_state(grid[1].path)
    assert weak["status"] == "FINISHED" and [a["outcome"] for a in weak["attempts"]] == \
        ["FINISHED"]
    assert "rung training_iteration=2" in weak["stopped_by"]
    assert read(grid[1].checkpoint.path, ".hpctrain_checkpoint.json")["iteration"] == 2


def test_stopping_criteria_end_every_trial_at_the_threshold(storage):
    grid = tune.Tuner(w.quality, param_space={"q": tune.grid_search([0.2, 0.9]), "steps": 20},
                      run_config=RunConfig(name="stop", storage_path=storage, verbose=0,
                                           stop={"training_iteration": 3})).fit()
    assert [r.metrics["_training_iteration"] for r in grid] == [3, 3]
    assert "training_iteration >= 3" in run_state(grid[0].path)["stopped_by"]

    def good_enough(trial_id, result):
        return result["loss"] < 0.5

    grid = tune.Tuner(w.quality, param_space={"q": tune.grid_search([0.2, 0.9]), "steps": 20},
                      run_config=RunConfig(name="stopfn", storage_path=storage, verbose=0,
                                           stop=good_enough)).fit()
    # q=0.9: 0.1 + 1/step < 0.5 from step 3; q=0.2 never
    assert [r.metrics["_training_iteration"] for r in grid] == [20, 3]


def test_a_pbt_population_of_fractional_cpu_trainers_runs_side_by_side_and_exploits(
        storage, tmp_path):
    """Two trials of a 2-worker trainer whose workers ask for half a CPU each (Ray's
    resources_per_worker={"CPU": 0.5}) fit side by side on 2 cores, as in Ray: they
    overlap in time, and the low-lr trial exploits the other one."""
    from hpctrain import ScalingConfig
    from hpctrain.trainer import DataParallelTrainer

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip(reason="needs 2 cores")
    log = str(tmp_path / "times.jsonl")
    trainer = DataParallelTrainer(
        w.climb_ranks, scaling_config=ScalingConfig(num_workers=2,
                                                    resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name="pbt2", storage_path=storage, verbose=0))
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {
        "lr": tune.grid_search([0.1, 1.0]), "steps": 12, "sleep": 0.3, "log": log,
        "meet": str(tmp_path / "meet"), "population": 4, "meet_timeout": 20}},
        tune_config=tune.TuneConfig(metric="value", mode="max", scheduler=PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=2, quantile_fraction=0.5,
            hyperparam_mutations={"train_loop_config": {"lr": tune.uniform(0.5, 2.0)}}))).fit()
    assert grid.num_errors == 0
    spans = {}
    for line in open(log):
        rec = json.loads(line)
        lo, hi = spans.get(rec["trial"], (rec["time"], rec["time"]))
        spans[rec["trial"]] = (min(lo, rec["time"]), max(hi, rec["time"]))
    (a0, a1), (b0, b1) = spans.values()
    assert a0 < b1 and b0 < a1, spans                     # the two trials overlapped
    exploits = read(grid.experiment_path, "sweep.json")["exploits"]
    assert exploits and all(e["source"] != e["trial"] for e in exploits)
    assert any(e["source_config"]["train_loop_config"]["lr"] == 1.0 for e in exploits)


def test_pbt_records_exploit_steps_and_beats_the_same_sweep_without_it(storage, four_at_once):
    def space(name):  # (the trials of each sweep start together: see w.climb)
        return {"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4]), "steps": 24, "sleep": 0.25,
                "meet": os.path.join(storage, f"{name}-started"), "population": 4}

    plain = tune.Tuner(w.climb, param_space=space("plain"),
                       tune_config=tune.TuneConfig(metric="value", mode="max"),
                       run_config=RunConfig(name="plain", storage_path=storage,
                                            verbose=0)).fit()
    pbt = tune.Tuner(w.climb, param_space=space("pbt"), tune_config=tune.TuneConfig(
        metric="value", mode="max", scheduler=PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=4,
            hyperparam_mutations={"lr": tune.uniform(0.1, 2.0)})),
        run_config=RunConfig(name="pbt", storage_path=storage, verbose=0)).fit()
    assert pbt.num_errors == 0
    best, baseline = pbt.get_best_result(), plain.get_best_result()
    manifest = read(pbt.experiment_path, "sweep.json")
    exploits = manifest["exploits"]
    print("PBT best", best.metrics["value"], "exploits (trial, step, source's iteration, lr):",
          [(e["trial"][-1], e["step"], e["source_iteration"], round(e["new_config"]["lr"], 3))
           for e in exploits])
    assert best.metrics["value"] > baseline.metrics["value"] == pytest.approx(0.4 * 24)
    assert exploits
    for e in exploits:
        # (not "old != new": a trial at 0.741 that exploits one at 0.926 and perturbs it by
        # ×0.8 gets 0.741 again — seen in a CI run)
        assert e["source"] != e["trial"]
        assert {k: v for k, v in e["new_config"].items() if k != "lr"} == \
            {k: v for k, v in e["old_config"].items() if k != "lr"}  # only lr is mutated
        # the source's lr, perturbed (×1.2, ×0.8) or resampled
        src_lr, new_lr = e["source_config"]["lr"], e["new_config"]["lr"]
        assert new_lr in (pytest.approx(src_lr * 1.2), pytest.approx(src_lr * 0.8)) or \
            0.1 <= new_lr <= 2.0
        # the exploiting trial restarted from its copy of the source's checkpoint
        trial = os.path.join(pbt.experiment_path, e["trial"])
        copied = read(trial, "checkpoints", e["checkpoint"], ".hpctrain_checkpoint.json")
        assert copied["exploited_from"] == {"trial": e["source"],
                                            "checkpoint": e["source_checkpoint"]}
        assert "RESTARTED" in [a["outcome"] for a in run_state(trial)["attempts"]]
    # a trial's config is its latest one, as in Ray (what its workers ran with last)
    last = {}
    for e in exploits:
        last[e["trial"]] = e["new_config"]
    for t, config in last.items():
        assert manifest["trials"][int(t[-5:])]["config"] == config
    assert best.metrics["lr"] == best.config["lr"]


OPTUNA_DRIVER = r"""
import os, sys
sys.path.insert(0, {tests!r})
import tune_sched_workloads as w
from hpctrain import RunConfig, tune
from hpctrain.tune.search.optuna import OptunaSearch
path = os.path.join({storage!r}, "opt")
if tune.Tuner.can_restore(path):
    tuner = tune.Tuner.restore(path, w.quadratic)
else:
    tuner = tune.Tuner(w.quadratic, param_space={{"x": tune.uniform(-5, 5),
                                                 "y": tune.uniform(-5, 5), "sleep": 0.5}},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=6,
                                                   search_alg=OptunaSearch(seed=1)),
                       run_config=RunConfig(name="opt", storage_path={storage!r}, verbose=0))
tuner.fit()
"""


def test_optuna_search_asks_and_tells_a_journal_study_and_resumes_after_the_driver_is_killed(
        storage):
    optuna = pytest.importorskip("optuna")
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = os.path.join(storage, "opt")
    script = OPTUNA_DRIVER.format(tests=SUPPORT, storage=storage)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, os.environ.get("PYTHONPATH", "")]))
    driver = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    finished = lambda: [t for t in read(path, "sweep.json")["trials"]  # noqa: E731
                        if t["status"] == "FINISHED"]
    try:
        wait_for(lambda: os.path.exists(os.path.join(path, "sweep.json")) and
                 len(finished()) >= 2, 120, "two trials to finish", proc=driver)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its trials' workers
        driver.wait()
    before = read(path, "sweep.json")["trials"]
    done_before = {t["trial_id"]: t for t in before if t["status"] == "FINISHED"}
    assert 2 <= len(done_before) < 6
    assert all(t["search"]["optuna_trial"] is not None for t in done_before.values())

    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    after = read(path, "sweep.json")["trials"]
    assert [t["status"] for t in after] == ["FINISHED"] * 6
    for t in after:  # the finished trials kept their configs and their Optuna trials
        if t["trial_id"] in done_before:
            assert t["config"] == done_before[t["trial_id"]]["config"]
            assert t["search"] == done_before[t["trial_id"]]["search"]
        assert set(t["config"]) == {"x", "y", "sleep"} and t["search_told"]
    study = optuna.load_study(study_name="opt", storage=JournalStorage(
        JournalFileBackend(os.path.join(path, "search", "optuna-journal.log"))))
    # one Optuna trial per sweep trial, named after it: nothing asked twice, all told
    numbers = [t["search"]["optuna_trial"] for t in after]
    assert len(set(numbers)) == 6
    by_trial = {t.user_attrs["hpctrain_trial"]: t for t in study.trials
                if "hpctrain_trial" in t.user_attrs}
    assert sorted(by_trial) == [t["trial_id"] for t in after]
    assert [by_trial[t["trial_id"]].number for t in after] == numbers
    assert [by_trial[t["trial_id"]].state.name for t in after] == ["COMPLETE"] * 6
    # at most one more: half-made when the driver was killed in the middle of an ask
    others = [t for t in study.trials if t.number not in numbers]
    assert len(others) <= 1 and all(t.state.name == "FAIL" for t in others)
    grid = tune.ResultGrid.from_path(path)
    by_number = {t.number: t.value for t in study.trials}
    for t, r in zip(after, grid):
        assert by_number[t["search"]["optuna_trial"]] == pytest.approx(r.metrics["loss"])
        assert r.metrics["loss"] == pytest.approx((r.config["x"] - 3) ** 2 +
                                                  (r.config["y"] + 1) ** 2)
    assert grid.get_best_result().metrics["loss"] == pytest.approx(study.best_value)


def test_optuna_search_refuses_grid_search_and_needs_a_metric(storage):
    pytest.importorskip("optuna")
    from hpctrain.tune.search.optuna import OptunaSearch

    with pytest.raises(ConfigError, match="grid_search"):
        tune.Tuner(w.quadratic, param_space={"x": tune.grid_search([1, 2])},
                   tune_config=tune.TuneConfig(metric="loss", mode="min",
                                               search_alg=OptunaSearch()),
                   run_config=RunConfig(name="g", storage_path=storage)).fit()
    assert not os.path.exists(os.path.join(storage, "g", "trial_00000"))
    with pytest.raises(ConfigError, match="needs a metric"):
        tune.Tuner(w.quadratic, param_space={"x": tune.uniform(0, 1)},
                   tune_config=tune.TuneConfig(search_alg=OptunaSearch()),
                   run_config=RunConfig(name="m", storage_path=storage)).fit()


# --------------------------------------------------------------------------- job files
def sweep_file(tmp_path, storage, name, fn, extra, metric="loss", mode="min"):
    job = tmp_path / f"{name}.toml"
    job.write_text(f"""[job]
entrypoint = "{os.path.join(SUPPORT, 'tune_sched_workloads.py')}:{fn}"
[run]
name = "{name}"
storage_path = "{storage}"
[scaling]
num_workers = 1
[sweep]
metric = "{metric}"
mode = "{mode}"
{extra}""")
    return str(job)


def test_a_job_files_sweep_takes_a_scheduler_stopping_criteria_and_optuna(tmp_path, storage):
    from helpers import cli

    job = sweep_file(tmp_path, storage, "asha", "quality",
                     "stop = {training_iteration = 6}\n" + w.ASHA_SWEEP_TOML)
    out = cli("sweep", job).stderr
    assert "stopped early (ASHAScheduler: loss=1.9 below the cutoff" in out
    grid = tune.ResultGrid.from_path(os.path.join(storage, "asha"))
    iterations = [r.metrics["_training_iteration"] for r in grid]
    assert iterations[0] == 6 and iterations[3] == 1  # the stop criterion; ASHA's rung 1
    assert grid.get_best_result().config == {"train_loop_config": {"q": 0.7, "steps": 8}}
    manifest = read(grid.experiment_path, "sweep.json")
    assert manifest["scheduler"]["max_t"] == 8 and manifest["stop"] == {
        "training_iteration": 6}

    job = sweep_file(tmp_path, storage, "opt", "quadratic", """num_samples = 3
[sweep.search_alg]
type = "optuna"
seed = 2
[sweep.param_space]
x = {uniform = [-5, 5]}
y = {uniform = [-5, 5]}
""")
    cli("sweep", job)
    trials = read(storage, "opt", "sweep.json")["trials"]
    # one Optuna trial each; their numbers follow the order the trials asked in, and two
    # trials that start at once ask in either order (seen in CI: [1, 0, 2])
    assert sorted(t["search"]["optuna_trial"] for t in trials) == [0, 1, 2]
    assert all(t["search_told"] and set(t["config"]["train_loop_config"]) == {"x", "y"}
               for t in trials)


def test_a_job_files_pbt_sweep_runs_with_its_mutations(tmp_path, storage):
    """The guide's PBT job file shape: [sweep.scheduler] type = "pbt" with
    [sweep.scheduler.hyperparam_mutations] naming a [config] key; the sweep runs every
    trial to its end under PopulationBasedTraining, and an exploit (when the two trials
    overlap) perturbs only lr, within the population's own values."""
    from helpers import cli

    job = sweep_file(tmp_path, storage, "pbt", "climb", f"""
[sweep.scheduler]
type = "pbt"
time_attr = "training_iteration"
perturbation_interval = 2
quantile_fraction = 0.5
resample_probability = 0.0
[sweep.scheduler.hyperparam_mutations]
lr = [0.1, 0.2, 0.4, 0.8]
[sweep.param_space]
lr = {{grid_search = [0.1, 0.8]}}
steps = 8
sleep = 0.1
meet = "{tmp_path / 'meet'}"
population = 2
""", metric="value", mode="max")
    cli("sweep", job)
    manifest = read(storage, "pbt", "sweep.json")
    assert manifest["scheduler"]["type"] == "PopulationBasedTraining"
    assert manifest["scheduler"]["perturbation_interval"] == 2
    grid = tune.ResultGrid.from_path(os.path.join(storage, "pbt"))
    assert grid.num_errors == 0 and [r.metrics["_training_iteration"] for r in grid] == [8, 8]
    for step in manifest.get("exploits", []):
        assert step["source"] != step["trial"], step
        assert set(step["new_config"]["train_loop_config"]) == {
            "lr", "steps", "sleep", "meet", "population"}
        assert step["new_config"]["train_loop_config"]["lr"] in (0.1, 0.2, 0.4, 0.8)


def test_a_job_files_bad_scheduler_names_the_key_and_creates_nothing(tmp_path, storage):
    from helpers import cli

    job = sweep_file(tmp_path, storage, "bad", "quality", """[sweep.scheduler]
type = "asha"
max_tt = 3
[sweep.param_space]
q = {grid_search = [0.7]}
""")
    p = cli("sweep", job, check=False)
    assert p.returncode == 2
    assert "sweep.scheduler.max_tt: ASHAScheduler has no option 'max_tt'" in p.stderr
    assert "HINT: its options: time_attr" in p.stderr
    job = sweep_file(tmp_path, storage, "bad", "quality", """stop = {loss = "low"}
[sweep.param_space]
q = {grid_search = [0.7]}
""")
    p = cli("sweep", job, check=False)
    assert p.returncode == 2 and "sweep.stop.loss: expected a number" in p.stderr
    assert not os.path.exists(os.path.join(storage, "bad"))


def test_docstring_examples_of_the_schedulers():
    import doctest

    from hpctrain.tune import schedulers

    result = doctest.testmod(schedulers, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
