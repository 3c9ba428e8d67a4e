"""``python -m hpctrain._internal.worker RUN_DIR``: one rank (see :mod:`.entry`)."""
from hpctrain._internal.worker.entry import main

main()
