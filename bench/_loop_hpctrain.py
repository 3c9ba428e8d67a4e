"""The workload under hpctrain: ``python _loop_hpctrain.py ...`` runs
``TorchTrainer(train_func, ScalingConfig(num_workers=2)).fit()`` with the local launcher.

The training function uses ``prepare_model`` / ``prepare_data_loader`` and reports with
``hpctrain.report``; checkpoints are ``Checkpoint.from_directory(d)`` from rank 0 (other
ranks report none), staged ones come from ``get_context().get_checkpoint_staging_dir()``.
"""
import time

T_SCRIPT = time.time()

import os  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the workers unpickle train_func, which refers to the _workload module by name
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)

import _workload  # noqa: E402  (imports torch, as a user's training script would)

import hpctrain  # noqa: E402
from hpctrain import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig  # noqa: E402
from hpctrain.torch import TorchTrainer, prepare_data_loader, prepare_model  # noqa: E402


class HpctrainAdapter(_workload.Adapter):
    name = "hpctrain"

    def __init__(self):
        self.ctx = hpctrain.get_context()
        self.rank = self.ctx.get_world_rank()
        self.world = self.ctx.get_world_size()

    def prepare_model(self, model):
        return prepare_model(model)

    def prepare_loader(self, dataset, batch_size, seed):
        from torch.utils.data import DataLoader

        return prepare_data_loader(DataLoader(dataset, batch_size=batch_size, shuffle=True))

    def report(self, metrics):
        hpctrain.report(metrics)

    def commit(self, src_dir, index):
        ckpt = Checkpoint.from_directory(src_dir) if self.rank == 0 else None
        hpctrain.report({"ckpt": index}, checkpoint=ckpt)

    def staging_dir(self, index):
        return self.ctx.get_checkpoint_staging_dir()

    def commit_staged(self, staged_dir, index):
        ckpt = Checkpoint.from_directory(staged_dir) if staged_dir else None
        hpctrain.report({"ckpt": index}, checkpoint=ckpt)


def train_func(config):
    _workload.run(HpctrainAdapter(), config)


def main():
    args, cfg = _workload.common_args()
    cfg["t_driver_script_start"] = T_SCRIPT
    run_config = RunConfig(
        name=f"bench-{cfg['mode']}-{os.getpid()}",
        storage_path=os.path.join(cfg["workdir"], "hpctrain-runs"),
        checkpoint_config=CheckpointConfig(num_to_keep=1, sync_to_disk=cfg["sync"]))
    trainer = TorchTrainer(train_func, train_loop_config=cfg,
                           scaling_config=ScalingConfig(num_workers=cfg["workers"],
                                                                use_gpu=cfg["device"] == "cuda"),
                           run_config=run_config)
    cfg["t_fit_call"] = time.time()
    trainer.fit()


if __name__ == "__main__":
    main()
