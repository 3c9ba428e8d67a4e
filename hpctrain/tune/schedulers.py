"""Trial schedulers, Ray Tune's names: :class:`ASHAScheduler` (alias
:class:`AsyncHyperBandScheduler`), :class:`HyperBandScheduler`,
:class:`PopulationBasedTraining` and :class:`FIFOScheduler` (the default: no scheduler).

```python
from hpctrain import tune
from hpctrain.tune.schedulers import ASHAScheduler

tuner = tune.Tuner(trainer, param_space=space, tune_config=tune.TuneConfig(
    metric="loss", mode="min", num_samples=8,
    scheduler=ASHAScheduler(max_t=16, grace_period=2, reduction_factor=2)))
```

How they work without a central driver
--------------------------------------
A sweep's trials run as separate jobs (one array task each) or side by side in one
process, so no driver sees every result as it comes. Each decision is taken by the
trial itself, in the ``report()`` of its rank 0, from a state file shared through the
sweep directory:

* ``<sweep>/scheduler_state.json`` (under ``scheduler_state.json.lock``, a
  :class:`filelock.FileLock`) holds what the scheduler has seen: ASHA's rungs (the metric
  of every trial that reached each milestone), PBT's last score of every trial and when
  each trial last perturbed. ``report()`` on rank 0 reads it, applies the scheduler's rule
  to the result just reported, writes it back and acts.
* STOP (ASHA below its rung's cutoff, ``max_t`` reached, a ``RunConfig(stop=...)``
  criterion met): the trial ends at once as a finished trial. Its committed checkpoints stay;
  ``state.json`` says ``"stopped_by"``, as does the trial's entry in ``sweep.json``; its
  array task exits 0, so nothing requeues or re-runs it (a re-run of the sweep skips it).
* EXPLOIT (PBT, a bottom-quantile trial at a perturbation interval): the trial copies the
  latest committed checkpoint of a top-quantile trial into its own ``checkpoints/`` (the
  newest one: every later restart resumes from it), perturbs that trial's config
  (:meth:`PopulationBasedTraining.explore`), records the step in ``sweep.json``
  (``"exploits"``: trial, step, source trial and checkpoint, old and new config) and in its
  trial's ``config``, and the trial's worker group restarts from the copied checkpoint with
  the new config (``get_checkpoint()`` returns it; the training function gets the new
  ``config``). The restart is not counted as a failure.

Rank 0 writes its decision into the attempt's directory and ends; the trial's supervisor
stops the other ranks. The decision is made at the report, so a trial stopped at a rung
never records a report past it.

Differences from Ray
--------------------
* ``HyperBandScheduler`` is run asynchronously: Ray's synchronous HyperBand *pauses*
  trials at a rung until the whole bracket got there, which for trials that are job array
  tasks would hold (or end and re-queue) allocations. Here it is ASHA over the brackets
  HyperBand would make (``s_max + 1`` of them, ``grace_period=1``); each trial's bracket is
  drawn as Ray's ASHA draws it.
* PBT: ``synch=True`` is not supported (it needs a driver that waits for every trial);
  the trials' loops should report a checkpoint at least every ``perturbation_interval``
  (a trial with no committed checkpoint is never exploited).
* A trial's time attribute ``training_iteration`` is the report count (``_training_iteration``
  in result.json); ``time_total_s`` is the time since the current attempt of the trial
  started its training function.
"""
from __future__ import annotations

import copy
import math
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ConfigError
from .search import Domain, is_domain_table, to_tables

CONTINUE, STOP, EXPLOIT = "CONTINUE", "STOP", "EXPLOIT"


