"""The training function of bench_watchdog.py: ``reports`` reports, each after
``step_ms`` of busy work; rank 0 returns its time per report (seconds)."""
import time

import hpctrain


def loop(config):
    per = []
    for i in range(config["reports"]):
        end = time.perf_counter() + config["step_ms"] / 1000
        while time.perf_counter() < end:
            pass
        t = time.perf_counter()
        hpctrain.report({"i": i})
        per.append(time.perf_counter() - t + config["step_ms"] / 1000)
    warm = per[len(per) // 5:]
    return sum(warm) / len(warm)
