"""``OptunaSearch`` (Ray's ``ray.tune.search.optuna.OptunaSearch``): each trial's config is
asked of an Optuna study when the trial starts, and the study is told the trial's result
when it ends.

```python
from hpctrain import tune
from hpctrain.tune.search.optuna import OptunaSearch

tuner = tune.Tuner(train_func, param_space={"lr": tune.loguniform(1e-4, 1e-1),
                                            "layers": tune.randint(1, 5)},
                   tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=20,
                                               search_alg=OptunaSearch(seed=0)))
```

No database server: the study lives in an Optuna journal file on the shared filesystem,
``<sweep>/search/optuna-journal.log`` (``optuna.storages.JournalStorage`` over a
``JournalFileBackend``, whose file lock works across nodes), named after the sweep. A
trial asks when it starts: in the driver for a local sweep, in its own array task for a
batch sweep (so later trials of an array learn from the earlier ones that ended); the
config and Optuna's trial number go into ``sweep.json`` (``"search"``) before the trial
runs, and its workers get that config. When a trial ends (finished, stopped early by a
scheduler, or failed) it tells the study its last reported ``metric`` (failed: a FAIL).

A killed driver loses nothing: a re-run (``Tuner.restore(path, trainable).fit()``, or
``hpctrain sweep`` again) continues the same study; trials that had asked keep their
configs (an interrupted one resumes from its checkpoint and tells at its end), the
others ask. Asking holds the sweep's ``search.lock`` (a FileLock) until the Optuna
trial is named after its sweep trial (user attribute ``hpctrain_trial``): a trial whose
answer was not recorded in ``sweep.json`` before a kill gets the same Optuna trial again
(also one not named yet, if Optuna had sampled every parameter); an Optuna trial left
half-made is marked FAIL, so the study holds no trial forever RUNNING.

Differences from Ray: ``space`` may be a dict of Optuna distributions (keys: the config's
keys, ``"a/b"`` for nested ones) or None (the Tuner's ``param_space`` is converted:
``uniform``/``loguniform`` → ``FloatDistribution``, ``randint`` → ``IntDistribution`` (upper
bound excluded, as in Ray), ``choice`` → ``CategoricalDistribution``); a define-by-run
function and ``evaluated_rewards`` are not supported. With ``seed``, trial ``i`` asks
with a sampler seeded ``seed + i`` (a sampler made in each array task would otherwise
draw the same startup points); a ``sampler`` given is re-seeded at random in each
process that asks.
"""
from __future__ import annotations

import copy
import math
import os
from typing import Any, Dict, List, Optional, Tuple

from filelock import FileLock

from . import Domain
from ...errors import ConfigError
from ...common.install import pip_install
from ...common.trust import makedirs, modes_of

JOURNAL = os.path.join("search", "optuna-journal.log")
#: The Optuna trial's user attribute that names the sweep's trial (``trial_00003``).
USER_ATTR = "hpctrain_trial"


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError("OptunaSearch needs optuna.\nHINT: " + pip_install("optuna")
                          ) from None
    return optuna


class Searcher:
    """The base of search algorithms (Ray's ``Searcher``)."""

    metric: Optional[str] = None
    mode: Optional[str] = None

    def set_search_properties(self, metric: Optional[str], mode: Optional[str],
                              config: Dict[str, Any]) -> bool:
        self.metric = self.metric or metric
        self.mode = self.mode or mode
        return True


