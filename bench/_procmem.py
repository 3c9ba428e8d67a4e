"""Peak proportional set size (PSS) of a process tree, sampled from /proc.

PSS charges each shared page to the processes sharing it in equal parts, so the sum over
a tree is what the tree costs the machine (RSS would count libtorch once per process).
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, Set


def children(pid: int) -> List[int]:
    """Direct children of ``pid``: /proc/PID/task/*/children where the kernel has it,
    else a scan of every process's parent."""
    kids: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    found_file = False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found_file = True
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    if found_file:
        return kids
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                kids.append(int(entry))
    return kids


def tree(root: int) -> List[int]:
    seen: Set[int] = set()
    todo = [root]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(children(p))
    return sorted(seen)


def cpu_seconds(pid: int) -> float:
    """user+sys CPU time of one process so far (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _role(pid: int, root: int) -> str:
    """``launcher`` for the tree's root, else the process's command, shortened."""
    if pid == root:
        return "launcher"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "gone"
    return " ".join(os.path.basename(w.decode(errors="replace")) for w in words[:4] if w)[:60]


def pss_kib(pid: int) -> int:
    """Pss of one process in KiB (0 if it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class TreeSampler(threading.Thread):
    """Samples the PSS sum of ``root`` and its descendants every ``interval`` seconds."""

    def __init__(self, root: int, interval: float = 0.05):
        super().__init__(name="pss-sampler", daemon=True)
        self.root = root
        self.interval = interval
        self.peak_kib = 0
        self.peak_procs = 0
        self.samples = 0
        self.cpu: Dict[int, float] = {}  # last CPU time seen per process of the tree
        self.peak_parts: List[Dict[str, Any]] = []  # each process's PSS at the peak
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            pids = tree(self.root)
            each = {p: pss_kib(p) for p in pids}
            total = sum(each.values())
            live = sum(1 for p in pids if os.path.exists(f"/proc/{p}"))
            if total > self.peak_kib:  # where the peak is: each process's share
                self.peak_parts = [{"process": _role(p, self.root), "pss_mib": round(k / 1024, 1)}
                                   for p, k in each.items() if k]
            self.peak_kib = max(self.peak_kib, total)
            self.peak_procs = max(self.peak_procs, live)
            self.samples += 1
            for p in pids:
                c = cpu_seconds(p)
                if c:
                    self.cpu[p] = c
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def root_cpu_s(self) -> float:
        """CPU the launcher process itself used (torchrun's agent, hpctrain's driver)."""
        return self.cpu.get(self.root, 0.0)

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024.0


def cpu_busy_seconds() -> float:
    """CPU-seconds the whole machine spent busy since boot (all cores, from /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """user+sys CPU of this process's waited-for descendants (the runs it started)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu_seconds() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class ForeignLoad:
    """CPU used on the machine by processes other than this bench and the runs it started,
    averaged over a window, in cores (0.0 = nobody else; 1.0 = one core's worth)."""

    def __init__(self):
        self.t = time.monotonic()
        self.busy = cpu_busy_seconds()
        self.ours = children_cpu_seconds() + self_cpu_seconds()

    def cores(self) -> float:
        dt = time.monotonic() - self.t
        busy = cpu_busy_seconds() - self.busy
        ours = children_cpu_seconds() + self_cpu_seconds() - self.ours
        return max(0.0, (busy - ours) / dt) if dt > 0 else 0.0


def wait_until_idle(max_wait: float, threshold: float = 0.15, window: float = 1.0) -> float:
    """Wait (at most ``max_wait`` s) for a ``window`` in which others use < ``threshold``
    cores; return the foreign load of the last window."""
    deadline = time.monotonic() + max_wait
    while True:
        w = ForeignLoad()
        time.sleep(window)
        load = w.cores()
        if load < threshold or time.monotonic() >= deadline:
            return load


def sample_once(root: int) -> float:
    """PSS of the tree now, MiB (for tests and debugging)."""
    return sum(pss_kib(p) for p in tree(root)) / 1024.0


def process_started() -> float:
    """When this process started (``time.time()`` scale, ~10 ms), from /proc; 0.0
    elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


if __name__ == "__main__":  # pragma: no cover - manual check
    import sys

    pid = int(sys.argv[1]) if len(sys.argv) > 1 else os.getpid()
    t = time.perf_counter()
    print(f"{sample_once(pid):.1f} MiB over {len(tree(pid))} processes "
          f"({(time.perf_counter() - t) * 1e3:.1f} ms to sample)")
