"""Submit a training to Slurm from a login-node script and get its Result back.

    python examples/submit_from_python.py              # on hpctrain's test cluster
    python examples/submit_from_python.py perlmutter   # on a real site (set an account!)

fit() renders the batch script (kept as <run>/job.sh), submits it with sbatch (through
submitit), shows progress while the job runs and returns the Result. Ctrl-C detaches:
the job keeps running, and the message says how to follow it again.
"""
import os
import sys

from hpctrain import RunConfig, ScalingConfig, SlurmConfig
from hpctrain.torch import TorchTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quickstart_train import train_func  # noqa: E402  (imported by reference in the job)

if __name__ == "__main__":
    site = sys.argv[1] if len(sys.argv) > 1 else "test-cluster"
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 0.05, "epochs": 3, "samples": 4096, "batch_size": 64,
                           "seed": 0},
        scaling_config=ScalingConfig(num_workers=4, num_nodes=2),
        run_config=RunConfig(name="from-python"),
        scheduler=SlurmConfig(time="00:10:00"),
        site=site,
    )
    result = trainer.fit()
    print("final metrics:", result.metrics)
    print("checkpoint:", result.checkpoint)
