"""The shape of the package, enforced (issue 14; docs/architecture.md explains it).

1. **No import cycle between folders.** The nodes are the sub-packages (``hpctrain.tune``,
   ``hpctrain.backends``, ``hpctrain._internal.worker``…, each with everything below it)
   and the modules directly in ``hpctrain/`` and ``hpctrain/_internal/`` (``spec``,
   ``trainer``…). Every import counts, the ones inside functions too (grimp reads them
   all): a function-local import that dodges a cycle at import time is still a cycle in
   the design.
2. **No module imports another module's private names** (``from x import _helper``): what
   another module needs gets a public name, or moves.
3. **No module imports another package's private modules** (``hpctrain.tune._sweep`` from
   ``hpctrain.cli``): a package's ``_*`` modules are its insides; what others need is in
   its public modules. ``hpctrain._internal`` is the exception: the library's own internal
   package, used everywhere (its sub-packages' ``_*`` modules are still theirs alone).
"""
import ast
import os
import re
import sys

import pytest
from helpers import ROOT as REPO

grimp = pytest.importorskip("grimp", reason="grimp (the dev extra) builds the import graph")

PACKAGE = "hpctrain"
ROOT = os.path.join(REPO, PACKAGE)


@pytest.fixture(scope="module")
def graph():
    sys.path.insert(0, os.path.dirname(ROOT))
    try:
        return grimp.build_graph(PACKAGE, include_external_packages=False, cache_dir=None)
    finally:
        sys.path.remove(os.path.dirname(ROOT))


def node_of(graph, module: str) -> str:
    """The folder a module counts in: ``hpctrain.tune._sweep`` → ``hpctrain.tune``;
    ``hpctrain._internal.worker.session`` → ``hpctrain._internal.worker``; a module
    directly in ``hpctrain/`` or ``hpctrain/_internal/`` is a node of its own."""
    parts = module.split(".")
    depth = 3 if parts[:2] == [PACKAGE, "_internal"] else 2
    top = ".".join(parts[:depth])
    if len(parts) > depth or graph.find_children(top):
        return top
    return module


def strongly_connected(edges):
    """Tarjan's algorithm: the groups of nodes that reach each other (size > 1)."""
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in list(edges):
        if v not in index:
            visit(v)
    return groups


def test_no_import_cycle_between_folders(graph):
    edges, why = {}, {}
    for module in graph.modules:
        a = node_of(graph, module)
        for imported in graph.find_modules_directly_imported_by(module):
            b = node_of(graph, imported)
            if a != b:
                edges.setdefault(a, set()).add(b)
                why.setdefault((a, b), f"{module} imports {imported}")
    problems = []
    for group in strongly_connected(edges):
        members = set(group)
        lines = [f"  {why[(a, b)]}" for a in group for b in sorted(edges[a] & members)]
        problems.append(f"these folders import each other: {', '.join(group)}\n"
                        + "\n".join(lines))
    assert not problems, ("\n\n".join(problems) + "\nHINT: move what ties them to the lower "
                          "folder, or give it a module of its own (docs/architecture.md)")


