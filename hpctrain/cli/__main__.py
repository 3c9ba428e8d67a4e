"""``python -m hpctrain.cli`` — the same as the ``hpctrain`` command."""
from hpctrain.cli.main import main

main()
