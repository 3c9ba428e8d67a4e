"""The public trainers' signatures: Ray's keywords, explicit and typed (what an IDE's
completion and a type checker read), and a misspelt one refused by name."""
from __future__ import annotations

import importlib
import inspect

import pytest

import hpctrain
from hpctrain.job import JobStatus

TRAINERS = [("hpctrain.torch", "TorchTrainer", "torch_config"),
            ("hpctrain.tensorflow", "TensorflowTrainer", "tensorflow_config"),
            ("hpctrain.horovod", "HorovodTrainer", "horovod_config"),
            ("hpctrain.mpi", "MPITrainer", "mpi_config"),
            ("hpctrain.xgboost", "XGBoostTrainer", "xgboost_config"),
            ("hpctrain.lightgbm", "LightGBMTrainer", "lightgbm_config")]
RAY = ["train_loop_per_worker", "train_loop_config", "scaling_config", "run_config",
       "datasets", "dataset_config", "resume_from_checkpoint", "metadata"]
OWN = ["scheduler", "site"]


@pytest.mark.parametrize("module,name,config", TRAINERS, ids=[t[1] for t in TRAINERS])
def test_each_trainer_takes_rays_keywords_explicitly_and_typed(module, name, config):
    cls = getattr(importlib.import_module(module), name)
    params = inspect.signature(cls).parameters
    missing = [k for k in RAY + OWN + [config] if k not in params]
    assert not missing, f"{name}{inspect.signature(cls)} lacks {missing}"
    untyped = [k for k in RAY + OWN + [config] if params[k].annotation is inspect.Parameter.empty]
    assert not untyped, f"{name}: no annotation on {untyped}"
    for k in RAY[1:] + OWN + [config]:
        assert params[k].kind is inspect.Parameter.KEYWORD_ONLY, k


@pytest.mark.parametrize("module,name,config", TRAINERS[:4], ids=[t[1] for t in TRAINERS[:4]])
def test_a_misspelt_keyword_is_refused_by_its_name(module, name, config):
    cls = getattr(importlib.import_module(module), name)
    with pytest.raises(TypeError, match="scaling_confg"):
        cls(lambda: None, scaling_confg=hpctrain.ScalingConfig(num_workers=2))


def test_data_parallel_trainer_is_public_and_job_status_is_a_typed_string():
    assert "DataParallelTrainer" in hpctrain.__all__
    from hpctrain.job import Job

    assert inspect.signature(Job.status).return_annotation in (JobStatus, "JobStatus")
    assert JobStatus("FINISHED") == "FINISHED" and f"{JobStatus.FINISHED}" == "FINISHED"
    gone = JobStatus("JOB_NODE_FAIL")  # any scheduler word after JOB_ is one
    assert gone.done and str(gone) == "JOB_NODE_FAIL" and gone is JobStatus("JOB_NODE_FAIL")
    assert not JobStatus.RUNNING.done and not JobStatus("INTERRUPTED").done
    assert JobStatus("SOME_LATER_STATUS") == "SOME_LATER_STATUS"  # never fails on a new word
    with pytest.raises(ValueError):
        JobStatus("RUNNING ")
