"""The driver side: the process a user runs (a laptop, a login node) that submits a run,
follows it and shows its progress.

* :mod:`.submission` — submit, record, follow, find a batch run.
* :mod:`.progress` — the live progress panel read from ``result.json``.
* :mod:`.login` — the warning for a run with no site on a login node.
"""
