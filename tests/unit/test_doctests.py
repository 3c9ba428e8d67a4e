"""The input → output examples in the docstrings of the pure helpers are tests too."""
import doctest
import importlib

import pytest

MODULES = ["hpctrain.launchers.step", "hpctrain.launchers.pbsdsh", "hpctrain.launchers.srun",
           "hpctrain.schedulers.slurm",
           "hpctrain.schedulers.pbs", "hpctrain.schedulers.lsf",
           "hpctrain.schedulers.base", "hpctrain.cluster_env", "hpctrain.units",
           "hpctrain.backends", "hpctrain.backends.tensorflow", "hpctrain.backends.horovod",
           "hpctrain._internal.rundir.commit", "hpctrain._internal.worker.trial",
           "hpctrain._internal.base.checkpoint_interval", "hpctrain._internal.base.registry",
           "hpctrain._internal.base.deadline", "hpctrain._internal.worker.agreement",
           "hpctrain.backends.xgboost", "hpctrain.backends.lightgbm",
           "hpctrain._internal.nodezygote", "hpctrain.schema",
           "hpctrain._internal.allocation.supervisor", "hpctrain.config.scheduler",
           "hpctrain._internal.allocation.badnodes", "hpctrain._internal.allocation.lead",
           "hpctrain.containers", "hpctrain.containers.base", "hpctrain.containers.apptainer",
           "hpctrain.containers.podman_hpc", "hpctrain.containers.shifter",
           "hpctrain.containers.pyxis", "hpctrain.containers.charliecloud"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
