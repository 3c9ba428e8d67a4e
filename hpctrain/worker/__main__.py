"""``python -m hpctrain.worker RUN_DIR``: one rank (see :mod:`.entry`)."""
from hpctrain.worker.entry import main

main()
