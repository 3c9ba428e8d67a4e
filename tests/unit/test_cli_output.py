"""What the command line prints from a run directory cannot drive the terminal (issue 25,
item 6): rich markup (``[bold red]``) from a run's state, errors and metrics is shown as
written, and ESC/control sequences (``\\x1b[2J`` clears the screen, ``\\x1b]0;…\\x07``
retitles the terminal, ``\\x9b`` is a one-byte CSI) are shown as their escapes."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import pytest

from hpctrain.common.terminal import markup, plain

MARKUP = "[bold red]X[/]"
CLEAR = "\x1b[2J"
HOSTILE = f"{MARKUP}{CLEAR}\x1b]0;pwned\x07\x9b31m\r"


def _run_dir(storage, name="r1"):
    """A run directory as a training (or whoever could write it) might leave it: a
    state, an error and metrics holding markup and control sequences."""
    path = os.path.join(storage, name)
    os.makedirs(path)
    now = time.time()
    state = {"status": "FAILED", "failures": 1, "stopped_because": f"because {HOSTILE}",
             "attempts": [{"attempt": 1, "job_id": f"7{MARKUP}", "outcome": "FAILED",
                           "failed_rank": 0, "error": f"ValueError: {HOSTILE}",
                           "warning": HOSTILE, "started": now - 10, "ended": now}]}
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump(state, f)
    with open(os.path.join(path, "result.json"), "w") as f:
        for i in (1, 2):
            f.write(json.dumps({f"loss{MARKUP}{CLEAR}": 1.0 / i, "note": HOSTILE,
                                "_training_iteration": i, "_timestamp": now - 5 + i}) + "\n")
    with open(os.path.join(path, "error.txt"), "w") as f:
        f.write(f"Traceback ...\nValueError: {HOSTILE}\n")
    return path


def _assert_neutralised(out: str, *, styled: bool) -> None:
    assert MARKUP in out, out                     # the markup shown as written
    assert "\\x1b[2J" in out                      # the ESC shown as its escape
    assert CLEAR not in out and "\x1b]" not in out and "\x9b" not in out and "\x07" not in out
    assert "\r" not in out
    if not styled:
        assert "\x1b" not in out


def test_text_helpers():
    assert plain(HOSTILE) == "[bold red]X[/]\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x0d"
    assert markup(MARKUP) == "\\[bold red]X\\[/]"
    assert plain("a\tb\nc") == "a\tb\nc"
    assert plain("\u202eevil") == "\\u202eevil"  # a right-to-left override


def test_results_shows_markup_and_escapes_as_text(tmp_path):
    from rich.console import Console

    from hpctrain.cli.views import print_results

    path = _run_dir(str(tmp_path))
    buf = io.StringIO()
    # a real terminal's console: rich's own styling is ESC sequences, the run's are not
    print_results(path, console=Console(file=buf, force_terminal=True, width=400,
                                        color_system="standard"))
    out = buf.getvalue()
    _assert_neutralised(out, styled=True)
    assert "ValueError: " in out and "because " in out


def test_status_prints_no_control_sequence(tmp_path):
    path = _run_dir(str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "hpctrain", "status", path], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    _assert_neutralised(p.stdout, styled=False)
    assert "stopped because because [bold red]X[/]\\x1b[2J" in p.stdout


@pytest.mark.parametrize("plain_listing", [True, False])
def test_list_shows_hostile_names_as_text(tmp_path, plain_listing):
    from hpctrain.cli.listing import print_listing

    _run_dir(str(tmp_path), name=f"r[bold red]X{CLEAR}")  # (a name holds no "/")
    buf = io.StringIO()
    print_listing(str(tmp_path), stream=buf, plain=plain_listing)
    out = buf.getvalue()
    assert "r[bold red]X\\x1b[2J" in out, out
    assert "\x1b" not in out