def _percentile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile, ``q`` in [0, 100]; NaNs ignored.

    >>> _percentile([1, 2, 3, 4], 50)
    2.5
    >>> _percentile([3.0], 75)
    3.0
    """
    xs = sorted(v for v in values if not (isinstance(v, float) and math.isnan(v)))
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def result_value(result: Dict[str, Any], key: str) -> Any:
    """``result[key]``; Ray's auto-filled names (``training_iteration``) are found under
    hpctrain's (``_training_iteration``) too."""
    if key in result:
        return result[key]
    return result.get("_" + key)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class TrialScheduler:
    """The base of the schedulers (Ray's ``TrialScheduler``)."""

    CONTINUE = CONTINUE
    STOP = STOP

    metric: Optional[str] = None
    mode: Optional[str] = None

    def set_search_properties(self, metric: Optional[str], mode: Optional[str]) -> None:
        """Take the TuneConfig's metric and mode where the scheduler was given none."""
        self.metric = self.metric or metric
        self.mode = self.mode or mode
        if self.needs_metric and (not self.metric or self.mode not in ("min", "max")):
            raise ConfigError(
                f"tune_config.scheduler: {type(self).__name__} needs a metric and a mode "
                f"(\"min\" or \"max\"), got metric={self.metric!r}, mode={self.mode!r}",
                hint="give metric= and mode= to the scheduler or to TuneConfig")

    needs_metric = True

    def score(self, result: Dict[str, Any]) -> Optional[float]:
        """The metric as a score where higher is better; None when not reported."""
        v = result.get(self.metric) if self.metric else None
        if not _number(v) or (isinstance(v, float) and math.isnan(v)):
            return None
        return float(v) if self.mode == "max" else -float(v)

    def on_result(self, state: Dict[str, Any], trial_id: str, result: Dict[str, Any],
                  rng: random.Random) -> Tuple[str, Dict[str, Any]]:
        """Apply the rule to ``result`` of ``trial_id``: ``(CONTINUE | STOP | EXPLOIT,
        details)``; ``state`` (JSON, shared by every trial) is updated in place."""
        return CONTINUE, {}

    def due(self, result: Dict[str, Any], memo: Dict[str, Any]) -> bool:
        """False when :meth:`on_result` would surely CONTINUE and change nothing, from
        what this trial's process remembers (``memo``, filled by :meth:`remember`): the
        shared state file is then not touched at this report."""
        return True

    def remember(self, state: Dict[str, Any], trial_id: str, memo: Dict[str, Any]) -> None:
        """After :meth:`on_result`: keep in ``memo`` what :meth:`due` needs."""

    def on_trial_end(self, state: Dict[str, Any], trial_id: str) -> None:
        """A trial finished or failed (``state["ended"]`` lists them)."""
        ended = state.setdefault("ended", [])
        if trial_id not in ended:
            ended.append(trial_id)

    def describe(self) -> Dict[str, Any]:
        """What ``sweep.json`` records of the scheduler."""
        out = {"type": type(self).__name__}
        out.update({k: v for k, v in vars(self).items() if not k.startswith("_")
                    and (v is None or isinstance(v, (bool, int, float, str, list, tuple)))})
        return out


class FIFOScheduler(TrialScheduler):
    """No scheduling: every trial runs to its end (Ray's default)."""

    needs_metric = False


