"""The mechanical port of a Ray script to hpctrain: the import rewrite a user makes
(``ray.train`` → ``hpctrain.train``, ``ray.tune`` → ``hpctrain.tune``, ``ray.data`` →
``hpctrain.data``, ``ray.air`` → ``hpctrain.air``, ``import ray`` → ``import hpctrain``),
``ray.init(...)`` removed, and each data download replaced by a local file (or synthetic
data) of the same shape."""
import re
from typing import Dict, Optional

RULES = [
    # Ray's example helper modules (``ray.tune.examples.mnist_pytorch``) are ported too and
    # put beside the script as the package ``tune_examples`` (``train_examples``); the import
    # also binds the package, as ``import ray`` did for ``ray.tune.examples.X.f(...)``
    (re.compile(r"^(\s*)from ray\.(train|tune)\.examples\.(\w+) import (.*)$", re.M),
     r"\1import \2_examples.\3\n\1from \2_examples.\3 import \4"),
    (re.compile(r"\bray\.(train|tune)\.examples\b"), r"\1_examples"),
    (re.compile(r"^(\s*)ray\.init\(.*\)\s*$", re.M), r"\1pass  # (init removed)"),
    (re.compile(r"\bray\.(train|tune|data|air)\b"), r"hpctrain.\1"),
    (re.compile(r"^(\s*)import ray\s*$", re.M), r"\1import hpctrain"),
    (re.compile(r"^(\s*)from ray import ", re.M), r"\1from hpctrain import "),
]


def port(source: str, downloads: Dict[str, str],
         fixes: Optional[Dict[str, str]] = None) -> str:
    """``source`` with the rules applied; ``downloads``: exact text → its replacement
    (each must occur: a changed example fails here, not later). ``fixes``: the same, for
    a line of Ray's example that fails under today's framework whatever runs it (each
    named in docs/porting.md's list of Ray's examples)."""
    for old, new in {**downloads, **(fixes or {})}.items():
        if old not in source:
            raise AssertionError(f"the example no longer holds {old!r}")
        source = source.replace(old, new)
    for pattern, repl in RULES:
        source = pattern.sub(repl, source)
    left = re.findall(r"^.*\bray\b.*$", source, re.M)
    assert not [line for line in left if not line.lstrip().startswith("#")], left
    return source
