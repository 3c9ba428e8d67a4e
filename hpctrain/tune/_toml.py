"""The ``[sweep]`` tables of a job file that name a scheduler, a search algorithm and
stopping criteria (``hpctrain sweep job.toml``)::

    [sweep]
    metric = "loss"
    mode = "min"
    stop = {training_iteration = 50}

    [sweep.scheduler]            # type: "asha" (= "async_hyperband"), "hyperband", "pbt"
    type = "asha"
    max_t = 16
    grace_period = 1
    reduction_factor = 2

    [sweep.search_alg]           # type: "optuna"
    type = "optuna"
    seed = 0

PBT's mutations name keys of ``[config]``, with the domains of ``[sweep.param_space]``::

    [sweep.scheduler]
    type = "pbt"
    time_attr = "training_iteration"
    perturbation_interval = 4
    [sweep.scheduler.hyperparam_mutations]
    lr = {uniform = [0.1, 2.0]}
    batch = [16, 32, 64]

Every other key is the keyword argument of that name of the Python class.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional

from ..errors import ConfigError
from . import schedulers
from .search import from_tables, optuna

SCHEDULERS = {"asha": "ASHAScheduler", "async_hyperband": "ASHAScheduler",
              "hyperband": "HyperBandScheduler", "pbt": "PopulationBasedTraining",
              "fifo": "FIFOScheduler"}
SEARCHERS = {"optuna": "OptunaSearch"}


def build(table: Dict[str, Any], key: str, error: Callable[[str, str, Optional[str]], Exception]
          ) -> Any:
    """The scheduler or search algorithm a ``[sweep.scheduler]``/``[sweep.search_alg]``
    table describes (``error(key, message, hint)`` makes the exception)."""

    kinds = SCHEDULERS if key.endswith("scheduler") else SEARCHERS
    table = dict(table)
    kind = table.pop("type", None)
    if kind not in kinds:
        raise error(f"{key}.type", f"expected one of {', '.join(repr(k) for k in kinds)}, got "
                    f"{kind!r}", f'e.g. [{key}] type = "{next(iter(kinds))}"')
    cls = getattr(schedulers if kinds is SCHEDULERS else optuna, kinds[kind])
    params = inspect.signature(cls.__init__).parameters
    unknown = [k for k in table if k not in params or k == "self"]
    if unknown:
        raise error(f"{key}.{unknown[0]}", f"{cls.__name__} has no option {unknown[0]!r}",
                    "its options: " + ", ".join(p for p in params if p != "self"))
    if "hyperparam_mutations" in table:

        muts = table["hyperparam_mutations"]
        lists = {k: v for k, v in muts.items() if isinstance(v, list)} \
            if isinstance(muts, dict) else {}
        space = from_tables({k: v for k, v in muts.items() if k not in lists},
                            f"{key}.hyperparam_mutations", error)
        table["hyperparam_mutations"] = {"train_loop_config": {**space, **lists}}
    if "perturbation_factors" in table:
        table["perturbation_factors"] = tuple(table["perturbation_factors"])
    try:
        return cls(**table)
    except ConfigError as e:
        raise error(key, e.message, e.hint) from None
    except (TypeError, ValueError) as e:
        raise error(key, str(e), None) from None
