"""The Ray Train TensorFlow example (toy regression, checkpoints with ``model.save`` and
``checkpoint.json``, then a new run seeded with ``resume_from_checkpoint``), unchanged but
for its imports:

    from ray import train                                  ->  import hpctrain as train
    from ray.train import Checkpoint, ScalingConfig        ->  from hpctrain import Checkpoint, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer     ->  from hpctrain.tensorflow import TensorflowTrainer

Run it with ``python examples/tensorflow_keras.py`` (runs go to $HPCTRAIN_STORAGE_PATH,
default ~/hpctrain_results). Needs ``pip install '.[tensorflow]'``: tf.keras is
Keras 2 (tf-keras), which the backend selects with TF_USE_LEGACY_KERAS=1.
"""
import json
import os
import tempfile

import numpy as np
import tensorflow as tf

import hpctrain as train
from hpctrain import Checkpoint, ScalingConfig
from hpctrain.tensorflow import TensorflowTrainer


def train_func(config):
    n = 100
    # create a toy dataset
    # data   : X - dim = (n, 4)
    # target : Y - dim = (n, 1)
    X = np.random.normal(0, 1, size=(n, 4))
    Y = np.random.uniform(0, 1, size=(n, 1))

    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    with strategy.scope():
        # toy neural network : 1-layer
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="linear", input_shape=(4,))])
        model.compile(optimizer="Adam", loss="mean_squared_error", metrics=["mse"])

    start_epoch = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            # Load model
            model = tf.keras.models.load_model(os.path.join(checkpoint_dir, "model.keras"))
            # Load state
            with open(os.path.join(checkpoint_dir, "checkpoint.json"), "r") as f:
                state = json.load(f)
            start_epoch = state["epoch"] + 1

    for epoch in range(start_epoch, config["num_epochs"]):
        history = model.fit(X, Y, batch_size=20)

        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            model.save(os.path.join(temp_checkpoint_dir, "model.keras"))
            checkpoint_dict = os.path.join(temp_checkpoint_dir, "checkpoint.json")
            with open(checkpoint_dict, "w") as f:
                json.dump({"epoch": epoch}, f)
            checkpoint = Checkpoint.from_directory(temp_checkpoint_dir)

            train.report({"loss": history.history["loss"][0]}, checkpoint=checkpoint)


if __name__ == "__main__":
    trainer = TensorflowTrainer(
        train_func,
        train_loop_config={"num_epochs": 5},
        scaling_config=ScalingConfig(num_workers=2),
    )
    result = trainer.fit()
    print(result.checkpoint)

    # Start a new run from a loaded checkpoint
    trainer = TensorflowTrainer(
        train_func,
        train_loop_config={"num_epochs": 10},
        scaling_config=ScalingConfig(num_workers=2),
        resume_from_checkpoint=result.checkpoint,
    )
    result = trainer.fit()
    print(result.checkpoint)
