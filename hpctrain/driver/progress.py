"""Live progress of a run, read from its result.json (so it works the same for a local
run and for a job on a cluster whose run directory is on the shared filesystem).

On a terminal: a rich live panel (iteration, elapsed time, reports per second, latest
metrics, last checkpoint). In a Jupyter notebook (detected as rich detects it) the same
panel through rich's Jupyter support, which needs ipywidgets (an ``Output`` widget that
is redrawn). Elsewhere (CI, batch logs, a notebook without ipywidgets): one line per
report, at most every ``interval`` seconds, plus the last one::

    [hpctrain] iter 12 | 3.4s | 3.5 it/s | loss=0.25 acc=0.9 checkpoint=checkpoint_000002

With ``CheckpointConfig(checkpoint_frequency="auto")`` the interval chosen (rank 0 writes
it into each row as ``_checkpoint_interval_s``) is shown too: ``| checkpoint every
22m04s (auto)``.
"""
from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any, Dict, Optional

from hpctrain.common.checkpoint_interval import describe_interval
from hpctrain.rundir.layout import ResultTail, RunDir
from hpctrain.common.terminal import markup, plain
from hpctrain.driver.tracebacks import TracebackFolder

MAX_METRICS = 8


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.5g}"
    return str(v)


def user_metrics(row: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in row.items()
            if not k.startswith("_") and k != "checkpoint_dir_name"}


def in_jupyter() -> bool:
    """True in a Jupyter kernel (notebook, lab, Colab) where rich's live display works:
    rich's own detection, and ipywidgets importable (rich's ``Live`` draws into an
    ``ipywidgets.Output`` and only warns, on every refresh, without it)."""
    from rich.console import _is_jupyter

    return _is_jupyter() and importlib.util.find_spec("ipywidgets") is not None


class Progress:
    def __init__(self, run: RunDir, *, verbose: int = 1, interval: float = 2.0,
                 stream=None, force_plain: Optional[bool] = None, echo: Optional[bool] = None,
                 started: Optional[float] = None):
        self.run = run
        self.verbose = verbose
        self.echo = verbose >= 1 if echo is None else echo  # print the ranks' output
        self.interval = interval
        self.stream = stream or sys.stdout
        self.tail = ResultTail(run.result_file)
        self.start = started or time.time()  # elapsed time counts from here
        self._first: Optional[tuple] = None    # (time, iteration) of the first report seen
        self.latest: Optional[Dict[str, Any]] = None
        self.last_checkpoint: Optional[str] = None
        self.count = 0
        self._printed_at = 0.0
        self._printed_iter = -1
        self._folder = TracebackFolder(self._show_worker_line)
        # a notebook: stdout is the kernel's stream, not a TTY, yet rich can draw there
        self._jupyter = (force_plain is None and verbose >= 1 and self.stream is sys.stdout
                         and in_jupyter())
        plain = force_plain if force_plain is not None else not (
            self._jupyter or self.stream.isatty())
        self._live = None
        self._console = None
        if verbose >= 1 and not plain:
            from rich.console import Console
            from rich.live import Live

            if self._jupyter:
                # no file: rich displays into the notebook. Redrawn from tick() only, in
                # this thread, so ranks' lines (plain prints) stay out of the widget.
                self._console = Console(force_jupyter=True)
                self._live = Live(self._render(), console=self._console, auto_refresh=False,
                                  transient=False)
            else:
                self._console = Console(file=self.stream)
                self._live = Live(self._render(), console=self._console,
                                  refresh_per_second=4, transient=False)
            self._live.start(refresh=self._jupyter)

    # -- worker output ---------------------------------------------------------------
    def worker_line(self, rank: int, line: str) -> None:
        if self.echo:
            self._folder.line(rank, line)  # (a traceback the same as another rank's: once)

    def _show_worker_line(self, rank: int, line: str) -> None:
        text = f"(rank {rank}) {line}"
        if self._console is not None and not self._jupyter:
            self._console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    # -- reports ---------------------------------------------------------------------
    def tick(self) -> None:
        rows = self.tail.poll()
        for row in rows:
            self.count += 1
            self.latest = row
            if self._first is None:
                self._first = (row.get("_timestamp", time.time()),
                               row.get("_training_iteration", self.count))
            if row.get("checkpoint_dir_name"):
                self.last_checkpoint = row["checkpoint_dir_name"]
        if self.verbose < 1:
            return
        if self._live is not None:
            if rows:
                self._live.update(self._render(), refresh=self._jupyter)
        elif rows and time.time() - self._printed_at >= self.interval:
            self._print_plain()

    def _print_plain(self) -> None:
        row = self.latest or {}
        it = row.get("_training_iteration", self.count)
        if it == self._printed_iter:
            return
        metrics = plain(" ".join(f"{k}={_fmt(v)}"
                                 for k, v in list(user_metrics(row).items())[:MAX_METRICS]))
        ck = f" checkpoint={self.last_checkpoint}" if self.last_checkpoint else ""
        rate = self.rate()
        pace = f" | {rate:.3g} it/s" if rate else ""
        every = self.checkpoint_interval()
        every = f" | checkpoint every {every} (auto)" if every else ""
        print(f"[hpctrain] iter {it} | {time.time() - self.start:.1f}s{pace}{every} | "
              f"{metrics}{ck}", file=self.stream, flush=True)
        self._printed_at = time.time()
        self._printed_iter = it

    def rate(self) -> Optional[float]:
        """Reports per second since the first report seen (None until two)."""
        row = self.latest or {}
        if self._first is None or "_timestamp" not in row:
            return None
        t0, it0 = self._first
        dt = row["_timestamp"] - t0
        its = row.get("_training_iteration", self.count) - it0
        return its / dt if dt > 0 and its > 0 else None

    def checkpoint_interval(self) -> Optional[str]:
        """The interval ``CheckpointConfig(checkpoint_frequency="auto")`` chose, as text
        (None: not in use)."""
        seconds = (self.latest or {}).get("_checkpoint_interval_s")
        if not isinstance(seconds, (int, float)):
            return None

        return describe_interval(seconds)

    def _render(self):
        from rich.table import Table

        t = Table(title=f"hpctrain · {markup(self.run.name)}", title_justify="left", expand=False)
        t.add_column("iteration", justify="right")
        t.add_column("elapsed", justify="right")
        t.add_column("it/s", justify="right")
        row = self.latest or {}
        metrics = list(user_metrics(row).items())[:MAX_METRICS]
        for k, _ in metrics:
            t.add_column(markup(k), justify="right")
        t.add_column("checkpoint")
        every = self.checkpoint_interval()
        if every:
            t.add_column("checkpoint every (auto)", justify="right")
        rate = self.rate()
        t.add_row(str(row.get("_training_iteration", "-")), f"{time.time() - self.start:.1f}s",
                  f"{rate:.3g}" if rate else "-",
                  *[markup(_fmt(v)) for _, v in metrics], self.last_checkpoint or "-",
                  *([every] if every else []))
        return t

    def close(self) -> None:
        self._folder.flush()
        self.tick()
        if self._live is not None:
            self._live.update(self._render(), refresh=self._jupyter)
            self._live.stop()
        elif self.verbose >= 1 and self.latest is not None:
            self._print_plain()
