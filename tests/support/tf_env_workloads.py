"""A training function whose module names ``ReportCheckpointCallback`` at its top level, as
a Ray script does: a worker imports this module — and builds that class from ``tf.keras``
— when it unpickles the function, before the training function runs."""
import json
import os

LEGACY_KERAS_AT_IMPORT = os.environ.get("TF_USE_LEGACY_KERAS")

from hpctrain.tensorflow.keras import ReportCheckpointCallback  # noqa: E402 - after the probe

import hpctrain  # noqa: E402


def keras_in_use(config):
    """Writes which Keras this rank trains with to ``test-out/keras-rank-R.json``."""
    import tensorflow as tf

    ctx = hpctrain.get_context()
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    base = [c for c in ReportCheckpointCallback.__mro__ if c.__name__ == "Callback"][0]
    with open(os.path.join(d, f"keras-rank-{ctx.get_world_rank()}.json"), "w") as f:
        json.dump({"env_at_import": LEGACY_KERAS_AT_IMPORT,
                   "tf_keras": tf.keras.__name__,
                   "callback_base": base.__module__}, f)
    hpctrain.report({"done": 1})
