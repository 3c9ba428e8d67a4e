"""The run directory on the shared filesystem (its layout: docs/architecture.md and the docstring of :mod:`.layout`).

* :mod:`.layout` — paths, ``state.json``, ``result.json``, attempts (``RunDir``).
* :mod:`.commit` — atomic checkpoint commits, sharded or not.
* :mod:`.checks` — is a storage path usable, and seen by every node.
* :mod:`.resume` — continuing a run whose spec changed.
"""
