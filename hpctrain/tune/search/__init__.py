"""Search spaces, as in Ray Tune 2: ``grid_search``, ``choice``, ``uniform``, ``loguniform``,
``randint``, and the expansion of a space into trial configs (pure functions).

Ray's rules: every ``grid_search`` is crossed with every other one (the first one varies
fastest); ``num_samples`` repeats the whole grid; the other domains are sampled once per
trial. Sampling is seeded per trial (``seed`` and the trial's index), so the same space and
seed always give the same configs, whatever order trials are made in.

>>> space = {"num_epochs": 2, "input": grid_search([1, 2, 3])}
>>> [c["input"] for c in expand(space, num_samples=1, seed=0)]
[1, 2, 3]
>>> len(expand({"a": grid_search([1, 2]), "b": grid_search("xyz")}, num_samples=2, seed=0))
12
>>> space = {"lr": loguniform(1e-4, 1e-1)}
>>> expand(space, 1, seed=7) == expand(space, 1, seed=7) != expand(space, 1, seed=8)
True

In a TOML job file the same domains are one-key tables: ``input = {grid_search = [1, 2, 3]}``,
``lr = {loguniform = [1e-4, 1e-1]}``, ``batch = {choice = [16, 32]}``,
``p = {uniform = [0.0, 0.5]}``, ``layers = {randint = [1, 4]}`` (upper bound excluded).
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...errors import ConfigError

#: The one-key tables that stand for a domain, in TOML and in what ``grid_search`` returns.
DOMAINS = ("grid_search", "choice", "uniform", "loguniform", "randint")


@dataclass(frozen=True)
class Domain:
    """A sampled search-space entry (``choice``, ``uniform``, ``loguniform``, ``randint``)."""

    kind: str
    args: Tuple[Any, ...]

    def sample(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return copy.deepcopy(rng.choice(self.args[0]))
        if self.kind == "uniform":
            return rng.uniform(self.args[0], self.args[1])
        if self.kind == "loguniform":
            low, high = self.args
            return math.exp(rng.uniform(math.log(low), math.log(high)))
        if self.kind == "randint":
            return rng.randrange(self.args[0], self.args[1])
        raise ValueError(f"unknown domain {self.kind!r}")

    def to_table(self) -> Dict[str, Any]:
        """The TOML form: ``{"uniform": [0.0, 1.0]}``."""
        return {self.kind: list(self.args[0]) if self.kind == "choice" else list(self.args)}

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(repr(a) for a in self.args)})"


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def grid_search(values: Sequence[Any]) -> Dict[str, List[Any]]:
    """Every value of ``values`` in turn, crossed with every other grid search (Ray:
    ``{"grid_search": values}``)."""
    values = list(values)
    _check("grid_search", values)
    return {"grid_search": values}


def choice(categories: Sequence[Any]) -> Domain:
    """One of ``categories``, picked uniformly at random per trial."""
    categories = list(categories)
    _check("choice", categories)
    return Domain("choice", (categories,))


def uniform(lower: float, upper: float) -> Domain:
    """A float drawn uniformly from [lower, upper)."""
    _check("uniform", [lower, upper])
    return Domain("uniform", (lower, upper))


def loguniform(lower: float, upper: float) -> Domain:
    """A float whose logarithm is uniform over [log lower, log upper) (lower > 0)."""
    _check("loguniform", [lower, upper])
    return Domain("loguniform", (lower, upper))


def randint(lower: int, upper: int) -> Domain:
    """An integer from ``lower`` (included) to ``upper`` (excluded), as in Ray 2."""
    _check("randint", [lower, upper])
    return Domain("randint", (lower, upper))


def _problem(kind: str, args: Any) -> Optional[str]:
    """What is wrong with the arguments of a domain, or None."""
    if kind in ("grid_search", "choice"):
        if not isinstance(args, list) or not args:
            return "expected a non-empty array of values"
        return None
    if not isinstance(args, list) or len(args) != 2:
        return "expected [lower, upper]"
    low, high = args
    if kind == "randint":
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in args):
            return f"expected two integers [lower, upper], got {args!r}"
    elif not all(_number(x) for x in args):
        return f"expected two numbers [lower, upper], got {args!r}"
    if not low < high:
        return f"expected lower < upper, got {args!r}"
    if kind == "loguniform" and low <= 0:
        return f"expected 0 < lower < upper, got {args!r}"
    return None


def _check(kind: str, args: Any, key: Optional[str] = None) -> None:
    problem = _problem(kind, args)
    if problem:
        raise ConfigError(f"{key or kind}: {kind} {problem}")


# --------------------------------------------------------------------------- TOML tables
def is_domain_table(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in DOMAINS


def from_tables(space: Any, key: str, error: Callable[[str, str, Optional[str]], Exception]
                ) -> Dict[str, Any]:
    """A ``[sweep.param_space]`` table → a space of Python domains; ``error(key, message,
    hint)`` makes the exception for a bad entry (naming the file and the dotted key)."""
    if not isinstance(space, dict):
        raise error(key, f"expected a table of config keys, got {space!r}", None)
    out: Dict[str, Any] = {}
    for name, value in space.items():
        sub = f"{key}.{name}"
        if is_domain_table(value):
            kind, args = next(iter(value.items()))
            problem = _problem(kind, args)
            if problem:
                raise error(f"{sub}.{kind}", problem, _HINTS[kind])
            out[name] = {"grid_search": list(args)} if kind == "grid_search" else \
                Domain(kind, (list(args),) if kind == "choice" else tuple(args))
        elif isinstance(value, dict):
            unknown = [k for k in value if k not in DOMAINS]
            if len(value) > 1 and len(unknown) < len(value):
                raise error(sub, "a table with a domain key holds exactly one key, got "
                            + ", ".join(value), "one of " + ", ".join(DOMAINS))
            out[name] = from_tables(value, sub, error)
        else:
            out[name] = value
    return out


_HINTS = {
    "grid_search": "e.g. input = {grid_search = [1, 2, 3]}",
    "choice": "e.g. batch_size = {choice = [16, 32, 64]}",
    "uniform": "e.g. dropout = {uniform = [0.0, 0.5]}",
    "loguniform": "e.g. lr = {loguniform = [1e-4, 1e-1]}",
    "randint": "e.g. layers = {randint = [1, 4]} (4 excluded)",
}


def to_tables(space: Any) -> Any:
    """The TOML form of a space (the inverse of :func:`from_tables`)."""
    if isinstance(space, Domain):
        return space.to_table()
    if isinstance(space, dict):
        return {k: to_tables(v) for k, v in space.items()}
    return space


# --------------------------------------------------------------------------- expansion
Path = Tuple[str, ...]


def _walk(space: Any, path: Path = ()) -> List[Tuple[Path, Any]]:
    """Every grid search and domain in ``space``, with its key path, in key order."""
    out: List[Tuple[Path, Any]] = []
    if isinstance(space, Domain):
        return [(path, space)]
    if isinstance(space, dict):
        if set(space) == {"grid_search"}:
            return [(path, space)]
        for k, v in space.items():
            out.extend(_walk(v, path + (k,)))
    return out


def _set(config: Dict[str, Any], path: Path, value: Any) -> None:
    node = config
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _plain(space: Any) -> Any:
    """A deep copy of ``space`` (domains are filled in afterwards)."""
    if isinstance(space, dict):
        return {k: _plain(v) for k, v in space.items()}
    return copy.deepcopy(space)


def expand(space: Dict[str, Any], num_samples: int = 1, seed: int = 0) -> List[Dict[str, Any]]:
    """The trial configs of ``space``: ``num_samples`` × the product of the grid searches.
    Trial ``i``'s sampled values come from ``random.Random(f"{seed}:{i}")``."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ConfigError(f"num_samples: expected an integer ≥ 1, got {num_samples!r}")
    entries = _walk(space)
    grids = [(p, d["grid_search"]) for p, d in entries if isinstance(d, dict)]
    domains = [(p, d) for p, d in entries if isinstance(d, Domain)]
    # the first grid search varies fastest, as in Ray
    combos = [tuple(reversed(c)) for c in itertools.product(*[v for _, v in reversed(grids)])]
    out = []
    for _ in range(num_samples):
        for combo in combos:
            config = _plain(space)
            for (path, _), value in zip(grids, combo):
                _set(config, path, copy.deepcopy(value))
            rng = random.Random(f"{seed}:{len(out)}")
            for path, domain in domains:
                _set(config, path, domain.sample(rng))
            out.append(config)
    return out


def count(space: Dict[str, Any], num_samples: int = 1) -> int:
    """How many trials :func:`expand` makes, without making them."""
    n = num_samples
    for _, d in _walk(space):
        if isinstance(d, dict):
            n *= len(d["grid_search"])
    return n


def fingerprint(space: Any, num_samples: int) -> str:
    """A stable text for a space and ``num_samples`` (a re-run with another space is
    refused instead of mixing two sweeps in one directory)."""
    return json.dumps({"space": to_tables(space), "num_samples": num_samples},
                      sort_keys=True, default=repr)


def deep_update(base: Dict[str, Any], update: Dict[str, Any]) -> Dict[str, Any]:
    """``base`` with ``update`` merged in, key by key into nested tables (Ray merges a
    trial's ``train_loop_config`` over the trainer's this way).

    >>> deep_update({"a": 1, "o": {"x": 1, "y": 2}}, {"o": {"y": 3}, "b": 2})
    {'a': 1, 'o': {'x': 1, 'y': 3}, 'b': 2}
    """
    out = copy.deepcopy(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_update(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
