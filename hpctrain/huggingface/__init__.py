"""Hugging Face integrations: :mod:`hpctrain.huggingface.transformers` (``ray.train.huggingface``)."""