class ASHAScheduler(TrialScheduler):
    """Asynchronous successive halving (Ray's ``ASHAScheduler`` / ``AsyncHyperBandScheduler``).

    Rungs sit at ``grace_period * reduction_factor**k`` (below ``max_t``) of ``time_attr``.
    A trial reaching a rung continues only if its metric is in the top
    ``1/reduction_factor`` of the results recorded at that rung so far (the cutoff is the
    ``(1 - 1/reduction_factor)`` percentile of those results, the trial's own excluded);
    otherwise it stops. A trial reaching ``max_t`` stops (``stop_last_trials``).
    ``brackets`` > 1: each trial is placed in one bracket (bracket ``s`` starts its rungs at
    ``grace_period * reduction_factor**s``), drawn with Ray's softmax over the rung counts.
    """

    def __init__(self, time_attr: str = "training_iteration", metric: Optional[str] = None,
                 mode: Optional[str] = None, max_t: int = 100, grace_period: int = 1,
                 reduction_factor: float = 4, brackets: int = 1,
                 stop_last_trials: bool = True):
        if mode is not None and mode not in ("min", "max"):
            raise ConfigError(f'ASHAScheduler: mode: expected "min" or "max", got {mode!r}')
        if not (_number(grace_period) and grace_period > 0):
            raise ConfigError(f"ASHAScheduler: grace_period: expected a number > 0, got "
                              f"{grace_period!r}")
        if not (_number(max_t) and max_t >= grace_period):
            raise ConfigError(f"ASHAScheduler: max_t: expected a number ≥ grace_period "
                              f"({grace_period}), got {max_t!r}")
        if not (_number(reduction_factor) and reduction_factor > 1):
            raise ConfigError(f"ASHAScheduler: reduction_factor: expected a number > 1, got "
                              f"{reduction_factor!r}")
        if isinstance(brackets, bool) or not isinstance(brackets, int) or brackets < 1:
            raise ConfigError(f"ASHAScheduler: brackets: expected an integer ≥ 1, got "
                              f"{brackets!r}")
        self.time_attr = time_attr
        self.metric = metric
        self.mode = mode
        self.max_t = max_t
        self.grace_period = grace_period
        self.reduction_factor = reduction_factor
        self.brackets = brackets
        self.stop_last_trials = stop_last_trials

    def rungs(self, bracket: int = 0) -> List[float]:
        """The milestones of ``bracket``, highest first (as Ray walks them)."""
        rf = self.reduction_factor
        n = int(math.log(self.max_t / self.grace_period) / math.log(rf) - bracket + 1 + 1e-9)
        return [self.grace_period * rf ** (k + bracket) for k in reversed(range(max(0, n)))]

    def _bracket_of(self, state: Dict[str, Any], trial_id: str, rng: random.Random) -> int:
        placed = state.setdefault("bracket_of", {})
        if trial_id not in placed:
            sizes = [len(self.rungs(s)) for s in range(self.brackets)]
            top = max(sizes)
            weights = [math.e ** (s - top) for s in sizes]
            placed[trial_id] = rng.choices(range(self.brackets), weights=weights)[0]
        return placed[trial_id]

    def on_result(self, state, trial_id, result, rng):
        t = result_value(result, self.time_attr)
        score = self.score(result)
        if not _number(t) or score is None:
            return CONTINUE, {}
        if t >= self.max_t and self.stop_last_trials:
            return STOP, {"reason": f"{self.time_attr} reached max_t={self.max_t}"}
        bracket = self._bracket_of(state, trial_id, rng)
        recorded_all = state.setdefault("rungs", {}).setdefault(str(bracket), {})
        for milestone in self.rungs(bracket):
            recorded = recorded_all.setdefault(repr(float(milestone)), {})
            if t < milestone or trial_id in recorded:
                continue
            cutoff = _percentile(list(recorded.values()), (1 - 1 / self.reduction_factor)
                                 * 100) if recorded else None
            recorded[trial_id] = score
            if cutoff is not None and score < cutoff:
                value = result.get(self.metric)
                return STOP, {"reason": f"{self.metric}={value} below the cutoff of the rung "
                                        f"{self.time_attr}={milestone:g} "
                                        f"({len(recorded) - 1} trials there before it)",
                              "rung": milestone}
            return CONTINUE, {"rung": milestone}
        return CONTINUE, {}


    def due(self, result, memo):
        t = result_value(result, self.time_attr)
        if not _number(t) or self.score(result) is None:
            return False
        if t >= self.max_t or "bracket" not in memo:
            return True
        return any(m <= t and m not in memo["recorded"] for m in self.rungs(memo["bracket"]))

    def remember(self, state, trial_id, memo):
        bracket = state.get("bracket_of", {}).get(trial_id)
        if bracket is None:
            return
        memo["bracket"] = bracket
        rungs = state.get("rungs", {}).get(str(bracket), {})
        memo["recorded"] = {m for m in self.rungs(bracket)
                            if trial_id in rungs.get(repr(float(m)), {})}


AsyncHyperBandScheduler = ASHAScheduler


class HyperBandScheduler(ASHAScheduler):
    """HyperBand's brackets with ASHA's asynchronous promotion (see the module's notes:
    Ray's version pauses trials until their bracket caught up). ``max_t`` and
    ``reduction_factor`` as Ray's (81 and 3): brackets ``s = 0 … s_max``,
    ``s_max = floor(log_rf(max_t))``."""

    def __init__(self, time_attr: str = "training_iteration", metric: Optional[str] = None,
                 mode: Optional[str] = None, max_t: int = 81, reduction_factor: float = 3,
                 stop_last_trials: bool = True):
        s_max = int(math.log(max_t) / math.log(reduction_factor) + 1e-9) if max_t >= 1 else 0
        super().__init__(time_attr=time_attr, metric=metric, mode=mode, max_t=max_t,
                         grace_period=1, reduction_factor=reduction_factor,
                         brackets=max(1, s_max + 1), stop_last_trials=stop_last_trials)


