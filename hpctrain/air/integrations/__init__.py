"""``ray.air.integrations``: ``keras``, ``mlflow`` and ``wandb``, each importing its
framework only when its class is used."""
