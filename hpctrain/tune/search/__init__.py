"""Ray Tune's ``ray.tune.search`` names for search spaces: the types and functions live in
:mod:`hpctrain.search_space` (the job spec checks a ``[sweep]`` space with them without
depending on ``tune``); this module is where a Ray user finds them."""
from hpctrain.search_space import (DOMAINS, Domain, choice, count, deep_update, expand,
                                   fingerprint, from_tables, grid_search, is_domain_table,
                                   loguniform, randint, to_tables, uniform)

__all__ = ["DOMAINS", "Domain", "choice", "count", "deep_update", "expand", "fingerprint",
           "from_tables", "grid_search", "is_domain_table", "loguniform", "randint",
           "to_tables", "uniform"]