# --------------------------------------------------------------------------- PBT
class PopulationBasedTraining(TrialScheduler):
    """Population Based Training (Ray's ``PopulationBasedTraining``, asynchronous).

    Every ``perturbation_interval`` of ``time_attr`` (after ``burn_in_period``), a trial
    ranks itself among the trials' latest scores: in the bottom ``quantile_fraction`` it
    *exploits* a trial of the top quantile (picked at random): continues from that trial's
    latest committed checkpoint with its config *explored*: each key of
    ``hyperparam_mutations`` is resampled (with ``resample_probability``, or when its value
    is not one of the list's) or perturbed: a number multiplied by one of
    ``perturbation_factors`` (an int stays an int), a list value moved to a neighbour.
    ``hyperparam_mutations`` values: a list of values, a search domain
    (``tune.uniform(...)``...), a function of no argument, or a dict of those (nested).
    For a trainer the keys are shaped as the ``param_space``
    (``{"train_loop_config": {"lr": ...}}``).
    """

    def __init__(self, time_attr: str = "time_total_s", metric: Optional[str] = None,
                 mode: Optional[str] = None, perturbation_interval: float = 60.0,
                 burn_in_period: float = 0.0,
                 hyperparam_mutations: Optional[Dict[str, Any]] = None,
                 quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                 perturbation_factors: Tuple[float, float] = (1.2, 0.8),
                 custom_explore_fn: Optional[Callable[[Dict], Dict]] = None,
                 log_config: bool = True, require_attrs: bool = True, synch: bool = False):
        if synch:
            raise ConfigError("PopulationBasedTraining: synch=True is not supported (the "
                              "trials of a sweep run as separate jobs, with no driver to "
                              "wait for all of them)", hint="leave synch=False")
        if not (_number(perturbation_interval) and perturbation_interval > 0):
            raise ConfigError(f"PopulationBasedTraining: perturbation_interval: expected a "
                              f"number > 0, got {perturbation_interval!r}")
        if not (_number(quantile_fraction) and 0 <= quantile_fraction <= 0.5):
            raise ConfigError(f"PopulationBasedTraining: quantile_fraction: expected a number "
                              f"in [0, 0.5], got {quantile_fraction!r}")
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ConfigError("PopulationBasedTraining: give hyperparam_mutations or "
                              "custom_explore_fn",
                              hint='e.g. hyperparam_mutations={"train_loop_config": '
                                   '{"lr": tune.loguniform(1e-4, 1e-1)}}')
        if mode is not None and mode not in ("min", "max"):
            raise ConfigError(f'PopulationBasedTraining: mode: expected "min" or "max", got '
                              f'{mode!r}')
        self.time_attr = time_attr
        self.metric = metric
        self.mode = mode
        self.perturbation_interval = perturbation_interval
        self.burn_in_period = burn_in_period
        self.hyperparam_mutations = hyperparam_mutations or {}
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.perturbation_factors = tuple(perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self.log_config = log_config
        self.require_attrs = require_attrs

    def on_result(self, state, trial_id, result, rng):
        t = result_value(result, self.time_attr)
        score = self.score(result)
        if not _number(t) or score is None:
            if self.require_attrs:
                missing = [k for k in (self.time_attr, self.metric)
                           if result_value(result, k) is None]
                if missing:
                    raise ConfigError(
                        f"PopulationBasedTraining: the report has no {', '.join(missing)} "
                        f"(keys: {', '.join(sorted(result))[:300]})",
                        hint="report the metric at every report, or pass "
                             "require_attrs=False")
            return CONTINUE, {}
        scores = state.setdefault("last_score", {})
        scores[trial_id] = score
        last = state.setdefault("last_perturbation_time", {})
        if t < self.burn_in_period:
            return CONTINUE, {}
        if t - last.get(trial_id, 0.0) < self.perturbation_interval:
            return CONTINUE, {}
        last[trial_id] = t
        ended = set(state.get("ended", []))  # (Ray: finished trials are not ranked)
        lower, upper = self.quantiles({k: v for k, v in scores.items() if k not in ended})
        if trial_id in lower and upper:
            return EXPLOIT, {"candidates": upper, "time": t}
        return CONTINUE, {}

    def quantiles(self, scores: Dict[str, float]) -> Tuple[List[str], List[str]]:
        """(bottom, top) trials by their latest score, as Ray computes them."""
        ranked = sorted(scores, key=lambda k: (scores[k], k))
        if len(ranked) <= 1:
            return [], []
        n = int(math.ceil(len(ranked) * self.quantile_fraction))
        if n > len(ranked) / 2:
            n = int(math.floor(len(ranked) / 2))
        return ranked[:n], ranked[-n:] if n else []

    def explore(self, config: Dict[str, Any], rng: random.Random) -> Dict[str, Any]:
        """A perturbed copy of ``config`` (Ray's ``_explore``)."""
        new = _explore(config, self.hyperparam_mutations, self.resample_probability,
                       self.perturbation_factors, rng)
        if self.custom_explore_fn is not None:
            new = self.custom_explore_fn(new)
            if new is None:
                raise ConfigError("PopulationBasedTraining: custom_explore_fn returned None; "
                                  "it must return the config")
        return new

    def describe(self):
        out = super().describe()

        out["hyperparam_mutations"] = _describe_mutations(to_tables(self.hyperparam_mutations))
        return out


def _describe_mutations(m: Any) -> Any:
    if isinstance(m, dict):
        return {k: _describe_mutations(v) for k, v in m.items()}
    if callable(m):
        return getattr(m, "__name__", repr(m))
    return m


def _sample(spec: Any, rng: random.Random) -> Any:

    if isinstance(spec, Domain):
        return spec.sample(rng)
    if isinstance(spec, (list, tuple)):
        return copy.deepcopy(rng.choice(list(spec)))
    if callable(spec):
        return spec()
    raise ConfigError(f"PopulationBasedTraining: hyperparam_mutations: expected a list, a "
                      f"search domain, a function or a dict of those, got {spec!r}")


def _explore(config: Dict[str, Any], mutations: Dict[str, Any], resample_p: float,
             factors: Sequence[float], rng: random.Random) -> Dict[str, Any]:
    new = copy.deepcopy(config)
    for key, spec in mutations.items():
        if isinstance(spec, dict) and not _is_domain_table(spec):
            new[key] = _explore(config.get(key) or {}, spec, resample_p, factors, rng)
            continue
        if _is_domain_table(spec):

            kind, args = next(iter(spec.items()))
            spec = list(args) if kind in ("grid_search", "choice") else \
                Domain(kind, tuple(args))
        old = config.get(key)
        if isinstance(spec, (list, tuple)):
            values = list(spec)
            if old not in values or rng.random() < resample_p:
                new[key] = copy.deepcopy(rng.choice(values))
            else:
                i = values.index(old) + rng.choice([-1, 1])
                new[key] = copy.deepcopy(values[max(0, min(len(values) - 1, i))])
        elif rng.random() < resample_p or not _number(old):
            new[key] = _sample(spec, rng)
        else:
            value = old * rng.choice(list(factors))
            new[key] = int(value) if isinstance(old, int) else value
    return new


def _is_domain_table(spec: Any) -> bool:

    return is_domain_table(spec)


def check_scheduler(scheduler: Any) -> Optional[TrialScheduler]:
    if scheduler is None:
        return None
    if isinstance(scheduler, str):
        raise ConfigError(f"tune_config.scheduler: expected a scheduler object, got the "
                          f"string {scheduler!r}",
                          hint="from hpctrain.tune.schedulers import ASHAScheduler; "
                               "TuneConfig(scheduler=ASHAScheduler(...))")
    if not isinstance(scheduler, TrialScheduler):
        raise ConfigError(f"tune_config.scheduler: expected an ASHAScheduler, "
                          f"HyperBandScheduler, PopulationBasedTraining or FIFOScheduler, "
                          f"got {type(scheduler).__name__}",
                          hint="from hpctrain.tune.schedulers import ASHAScheduler")
    return scheduler


__all__ = ["TrialScheduler", "FIFOScheduler", "ASHAScheduler", "AsyncHyperBandScheduler",
           "HyperBandScheduler", "PopulationBasedTraining"]
