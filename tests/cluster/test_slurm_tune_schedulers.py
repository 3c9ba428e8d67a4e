"""Trial schedulers and Optuna search in sweeps that run as job arrays on the real test
Slurm cluster (scripts/slurm-cluster.sh: nodes n1, n2; 8 CPUs each): every decision is
taken inside the array tasks, from the files in the sweep directory."""
import json
import os
import subprocess

import pytest

import tune_sched_workloads as w
from hpctrain import RunConfig, ScalingConfig, tune
from hpctrain.torch import TorchTrainer
from hpctrain.tune.schedulers import ASHAScheduler, PopulationBasedTraining
from helpers import run_state

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]
Q8 = [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]



def read(path, *parts):
    with open(os.path.join(path, *parts)) as f:
        return json.load(f)


def trainer(fn, name, storage):
    return TorchTrainer(fn, scaling_config=ScalingConfig(num_workers=1),
                        run_config=RunConfig(name=name, storage_path=storage, verbose=0),
                        scheduler="slurm", site="test-cluster")


def test_asha_on_a_slurm_array_ends_weak_tasks_early_and_finds_the_grids_best(storage):
    space = {"train_loop_config": {"q": tune.grid_search(Q8), "steps": 8, "sleep": 0.3,
                                   "delay": 0.4}}
    full = tune.Tuner(trainer(w.quality, "full", storage), param_space=space,
                      tune_config=tune.TuneConfig(metric="loss", mode="min")).fit()
    asha = tune.Tuner(trainer(w.quality, "asha", storage), param_space=space,
                      tune_config=tune.TuneConfig(
                          metric="loss", mode="min", max_concurrent_trials=8,
                          scheduler=ASHAScheduler(max_t=8, grace_period=1,
                                                  reduction_factor=2))).fit()
    assert asha.get_best_result().config == full.get_best_result().config == {
        "train_loop_config": {"q": 0.7, "steps": 8, "sleep": 0.3, "delay": 0.4}}
    assert asha.num_errors == 0 and asha.num_terminated == 8
    manifest = read(asha.experiment_path, "sweep.json")
    (array,) = manifest["arrays"]
    iterations = [r.metrics["_training_iteration"] for r in asha]
    early = [i for i, n in enumerate(iterations) if n < 8]
    assert len(early) >= 4, iterations
    assert sum(iterations) < sum(r.metrics["_training_iteration"] for r in full)
    for i in early:
        r = asha[i]
        state = run_state(r.path)
        # the array task ended cleanly after the rung's report; its checkpoints stay
        assert state["status"] == "FINISHED" and "below the cutoff" in state["stopped_by"]
        assert state["job_ids"] == [f"{array['job_id']}_{i}"]
        assert manifest["trials"][i]["stopped_by"] == state["stopped_by"]
        assert read(r.checkpoint.path, ".hpctrain_checkpoint.json")["iteration"] == iterations[i]
        log = open(os.path.join(r.path, "logs", f"slurm-{array['job_id']}_{i}.out")).read()
        assert f"stopped after report {iterations[i]}" in log and "run FINISHED" in log
    # nothing of the sweep is left in the queue
    q = subprocess.run(["squeue", "-h", "-r", "-j", array["job_id"]], capture_output=True,
                       text=True)
    assert q.stdout.strip() == ""


def test_pbt_on_a_slurm_array_exploits_between_tasks_and_beats_no_pbt(storage):
    def space(name):  # (the 4 array tasks start together: see w.climb)
        return {"train_loop_config": {"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4]),
                                      "steps": 24, "sleep": 0.3, "population": 4,
                                      "meet": os.path.join(storage, f"{name}-started")}}

    plain = tune.Tuner(trainer(w.climb, "plain", storage), param_space=space("plain"),
                       tune_config=tune.TuneConfig(metric="value", mode="max")).fit()
    pbt = tune.Tuner(trainer(w.climb, "pbt", storage), param_space=space("pbt"),
                     tune_config=tune.TuneConfig(
                         metric="value", mode="max", scheduler=PopulationBasedTraining(
                             time_attr="training_iteration", perturbation_interval=4,
                             hyperparam_mutations={"train_loop_config": {
                                 "lr": tune.uniform(0.1, 2.0)}}))).fit()
    assert pbt.num_errors == 0
    exploits = read(pbt.experiment_path, "sweep.json")["exploits"]
    assert pbt.get_best_result().metrics["value"] > plain.get_best_result().metrics["value"], \
        [(e["trial"], e["step"], e["source_iteration"], e["new_config"]) for e in exploits]
    assert exploits
    for e in exploits:
        assert e["source"] != e["trial"]
        # the source's lr perturbed (×1.2, ×0.8) or resampled; not "differs from the old
        # one": ×0.8 of a source at 0.926 gave a trial its own 0.741 again (seen in CI, as
        # in the local twin of this test)
        src = e["source_config"]["train_loop_config"]["lr"]
        new = e["new_config"]["train_loop_config"]["lr"]
        assert new in (pytest.approx(src * 1.2), pytest.approx(src * 0.8)) or 0.1 <= new <= 2.0
        state = run_state(os.path.join(pbt.experiment_path, e["trial"]))
        # the restart from the copied checkpoint happened inside the same array task
        assert "RESTARTED" in [a["outcome"] for a in state["attempts"]]
        assert len(state["job_ids"]) == 1


def test_optuna_asks_in_each_array_task_and_tells_when_it_ends(storage):
    optuna = pytest.importorskip("optuna")
    from hpctrain.tune.search.optuna import OptunaSearch

    grid = tune.Tuner(trainer(w.quadratic, "opt", storage), param_space={
        "train_loop_config": {"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)}},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=4,
                                    max_concurrent_trials=2,
                                    search_alg=OptunaSearch(seed=3))).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 4
    trials = read(grid.experiment_path, "sweep.json")["trials"]
    assert sorted(t["search"]["optuna_trial"] for t in trials) == [0, 1, 2, 3]
    assert all(t["search_told"] for t in trials)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="opt", storage=JournalStorage(JournalFileBackend(
        os.path.join(grid.experiment_path, "search", "optuna-journal.log"))))
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    for t, r in zip(trials, grid):
        c = r.config["train_loop_config"]
        assert c == t["config"]["train_loop_config"]
        assert r.metrics["loss"] == pytest.approx((c["x"] - 3) ** 2 + (c["y"] + 1) ** 2)
