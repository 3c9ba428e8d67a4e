"""A run started by hand inside an interactive allocation (salloc, qsub -I) spreads its
ranks over the allocation's nodes with the batch system's launcher."""
import pytest

from hpctrain import ScalingConfig
from hpctrain.allocation.interactive import interactive_allocation
from hpctrain.config import SchedulerConfig
from hpctrain.errors import ConfigError
from hpctrain.launchers import launcher_for
from hpctrain.spec import JobSpec

SALLOC = {"SLURM_JOB_ID": "968", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2"}


def spec(kind="local", **scaling):
    return JobSpec(scaling=ScalingConfig(**scaling), scheduler=SchedulerConfig(kind=kind))


def test_the_workers_go_over_the_allocations_nodes_with_srun():
    inside = interactive_allocation(spec(num_workers=4), SALLOC)
    assert (inside.kind, inside.job_id, inside.hosts) == ("slurm", "968", ("n1", "n2"))
    launcher = launcher_for(inside.spec, allocation_kind=inside.kind)
    assert (launcher.name, launcher.nodes, launcher.workers_per_node) == ("srun", 2, 2)
    assert inside.describe(launcher.name) == (
        "inside slurm allocation 968 (n1, n2): 4 workers on 2 node(s) with srun")
    # one worker: one node; the spec's own nodes are kept
    assert interactive_allocation(spec(num_workers=1), SALLOC).spec.scaling.nodes == 1
    own = interactive_allocation(spec(num_workers=2, num_nodes=1), SALLOC)
    assert own.spec.scaling.nodes == 1


def test_a_pbs_interactive_job_uses_its_nodefile(tmp_path):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("c1\nc1\nc2\nc2\n")
    inside = interactive_allocation(spec(num_workers=4),
                                    {"PBS_JOBID": "7.pbs", "PBS_NODEFILE": str(nodefile)})
    assert (inside.kind, inside.hosts, inside.spec.scaling.per_node) == ("pbs", ("c1", "c2"), 2)
    assert launcher_for(inside.spec, allocation_kind="pbs").name == "mpiexec"


def test_outside_an_allocation_or_for_another_batch_system_nothing_changes():
    assert interactive_allocation(spec(num_workers=2), {}) is None
    assert interactive_allocation(spec("pbs", num_workers=2), SALLOC) is None


def test_more_nodes_than_the_allocation_or_an_uneven_spread_is_refused():
    with pytest.raises(ConfigError) as info:
        interactive_allocation(spec(num_workers=3, num_nodes=3), SALLOC)
    assert str(info.value) == (
        "scaling: the run asks for 3 nodes, but it runs inside slurm allocation 968 (2 "
        "node(s): n1, n2)\nHINT: ask the allocation for more nodes (salloc -N, qsub -l "
        "select=), or fewer in scaling.num_nodes / workers_per_node")
    with pytest.raises(ConfigError) as info:
        interactive_allocation(spec(num_workers=3), SALLOC)
    assert str(info.value).startswith(
        "scaling.num_workers: 3 workers do not spread evenly over the 2 nodes of slurm "
        "allocation 968")


def test_fit_refuses_a_spread_the_allocation_cannot_hold_before_writing(tmp_path,
                                                                        monkeypatch):
    from hpctrain import RunConfig
    from hpctrain.torch import TorchTrainer

    for key, value in SALLOC.items():
        monkeypatch.setenv(key, value)
    trainer = TorchTrainer(len, scaling_config=ScalingConfig(num_workers=3),
                           run_config=RunConfig(name="uneven", storage_path=str(tmp_path)))
    with pytest.raises(ConfigError, match="3 workers do not spread evenly over the 2 nodes"):
        trainer.fit()
    assert list(tmp_path.iterdir()) == []
