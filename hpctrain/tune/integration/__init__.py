"""``ray.tune.integration``: ``keras`` (importing TensorFlow only when its class is used)."""
