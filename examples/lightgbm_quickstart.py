"""Ray Train's LightGBM quick start (doc/source/train/doc_code/lightgbm_quickstart.py),
with its imports changed and, instead of Ray Data reading the iris CSVs from S3, an
iris-like synthetic pandas DataFrame handed to ``datasets=``:

    import ray.train                                   ->  import hpctrain.train as ray_train
    from ray.train.lightgbm import LightGBMTrainer, RayTrainReportCallback
        ->  from hpctrain.train.lightgbm import LightGBMTrainer, RayTrainReportCallback
    ray.data.read_csv("s3://.../iris/train")           ->  iris_like(...) (a DataFrame)

``lightgbm.train`` gets LightGBM's network parameters (``machines``, ``num_machines``,
``local_listen_port``) and ``tree_learner="data"`` from hpctrain, so the two workers train
one model. Run it with ``python examples/lightgbm_quickstart.py``. Needs ``pip install
'.[lightgbm]'`` (from hpctrain's checkout).
"""
import lightgbm as lgb

import hpctrain.train as ray_train
from hpctrain.train.lightgbm import LightGBMTrainer, RayTrainReportCallback

from gbdt_quickstart_data import iris_like  # examples/gbdt_quickstart_data.py

# 1. Load your data (Ray: a Ray Data Dataset; here: DataFrames, sharded over the ranks).
train_dataset = iris_like(120, seed=0)
eval_dataset = iris_like(30, seed=1)


def train_func():
    # 2. Load your data shard as a `lightgbm.Dataset`.

    # Get dataset shards for this worker
    train_shard = ray_train.get_dataset_shard("train")
    eval_shard = ray_train.get_dataset_shard("eval")

    # Convert shards to pandas DataFrames
    train_df = train_shard.materialize().to_pandas()
    eval_df = eval_shard.materialize().to_pandas()

    train_X = train_df.drop("target", axis=1)
    train_y = train_df["target"]
    eval_X = eval_df.drop("target", axis=1)
    eval_y = eval_df["target"]

    train_set = lgb.Dataset(train_X, label=train_y)
    eval_set = lgb.Dataset(eval_X, label=eval_y)

    # 3. Define your LightGBM model training parameters.
    params = {
        "objective": "multiclass",
        "num_class": 3,
        "metric": ["multi_logloss", "multi_error"],
        "verbosity": -1,
        "boosting_type": "gbdt",
        "num_leaves": 31,
        "learning_rate": 0.05,
        "feature_fraction": 0.9,
        "bagging_fraction": 0.8,
        "bagging_freq": 5,
    }

    # 4. Do distributed data-parallel training.
    # Ray Train sets up the necessary coordinator processes and
    # environment variables for your workers to communicate with each other.
    model = lgb.train(
        params,
        train_set,
        valid_sets=[eval_set],
        valid_names=["eval"],
        num_boost_round=100,
        # Optional: Use the `RayTrainReportCallback` to save and report checkpoints.
        callbacks=[RayTrainReportCallback()],
    )


# 5. Configure scaling and resource requirements.
scaling_config = ray_train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})

# 6. Launch distributed training job.
trainer = LightGBMTrainer(
    train_func,
    scaling_config=scaling_config,
    datasets={"train": train_dataset, "eval": eval_dataset},
)
result = trainer.fit()

# 7. Load the trained model.
model = RayTrainReportCallback.get_model(result.checkpoint)

print(f"checkpoint: {result.checkpoint.path}")
print(f"rounds: {model.current_iteration()}, eval-multi_error: {result.metrics['eval-multi_error']:.4f}")
