"""The job spec: one data model behind the Python configs and ``job.toml``.

:class:`JobSpec` holds what a run needs (entry point, backend, scaling, run/checkpoint/
failure settings, ``train_loop_config`` and backend options). :func:`load_job_spec`
reads it from a TOML file plus ``section.key=value`` overrides; :meth:`JobSpec.to_toml`
writes the resolved spec back (``spec.toml`` in the run directory), and that file loads
into an equal spec.

Every error is a :class:`~hpctrain.errors.ConfigError` naming the file (or override),
the dotted key, what was expected and what was found.

The package's modules, bottom up:

* :mod:`.values`: what may reach the batch script and spec.toml (``[env]``, one-line
  strings, no credentials in ``[config]``).
* :mod:`.sections`: the sections and keys derived from the declarations, and the checks
  of a section's values.
* :mod:`.entrypoint`: :class:`EntryPoint`, the training function.
* :mod:`.jobspec`: :class:`JobSpec` and its TOML form.
* :mod:`.load`: layers (site < user < job file < overrides), :func:`load_job_spec`,
  :func:`spec_from_dict`.

Every name is importable from ``hpctrain.spec`` as before.
"""
from __future__ import annotations

from .values import (ENV_NAME_PATTERN, REDACTED, SCRIPT_SECTIONS, SCRIPT_VALUE_HELP,
                     check_script_value, is_credential_key, redact_config,
                     script_value_problem)
from .sections import (BACKENDS, CLASS_SECTIONS, EXPECTED, KEYS, SECTIONS, SPEC_SECTIONS,
                       TOP_LEVEL, TOP_LEVEL_KEYS, Ctx)
from .entrypoint import EntryPoint
from .jobspec import JobSpec
from .load import (apply_overrides, load_job_spec, load_site, merge_layers, resolved_spec,
                   spec_from_dict)

#: The sections that are no config class's fields (the name before the split).
_SPEC_SECTIONS = SPEC_SECTIONS

__all__ = [
    "BACKENDS", "EntryPoint", "JobSpec", "KEYS", "SECTIONS", "apply_overrides", "load_job_spec",
    "spec_from_dict",
]
