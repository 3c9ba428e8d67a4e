"""A forwarder from the batch step's old address to :mod:`hpctrain.cli.batch`.

Job scripts rendered before the move exec the forwarder ``python -m hpctrain._internal.batch``;
a requeued or resubmitted one must still run. New scripts run the batch step itself."""
import sys

from hpctrain.cli.batch import main

if __name__ == "__main__":
    sys.exit(main())
