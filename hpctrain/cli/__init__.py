"""The ``hpctrain`` command line (:mod:`.main`) and its views of run directories.

* :mod:`.main` — the parsers and the subcommands.
* :mod:`.views` — ``results``, ``plot``, ``status`` of one run.
* :mod:`.listing` — ``hpctrain list``.
* :mod:`.sweep` — ``hpctrain sweep`` and a sweep's results, logs, cancel.
* :mod:`.jsonout` — ``--json``: what a command shows, as one JSON document.
* :mod:`.completion` — ``hpctrain completion bash|zsh|tcsh`` (shtab).
* :mod:`.text` — text from a run directory made safe for the terminal.
"""
from hpctrain.cli.main import main

__all__ = ["main"]