def private_imports(root: str = ROOT):
    """``(file, line, module, name)`` for every ``from M import _name`` of a private name of
    another hpctrain module (``__dunder__`` names are not private)."""
    found = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, os.path.dirname(root))[:-3].split(os.sep)
            is_pkg = rel[-1] == "__init__"
            here = rel[:-1] if is_pkg else rel
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = here if is_pkg else here[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = base + (node.module.split(".") if node.module else [])
                else:
                    target = (node.module or "").split(".")
                if target[:1] != [PACKAGE] or target == here:
                    continue
                for alias in node.names:
                    n = alias.name
                    if n.startswith("_") and not (n.startswith("__") and n.endswith("__")):
                        if os.path.exists(os.path.join(os.path.dirname(root), *target, n)) or \
                                os.path.exists(os.path.join(os.path.dirname(root), *target,
                                                            n + ".py")):
                            continue  # a private *module* of that package: its own business
                        found.append((os.path.relpath(path, os.path.dirname(root)),
                                      node.lineno, ".".join(target), n))
    return found


def test_no_module_imports_another_modules_private_names():
    found = private_imports()
    assert not found, ("private names imported from other modules:\n" + "\n".join(
        f"  {path}:{line}: from {module} import {name}" for path, line, module, name in found)
        + "\nHINT: give the name a public spelling in its module (or move it where both "
          "can reach it)")


def private_module_imports(edges):
    """``(importer, imported)`` for every import of a private module (``hpctrain.X._y``,
    at any depth below ``hpctrain.X``) from outside the package that holds it. A private
    module directly in ``hpctrain/`` (``_internal``, ``_version``) is the whole library's."""
    found = []
    for importer, imported in edges:
        parts = imported.split(".")
        for k in range(2, len(parts)):
            if parts[k].startswith("_") and not parts[k].startswith("__"):
                owner = ".".join(parts[:k])
                if importer != owner and not importer.startswith(owner + "."):
                    found.append((importer, imported))
                    break
    return sorted(found)


def test_no_module_imports_another_packages_private_modules(graph):
    edges = [(m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m)]
    found = private_module_imports(edges)
    assert not found, ("private modules imported from outside their package:\n" + "\n".join(
        f"  {a} imports {b}" for a, b in found)
        + "\nHINT: use (or add) the package's public module for it, e.g. "
          "hpctrain.tune.sweepdir for a sweep directory")


def test_no_import_cycle_between_the_modules_of_tune(graph):
    """Inside ``hpctrain.tune`` the modules form layers too: ``sweepdir`` (the sweep on
    disk), then ``_control``, ``_sweep``, then ``jobfile``/``tuner``, ``array_task``
    (each sub-package a node; the package's ``__init__`` only gathers names)."""
    top = f"{PACKAGE}.tune"

    def node(module):
        return ".".join(module.split(".")[:3])

    edges = {}
    for module in graph.find_descendants(top):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith(top + ".") and node(imported) != node(module):
                edges.setdefault(node(module), set()).add(node(imported))
    assert not strongly_connected(edges), strongly_connected(edges)


def missing_modules(root: str = ROOT):
    """``(file, line, module)`` for every import of an hpctrain module that does not exist
    (a path left behind by a move: function-local imports fail only when they run)."""
    found = []
    base = os.path.dirname(root)
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, base)[:-3].split(os.sep)
            here = rel[:-1] if rel[-1] == "__init__" else rel
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        pkg = here if rel[-1] == "__init__" else here[:-1]
                        pkg = pkg[:len(pkg) - (node.level - 1)]
                        target = pkg + (node.module.split(".") if node.module else [])
                    else:
                        target = (node.module or "").split(".")
                    targets = [target]
                    stem = os.path.join(base, *target)
                    if target[:1] == [PACKAGE] and os.path.isdir(stem):
                        init = os.path.join(stem, "__init__.py")
                        text = open(init, encoding="utf-8").read() if os.path.exists(init) else ""
                        for alias in node.names:  # `from pkg import module_or_name`
                            n = alias.name
                            if not (n == "*" or os.path.exists(os.path.join(stem, n + ".py"))
                                    or os.path.isdir(os.path.join(stem, n))
                                    or re.search(rf"\b{re.escape(n)}\b", text)):
                                found.append((os.path.relpath(path, base), node.lineno,
                                              ".".join(target + [n])))
                elif isinstance(node, ast.Import):
                    targets = [a.name.split(".") for a in node.names]
                else:
                    continue
                for target in targets:
                    if target[:1] != [PACKAGE]:
                        continue
                    stem = os.path.join(base, *target)
                    if not (os.path.isdir(stem) or os.path.exists(stem + ".py")):
                        found.append((os.path.relpath(path, base), node.lineno, ".".join(target)))
    return found


def test_every_import_of_an_hpctrain_module_names_one_that_exists():
    found = missing_modules()
    assert not found, "imports of modules that do not exist:\n" + "\n".join(
        f"  {path}:{line}: {module}" for path, line, module in found)


def test_the_checks_above_can_fail(tmp_path):
    """Both checks find what they look for (a package with a cycle and a private import)."""
    pkg = tmp_path / PACKAGE
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("def f():\n    from hpctrain.b import _g\n")
    (pkg / "b" / "__init__.py").write_text("import hpctrain.a\n\ndef _g():\n    pass\n")
    assert private_imports(str(pkg)) == [(os.path.join(PACKAGE, "a", "__init__.py"), 2,
                                          "hpctrain.b", "_g")]
    edges = {"hpctrain.a": {"hpctrain.b"}, "hpctrain.b": {"hpctrain.a"}, "hpctrain.c": set()}
    assert strongly_connected(edges) == [["hpctrain.a", "hpctrain.b"]]
    assert private_module_imports([
        ("hpctrain.cli.main", "hpctrain.tune._sweep"),                # another package's: no
        ("hpctrain.tune.tuner", "hpctrain.tune._sweep"),              # its own package's
        ("hpctrain.tune", "hpctrain.tune._control"),                  # (its __init__ too)
        ("hpctrain.cli.main", "hpctrain._internal.log"),              # _internal: everyone's
        ("hpctrain.run", "hpctrain._internal.worker._entry"),         # _internal.worker's own
        ("hpctrain._internal.worker.session", "hpctrain._internal.worker._entry"),
    ]) == [("hpctrain.cli.main", "hpctrain.tune._sweep"),
           ("hpctrain.run", "hpctrain._internal.worker._entry")]
    (pkg / "c.py").write_text("def f():\n    from .gone import x\n    from . import moved\n")
    assert missing_modules(str(pkg)) == [(os.path.join(PACKAGE, "c.py"), 2, "hpctrain.gone"),
                                         (os.path.join(PACKAGE, "c.py"), 3, "hpctrain.moved")]
