"""``ray.train.huggingface``: see :mod:`hpctrain.train.huggingface.transformers`."""