class OptunaSearch(Searcher):
    def __init__(self, space: Optional[Dict[str, Any]] = None, metric: Optional[str] = None,
                 mode: Optional[str] = None,
                 points_to_evaluate: Optional[List[Dict[str, Any]]] = None,
                 sampler: Any = None, seed: Optional[int] = None,
                 evaluated_rewards: Optional[List] = None, study_name: Optional[str] = None):
        if callable(space):
            raise ConfigError("OptunaSearch: space: a define-by-run function is not "
                              "supported here",
                              hint="give a dict of optuna distributions, or leave space=None "
                                   "and put tune domains in the Tuner's param_space")
        if evaluated_rewards:
            raise ConfigError("OptunaSearch: evaluated_rewards is not supported here",
                              hint="leave it out; points_to_evaluate are evaluated as trials")
        if mode is not None and mode not in ("min", "max"):
            raise ConfigError(f'OptunaSearch: mode: expected "min" or "max", got {mode!r}')
        if sampler is not None and seed is not None:
            raise ConfigError("OptunaSearch: give seed or sampler, not both",
                              hint="seed the sampler yourself: TPESampler(seed=...)")
        _optuna()
        self._space = space
        self.metric = metric
        self.mode = mode
        self._points = [dict(p) for p in points_to_evaluate or []]
        self._sampler = sampler
        self._seed = seed
        self._study_name = study_name
        self._template: Dict[str, Any] = {}
        self._distributions: Dict[str, Any] = {}

    # -- set-up (in the driver) -----------------------------------------------------------
    def set_search_properties(self, metric, mode, config):
        super().set_search_properties(metric, mode, config)
        if not self.metric or self.mode not in ("min", "max"):
            raise ConfigError(
                f"tune_config.search_alg: OptunaSearch needs a metric and a mode (\"min\" or "
                f"\"max\"), got metric={self.metric!r}, mode={self.mode!r}",
                hint="give metric= and mode= to OptunaSearch or to TuneConfig")
        if self._space is not None:
            self._template = copy.deepcopy(config or {})
            self._distributions = dict(self._space)
        else:
            self._template, self._distributions = _convert(config or {})
        if not self._distributions:
            raise ConfigError("tune_config.search_alg: OptunaSearch found nothing to search "
                              "in param_space",
                              hint="use tune.uniform/loguniform/randint/choice in param_space")
        return True

    # -- in the process that starts a trial -----------------------------------------------
    def _study(self, sweep_path: str, sampler: Any = None):
        optuna = _optuna()
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = os.path.join(sweep_path, JOURNAL)
        makedirs(os.path.dirname(path), modes_of(sweep_path)[0])
        storage = JournalStorage(JournalFileBackend(path, lock_obj=_flock(path + ".flock")))
        name = self._study_name or os.path.basename(sweep_path)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError:
            study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                        direction="minimize" if self.mode == "min"
                                        else "maximize", load_if_exists=True)
            if self._points and not study.trials:
                for p in self._points:
                    study.enqueue_trial(_flatten(p))
        return study

    def _sampler_for(self, index: int):
        optuna = _optuna()
        if self._sampler is not None:
            self._sampler.reseed_rng()
            return self._sampler
        seed = None if self._seed is None else self._seed + index
        return optuna.samplers.TPESampler(seed=seed)

    def suggest_for(self, sweep_path: str, trial_id: str, retry: bool = False
                    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Ask the study for the config of the sweep's trial ``trial_id``. ``retry``: this
        trial asked before and was killed before the answer was recorded; a RUNNING Optuna
        trial named after it (or, when exactly one is, one not named yet: killed between
        the ask and the naming) is taken again instead of asking anew."""
        optuna = _optuna()
        index = int(trial_id.rsplit("_", 1)[-1])
        study = self._study(sweep_path, self._sampler_for(index))
        # asked before by a driver killed before it recorded the answer: the same trial
        running = [t for t in study.get_trials(deepcopy=False,
                                               states=(optuna.trial.TrialState.RUNNING,))
                   if t.user_attrs.get(USER_ATTR) == trial_id]
        # (called under the sweep's search lock, which every ask holds until its trial is
        # named: an Optuna trial RUNNING unnamed now was asked by a process that died)
        unnamed = [t for t in study.get_trials(deepcopy=False,
                                               states=(optuna.trial.TrialState.RUNNING,))
                   if USER_ATTR not in t.user_attrs]
        whole = [t for t in unnamed if set(t.params) == set(self._distributions)]
        if retry and not running and len(whole) == 1:
            study._storage.set_trial_user_attr(whole[0]._trial_id, USER_ATTR, trial_id)
            running = whole
        self._fail(study, [t for t in unnamed if t not in running])
        if running:
            number, params = running[0].number, running[0].params
        else:
            trial = study.ask(self._distributions)
            trial.set_user_attr(USER_ATTR, trial_id)
            number, params = trial.number, trial.params
        config = copy.deepcopy(self._template)
        for key, value in params.items():
            _set(config, key, value)
        return config, {"searcher": "OptunaSearch", "study": study.study_name,
                        "optuna_trial": number}

    def clean_up_for(self, sweep_path: str) -> int:
        """Fail the study's trials that no sweep trial can claim: asked by a process killed
        before it named its sweep trial (RUNNING and unnamed while the caller holds the
        sweep's search lock). Returns how many."""
        optuna = _optuna()
        if not os.path.exists(os.path.join(sweep_path, JOURNAL)):
            return 0
        study = self._study(sweep_path)
        return self._fail(study, [
            t for t in study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.RUNNING,))
            if USER_ATTR not in t.user_attrs])

    @staticmethod
    def _fail(study: Any, trials: List[Any]) -> int:
        optuna = _optuna()
        n = 0
        for t in trials:
            try:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                n += 1
            except (ValueError, RuntimeError):
                pass
        return n

    def on_trial_complete_for(self, sweep_path: str, trial: Dict[str, Any],
                              result: Optional[Dict[str, Any]], error: bool = False) -> None:
        optuna = _optuna()
        number = (trial.get("search") or {}).get("optuna_trial")
        if number is None:
            return
        study = self._study(sweep_path)
        value = (result or {}).get(self.metric)
        ok = (not error and isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(float(value)))
        try:
            if ok:
                study.tell(number, float(value))
            else:
                study.tell(number, state=optuna.trial.TrialState.FAIL)
        except (ValueError, RuntimeError):  # told already (a re-run after a crash)
            pass


