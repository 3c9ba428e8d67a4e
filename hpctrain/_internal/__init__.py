"""The old addresses of hpctrain's internals, for what was written before they moved.

Until issue 41 the run-time modules sat under ``hpctrain/_internal/``, a privacy marker that
spanned every layer. They now sit in folders that follow the layers (``hpctrain.common``,
``hpctrain.rundir``, ``hpctrain.worker``, ``hpctrain.allocation``, ``hpctrain.driver``,
``hpctrain.gbdt``). Three things written by an earlier version still name the old paths, and
must keep working:

* a run directory's pickled payload (``hpctrain._internal.rundir.payload.WorkerPayload``),
  unpickled again when the job is requeued or resumed;
* a job script rendered before, whose batch step is ``python -m hpctrain._internal.batch``,
  and a hand-written rank line ``python -m hpctrain._internal.worker RUN_DIR``;
* a site's plugin module that imports ``hpctrain._internal.base.registry`` (the plugin guide
  named it; :mod:`hpctrain.plugins` is the public module now).

Importing this package installs one finder: an old name resolves to the module at its new
address, the *same* module object (a second copy would hold a second plugin registry), and
``python -m OLD`` runs the new module's code. Nothing else imports this package.

>>> import importlib, hpctrain._internal
>>> old = importlib.import_module("hpctrain._internal.base.registry")
>>> old is importlib.import_module("hpctrain.common.registry")
True
>>> new_address("hpctrain._internal.worker.session"), new_address("hpctrain.worker")
('hpctrain.worker.session', None)
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Dict, Optional

#: Each old package or module and where it went; a name below an old one moves with it.
MOVED: Dict[str, str] = {
    "hpctrain._internal.base": "hpctrain.common",
    "hpctrain._internal.rundir": "hpctrain.rundir",
    "hpctrain._internal.rendezvous": "hpctrain.rendezvous",
    "hpctrain._internal.worker": "hpctrain.worker",
    "hpctrain._internal.nodezygote": "hpctrain.worker.nodezygote",
    "hpctrain._internal.spare": "hpctrain.worker.spare",
    "hpctrain._internal.allocation": "hpctrain.allocation",
    "hpctrain._internal.driver": "hpctrain.driver",
    "hpctrain._internal.gbdt": "hpctrain.gbdt",
    "hpctrain._internal.gbdt_trainer": "hpctrain.gbdt.trainer",
    "hpctrain._internal.batch": "hpctrain.cli.batch",
}


def new_address(name: str) -> Optional[str]:
    """The module an old name stands for now, or None for a name that did not move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _OldAddresses(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finder and loader of the old names: the module is the new one, imported as itself."""

    def __init__(self) -> None:
        self._own_specs: Dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname, path=None, target=None):
        new = new_address(fullname)
        found = importlib.util.find_spec(new) if new else None
        if found is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, origin=found.origin,
            is_package=found.submodule_search_locations is not None)

    def create_module(self, spec):
        module = importlib.import_module(new_address(spec.name))
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system has just set the module's __spec__ to the old name's: put its
        # own back (the module ran already, under its new name).
        module.__spec__ = self._own_specs.pop(module.__spec__.name)

    def get_code(self, fullname):
        """For ``python -m OLD``: runpy runs the new module's code as ``__main__``."""
        found = importlib.util.find_spec(new_address(fullname))
        return found.loader.get_code(found.name)

    def get_source(self, fullname):
        found = importlib.util.find_spec(new_address(fullname))
        return found.loader.get_source(found.name)


if not any(isinstance(finder, _OldAddresses) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldAddresses())
