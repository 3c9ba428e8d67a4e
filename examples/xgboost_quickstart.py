"""Ray Train's XGBoost quick start (doc/source/train/doc_code/xgboost_quickstart.py), with
its imports changed and, instead of Ray Data reading the iris CSVs from S3, an iris-like
synthetic pandas DataFrame handed to ``datasets=`` (each rank gets its rows from
``get_dataset_shard``):

    import ray.train                                   ->  import hpctrain.train as ray_train
    from ray.train.xgboost import XGBoostTrainer, RayTrainReportCallback
        ->  from hpctrain.train.xgboost import XGBoostTrainer, RayTrainReportCallback

from gbdt_quickstart_data import iris_like  # examples/gbdt_quickstart_data.py
    ray.data.read_csv("s3://.../iris/train")           ->  iris_like(...) (a DataFrame)

Run it with ``python examples/xgboost_quickstart.py`` (2 workers on this machine; runs go
to $HPCTRAIN_STORAGE_PATH, default ~/hpctrain_results). Needs ``pip install
'.[xgboost]'`` (from hpctrain's checkout).
"""
import xgboost

import hpctrain.train as ray_train
from hpctrain.train.xgboost import XGBoostTrainer, RayTrainReportCallback

from gbdt_quickstart_data import iris_like  # examples/gbdt_quickstart_data.py


# 1. Load your data (Ray: a Ray Data Dataset; here: DataFrames, sharded over the ranks).
train_dataset = iris_like(120, seed=0)
eval_dataset = iris_like(30, seed=1)


def train_func():
    # 2. Load your data shard as an `xgboost.DMatrix`.

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

    dtrain = xgboost.DMatrix(train_X, label=train_y)
    deval = xgboost.DMatrix(eval_X, label=eval_y)

    # 3. Define your xgboost model training parameters.
    params = {
        "tree_method": "approx",
        "objective": "reg:squarederror",
        "eta": 1e-4,
        "subsample": 0.5,
        "max_depth": 2,
    }

    # 4. Do distributed data-parallel training.
    # Ray Train sets up the necessary coordinator processes and
    # environment variables for your workers to communicate with each other.
    bst = xgboost.train(
        params,
        dtrain=dtrain,
        evals=[(deval, "validation")],
        num_boost_round=10,
        # Optional: Save the model checkpoint manually instead.
        callbacks=[RayTrainReportCallback()],
    )


# 5. Configure scaling and resource requirements.
scaling_config = ray_train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})

# 6. Launch distributed training job.
trainer = XGBoostTrainer(
    train_func,
    scaling_config=scaling_config,
    datasets={"train": train_dataset, "eval": eval_dataset},
    # If running in a multi-node cluster, this is where you
    # should configure the run's persistent storage that is accessible
    # across all worker nodes.
    # run_config=ray.train.RunConfig(storage_path="s3://..."),
)
result = trainer.fit()

# 7. Load the trained model
import os

with result.checkpoint.as_directory() as checkpoint_dir:
    model_path = os.path.join(checkpoint_dir, RayTrainReportCallback.CHECKPOINT_NAME)
    model = xgboost.Booster()
    model.load_model(model_path)

print(f"checkpoint: {result.checkpoint.path}")
print(f"rounds: {model.num_boosted_rounds()}, validation-rmse: {result.metrics['validation-rmse']:.4f}")
