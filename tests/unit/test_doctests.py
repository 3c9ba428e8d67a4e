"""The input → output examples in the docstrings of the pure helpers are tests too."""
import doctest
import importlib

import pytest

MODULES = ["hpctrain.launchers.step", "hpctrain.launchers.pbsdsh", "hpctrain.launchers.srun",
           "hpctrain.schedulers.slurm",
           "hpctrain.schedulers.pbs", "hpctrain.schedulers.lsf",
           "hpctrain.schedulers.base", "hpctrain.cluster_env", "hpctrain.units",
           "hpctrain.backends", "hpctrain.backends.tensorflow", "hpctrain.backends.horovod",
           "hpctrain.rundir.commit", "hpctrain.worker.trial",
           "hpctrain.common.checkpoint_interval", "hpctrain.common.registry",
           "hpctrain.common.deadline", "hpctrain.worker.agreement",
           "hpctrain.backends.xgboost", "hpctrain.backends.lightgbm",
           "hpctrain.worker.nodezygote", "hpctrain.schema",
           "hpctrain.allocation.supervisor", "hpctrain.config.scheduler",
           "hpctrain.allocation.badnodes", "hpctrain.allocation.lead",
           "hpctrain.containers", "hpctrain.containers.base", "hpctrain.containers.apptainer",
           "hpctrain.containers.podman_hpc", "hpctrain.containers.shifter",
           "hpctrain.containers.pyxis", "hpctrain.containers.charliecloud",
           "hpctrain._internal", "hpctrain.plugins", "hpctrain.common.shipped"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
