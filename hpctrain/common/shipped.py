"""Where the files hpctrain ships beside its code are: the job-script templates
(``templates/``) and the site configs (``site-configs/``).

In the repository they sit at the top level, beside ``hpctrain/``, ``tests/`` and
``examples/``. The wheel carries them inside the package (``hpctrain/templates/``,
``hpctrain/site-configs/``: ``setup.py``'s ``build_py`` copies them there), so an installed
hpctrain finds them next to its own modules, and a checkout (an editable install, or
``PYTHONPATH`` at it) finds them one folder up. Both are hpctrain's own files, written by
whoever installed its code.
"""
from __future__ import annotations

import os

#: the package's own folder (``…/hpctrain``)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the folders shipped beside the code
SHIPPED = ("templates", "site-configs")


def shipped_dir(name: str, package_dir: str = PACKAGE_DIR) -> str:
    """The folder ``name`` (one of :data:`SHIPPED`) of this hpctrain: inside the package in
    an installed wheel, else the checkout's top-level one (a checkout has its
    ``pyproject.toml`` beside the package).

    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, "hpctrain")); os.makedirs(os.path.join(root, "templates"))
    >>> open(os.path.join(root, "pyproject.toml"), "w").close()
    >>> shipped_dir("templates", os.path.join(root, "hpctrain")) == os.path.join(root, "templates")
    True
    >>> os.makedirs(os.path.join(root, "hpctrain", "templates"))  # as a wheel installs it
    >>> shipped_dir("templates", os.path.join(root, "hpctrain")) == os.path.join(root, "hpctrain", "templates")
    True
    """
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not one of the folders hpctrain ships {SHIPPED}")
    inside = os.path.join(package_dir, name)
    if os.path.isdir(inside):
        return inside
    root = os.path.dirname(package_dir)
    if os.path.isfile(os.path.join(root, "pyproject.toml")):
        return os.path.join(root, name)
    return inside  # neither: the error that follows names where a wheel keeps it
