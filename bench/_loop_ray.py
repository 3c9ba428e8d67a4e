"""The workload under Ray Train: ``python _loop_ray.py ...`` runs
``ray.train.torch.TorchTrainer(train_func, ScalingConfig(num_workers=2)).fit()``.

Used by bench_core.py only where Ray is installed (it is not a dependency of hpctrain).
Ray has no sync-to-disk switch and no staging area: a "staged" checkpoint is an ordinary
directory there, so it is copied like any other.
"""
import time

T_SCRIPT = time.time()

import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)

import _workload  # noqa: E402

import ray  # noqa: E402
import ray.train  # noqa: E402
import ray.train.torch  # noqa: E402


class RayAdapter(_workload.Adapter):
    name = "ray"

    def __init__(self, cfg):
        self.cfg = cfg
        ctx = ray.train.get_context()
        self.rank = ctx.get_world_rank()
        self.world = ctx.get_world_size()

    def prepare_model(self, model):
        return ray.train.torch.prepare_model(model)

    def prepare_loader(self, dataset, batch_size, seed):
        from torch.utils.data import DataLoader

        loader = ray.train.torch.prepare_data_loader(
            DataLoader(dataset, batch_size=batch_size, shuffle=True))
        return _EpochLoader(loader)

    def report(self, metrics):
        ray.train.report(metrics)

    def commit(self, src_dir, index):
        ckpt = ray.train.Checkpoint.from_directory(src_dir) if src_dir and self.rank == 0 else None
        ray.train.report({"ckpt": index}, checkpoint=ckpt)

    def staging_dir(self, index):
        return tempfile.mkdtemp(prefix="ckpt-", dir=self.cfg["workdir"])

    def commit_staged(self, staged_dir, index):
        self.commit(staged_dir, index)


class _EpochLoader:
    def __init__(self, loader):
        self.loader = loader

    def set_epoch(self, epoch):
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    def __iter__(self):
        return iter(self.loader)


def train_func(config):
    _workload.run(RayAdapter(config), config)


def main():
    args, cfg = _workload.common_args()
    cfg["t_driver_script_start"] = T_SCRIPT
    # Ray caps report() at a 2 s poll per call; a few calls are enough for its p50/p99
    cfg["report_n"] = min(cfg["report_n"], 20)
    cfg["report_warmup"] = min(cfg["report_warmup"], 2)
    cfg["t_fit_call"] = time.time()  # (Ray may copy the config when the trainer is built)
    trainer = ray.train.torch.TorchTrainer(
        train_func, train_loop_config=cfg,
        scaling_config=ray.train.ScalingConfig(num_workers=cfg["workers"],
                                                  use_gpu=cfg["device"] == "cuda"),
        run_config=ray.train.RunConfig(
            name=f"bench-{cfg['mode']}-{os.getpid()}",
            storage_path=os.path.join(cfg["workdir"], "ray-runs"),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1)))
    trainer.fit()


if __name__ == "__main__":
    main()
