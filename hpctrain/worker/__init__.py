"""The worker side: what runs in each training process (one per rank).

* :mod:`.entry` — ``python -m hpctrain.worker RUN_DIR``: a rank's life (place in
  the job, backend set-up, the user's function, its exit record).
* :mod:`.session` — the session behind ``report``, ``get_checkpoint``, ``get_context``.
"""