def _flock(path: str):
    """The journal's lock: a ``filelock.FileLock`` (fcntl; the lock the sweep's other files
    use). Optuna's own locks are files that a killed process leaves behind (the next one
    waits 30 s, then breaks them); an fcntl lock goes with its process."""

    try:
        from optuna.storages.journal._file import BaseJournalFileLock as Base
    except ImportError:  # pragma: no cover - another optuna layout: duck typing
        Base = object

    class FlockJournalLock(Base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self._lock = FileLock(path)

        def acquire(self) -> bool:
            self._lock.acquire()
            return True

        def release(self) -> None:
            self._lock.release()

    return FlockJournalLock()


def _convert(space: Dict[str, Any], prefix: str = "") -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """param_space → (the config with domains left as None, {"a/b": distribution})."""
    optuna = _optuna()

    d = optuna.distributions
    template: Dict[str, Any] = {}
    dists: Dict[str, Any] = {}
    for k, v in space.items():
        key = f"{prefix}{k}"
        if isinstance(v, Domain):
            a = v.args
            if v.kind == "uniform":
                dists[key] = d.FloatDistribution(a[0], a[1])
            elif v.kind == "loguniform":
                dists[key] = d.FloatDistribution(a[0], a[1], log=True)
            elif v.kind == "randint":
                dists[key] = d.IntDistribution(a[0], a[1] - 1)
            else:
                dists[key] = d.CategoricalDistribution(list(a[0]))
            template[k] = None
        elif isinstance(v, dict) and set(v) == {"grid_search"}:
            raise ConfigError(f"param_space.{key.replace('/', '.')}: grid_search cannot be "
                              "used with OptunaSearch",
                              hint="use tune.choice([...]) (Optuna picks among the values)")
        elif isinstance(v, dict):
            sub_t, sub_d = _convert(v, key + "/")
            template[k] = sub_t
            dists.update(sub_d)
        else:
            template[k] = copy.deepcopy(v)
    return template, dists


def _set(config: Dict[str, Any], key: str, value: Any) -> None:
    parts = key.split("/")
    node = config
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _flatten(config: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


__all__ = ["OptunaSearch", "Searcher"]
