"""Iris-like synthetic data for the XGBoost and LightGBM quick starts (Ray's read the iris
CSVs from S3, which a cluster without internet cannot)."""
import numpy as np
import pandas as pd


def iris_like(rows, seed):
    """Four measurements and a class 0/1/2 in "target", like the iris CSVs."""
    rng = np.random.default_rng(seed)
    target = rng.integers(0, 3, size=rows)
    centers = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]])
    x = centers[target] + rng.normal(scale=0.35, size=(rows, 4))
    df = pd.DataFrame(x, columns=["sepal length (cm)", "sepal width (cm)",
                                  "petal length (cm)", "petal width (cm)"])
    df["target"] = target
    return df
