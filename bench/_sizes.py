"""Workload sizes, shared by the loops and bench_core.py (which must not import torch)."""
from typing import Any, Dict

# Sizes. DESIGN.md: MLP 784→256→10, 2 Gloo workers, 3 epochs, OMP_NUM_THREADS=1.
SIZES: Dict[str, Dict[str, Any]] = {
    "full": dict(samples=16384, batch_size=64, epochs=3, warmup_epochs=1, lr=0.05, seed=0,
                 report_n=2000, report_warmup=50, empty_passes=10,
                 ckpt_files=4, ckpt_file_mib=64, ckpt_iters=3, ckpt_warmup=1),
    "quick": dict(samples=4096, batch_size=64, epochs=3, warmup_epochs=1, lr=0.05, seed=0,
                  report_n=500, report_warmup=20, empty_passes=4,
                  ckpt_files=4, ckpt_file_mib=16, ckpt_iters=2, ckpt_warmup=1),
    # a longer training phase for profiling the per-step cost (not used by the bench)
    "profile": dict(samples=65536, batch_size=64, epochs=2, warmup_epochs=1, lr=0.05, seed=0,
                    report_n=2000, report_warmup=50, empty_passes=4,
                    ckpt_files=4, ckpt_file_mib=16, ckpt_iters=2, ckpt_warmup=1),
}
