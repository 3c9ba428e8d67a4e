"""The shape of the package, enforced (issue 14; docs/architecture.md explains it).

1. **No import cycle between folders.** The nodes are the sub-packages (``hpctrain.tune``,
   ``hpctrain.backends``, ``hpctrain.worker``…, each with everything below it)
   and the modules directly in ``hpctrain/`` (``spec``, ``trainer``…). Every import counts, the ones inside functions too (grimp reads them
   all): a function-local import that dodges a cycle at import time is still a cycle in
   the design.
2. **No module imports another module's private names** (``from x import _helper``): what
   another module needs gets a public name, or moves.
3. **No module imports another package's private modules** (``hpctrain.tune._sweep`` from
   ``hpctrain.cli``): a package's ``_*`` modules are its insides; what others need is in
   its public modules.
"""
import ast
import glob
import os
import re
import subprocess
import sys

import pytest

#: the repository (tests/unit/ is two levels below it; also when run as a script)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
    ``hpctrain.worker.session`` → ``hpctrain.worker``; a module
    directly in ``hpctrain/`` is a node of its own."""
    parts = module.split(".")
    top = ".".join(parts[:2])
    if len(parts) > 2 or graph.find_children(top):
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
        ("hpctrain.cli.main", "hpctrain.common.log"),              # _internal: everyone's
        ("hpctrain.run", "hpctrain.worker._entry"),         # worker's own
        ("hpctrain.worker.session", "hpctrain.worker._entry"),
    ]) == [("hpctrain.cli.main", "hpctrain.tune._sweep"),
           ("hpctrain.run", "hpctrain.worker._entry")]
    (pkg / "c.py").write_text("def f():\n    from .gone import x\n    from . import moved\n")
    assert missing_modules(str(pkg)) == [(os.path.join(PACKAGE, "c.py"), 2, "hpctrain.gone"),
                                         (os.path.join(PACKAGE, "c.py"), 3, "hpctrain.moved")]


# ---------------------------------------------------------------- the layer order (issue 26)
DOC = os.path.join(os.path.dirname(ROOT), "docs", "architecture.md")


def read_layers(doc: str = DOC):
    """The layer list of docs/architecture.md ("The import rule"): node → layer number, from
    the numbered items after "The nodes form layers"; each name in backticks is a node (a
    path below ``hpctrain/``; ``__init__`` is the package itself)."""
    text = open(doc, encoding="utf-8").read()
    start = text.index("The nodes form layers")
    items = re.split(r"\n\s*(\d+)\. ", text[start:])
    layers, number = {}, 0
    for i in range(1, len(items), 2):
        if int(items[i]) != number + 1:
            break
        number += 1
        body = re.split(r"\n\s*\n", items[i + 1])[0]
        for name in re.findall(r"`([^`]+)`", body):
            if name.endswith(".py"):
                continue  # a file inside a node, named for the reader
            node = PACKAGE if name == "__init__" else \
                ".".join([PACKAGE] + name.removesuffix("/__init__").split("/"))
            layers[node] = number
    assert layers, f"{doc}: no numbered layer list after 'The nodes form layers'"
    return layers


def arrows(graph):
    """``{(node a, node b): "module imports module"}`` for every import between two nodes."""
    found = {}
    for module in sorted(graph.modules):
        a = node_of(graph, module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            b = node_of(graph, imported)
            if a != b:
                found.setdefault((a, b), f"{module} imports {imported}")
    return found


def layer_problems(graph, layers):
    nodes = {node_of(graph, m) for m in graph.modules}
    problems = [f"{n} is in no layer of {os.path.relpath(DOC)}" for n in sorted(nodes - set(layers))]
    problems += [f"{os.path.relpath(DOC)} lists {n}, which is not a node of the import graph"
                 for n in sorted(set(layers) - nodes)]
    for (a, b), why in sorted(arrows(graph).items()):
        if a in layers and b in layers and layers[a] < layers[b]:
            problems.append(f"{why}: layer {layers[a]} → layer {layers[b]}")
    return problems


def test_every_import_points_down_the_layers_of_the_architecture_page(graph):
    problems = layer_problems(graph, read_layers())
    assert not problems, ("\n".join(problems) + "\nHINT: an import goes to the same layer or a "
                          "lower one (docs/architecture.md, 'The import rule'): move what the "
                          "lower folder needs down, or place a new node in the list")


# ---------------------------------------------------------------- function-local imports
#: Frameworks and heavy optional libraries: imported inside the function that needs them, so
#: that ``import hpctrain`` and ``hpctrain --help`` load none of them.
LAZY = [
    "accelerate", "datasets", "deepspeed", "h5py", "horovod", "jax", "jinja2", "keras",
    "lightgbm", "lightning", "matplotlib", "mlflow", "mpi4py", "numpy", "optuna", "pandas",
    "peft", "psutil", "pyarrow", "pytorch_lightning", "ray", "rich", "scipy", "sklearn",
    "submitit", "tensorboard", "tensorboardX", "tensorflow", "tf_keras", "torch",
    "torchvision", "transformers", "wandb", "xgboost", "xxhash",
]
#: (file, module, the chain) whose function-local import avoids an import-time cycle: the
#: import chain that fails when it moves to the top (what relayer.py's hoist found).
CYCLES = [
    ("hpctrain/schedulers/base.py", "hpctrain.schedulers",
     "__init__ → schedulers/__init__ → schedulers/base"),
    ("hpctrain/schedulers/base.py", "hpctrain.spec",
     "__init__ → schedulers/__init__ → schedulers/base → spec/__init__ → spec/jobspec → "
     "config/scheduler → common/registry → schedulers"),
]


def _resolve(parts, node):
    if not node.level:
        return node.module or ""
    pkg = parts[:-1]
    pkg = pkg[:len(pkg) - (node.level - 1)]
    return ".".join(pkg + (node.module.split(".") if node.module else []))


def _parse_package(root: str = ROOT):
    """``{module name: (path, parts, tree)}`` for every module of the package."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                parts = os.path.relpath(path, os.path.dirname(root))[:-3].split(os.sep)
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                with open(path, encoding="utf-8") as f:
                    found[module] = (path, parts, ast.parse(f.read(), path))
    return found


def _imported(parts, node):
    """The modules an import statement names (``from m import n``: m, and m.n)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    target = _resolve(parts, node)
    return [target] + [f"{target}.{a.name}" for a in node.names]


def loads_a_lazy_library(modules):
    """The hpctrain modules that import a LAZY library when they are imported (through their
    top-level imports, not those in a ``try``, transitively)."""
    deps = {}
    for module, (_, parts, tree) in modules.items():
        deps[module] = set()
        for node in tree.body:
            stmts = [node] if isinstance(node, (ast.Import, ast.ImportFrom)) else \
                [s for s in ast.walk(node) if isinstance(s, (ast.Import, ast.ImportFrom))] \
                if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.dump(node.test) else []
            for s in stmts:
                deps[module].update(_imported(parts, s))
    heavy, changed = set(), True
    while changed:
        changed = False
        for module, names in deps.items():
            if module not in heavy and any(n.split(".")[0] in LAZY or n in heavy for n in names):
                heavy.add(module)
                changed = True
    return heavy


def _catches_import_error(handler) -> bool:
    if handler.type is None:
        return True
    names = {n.id for n in ast.walk(handler.type) if isinstance(n, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def loaded_by_the_command(modules, entry=f"{PACKAGE}.cli.main"):
    """What a process that starts with ``entry`` imports (default: ``hpctrain --help``):
    the modules (hpctrain's and the standard library's that hpctrain's name) reached from
    it through top-level imports."""
    def top_imports(module):
        _, parts, tree = modules[module]
        found = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                continue
            for s in [node] if isinstance(node, (ast.Import, ast.ImportFrom)) else \
                    [s for s in ast.walk(node) if isinstance(s, (ast.Import, ast.ImportFrom))] \
                    if isinstance(node, (ast.If, ast.Try)) else []:
                found.update(_imported(parts, s))
        return found
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages are imported first
            m = ".".join(parts[:i])
            if m not in seen and (m in modules or not m.startswith(PACKAGE)):
                seen.add(m)
                if m in modules:
                    todo.extend(top_imports(m))
    return seen


#: the processes whose start-up a function-local import may keep light: each loads its
#: entry module and what that imports at the top
START_UPS = {"hpctrain --help": f"{PACKAGE}.cli.main", "the batch step": f"{PACKAGE}.cli.batch",
             "a rank": f"{PACKAGE}.worker.entry", "import hpctrain": PACKAGE}


def function_local_imports(root: str = ROOT):
    """``(reason, file, line, module)`` for every import inside a function; reason is
    "lazy", "start-up" (its module is loaded by one of START_UPS, its target would not be
    without it), "cycle", "type hints", "optional" (in the body of a ``try`` that catches
    ImportError: a probe), "re-import" or None (unexplained)."""
    modules = _parse_package(root)
    heavy = loads_a_lazy_library(modules)
    startups = [loaded_by_the_command(modules, entry) for entry in START_UPS.values()
                if entry in modules]
    cycles = {(f, m) for f, m, _ in CYCLES}
    found = []
    for module, (path, parts, tree) in sorted(modules.items()):
        rel = os.path.relpath(path, os.path.dirname(root)).replace(os.sep, "/")
        at_top = {ast.dump(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}

        def visit(node, in_function, type_hints, probe):
            for child in ast.iter_child_nodes(node):
                hints = type_hints or (isinstance(child, ast.If)
                                       and "TYPE_CHECKING" in ast.dump(child.test))
                in_probe = probe or (isinstance(node, ast.Try) and child in node.body
                                     and any(_catches_import_error(h) for h in node.handlers))
                if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                    names = _imported(parts, child)
                    target = names[0]
                    if hints:
                        reason = "type hints"
                    elif in_probe:
                        reason = "optional"
                    elif any(n.split(".")[0] in LAZY or n in heavy for n in names):
                        reason = "lazy"
                    elif any(module in startup and not all(
                            n in startup or n.rsplit(".", 1)[0] in startup
                            and n.rsplit(".", 1)[0] in modules and n not in modules
                            for n in names) for startup in startups):
                        reason = "start-up"  # at the top, it would add to a start-up's imports
                    elif ast.dump(child) in at_top:
                        reason = "re-import"
                    elif (rel, target) in cycles:
                        reason = "cycle"
                    else:
                        reason = None
                    found.append((reason, rel, child.lineno, target))
                visit(child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)), hints, in_probe)
        visit(tree, False, False, False)
    return found


def test_function_local_imports_each_have_a_reason():
    found = function_local_imports()
    counts = {}
    for reason, *_ in found:
        counts[reason or "unexplained"] = counts.get(reason or "unexplained", 0) + 1
    bad = [f"  {path}:{line}: {module}" + (" (already imported at the top: delete it)"
                                           if reason == "re-import" else "")
           for reason, path, line, module in found if reason in (None, "re-import")]
    assert not bad, (f"function-local imports by reason: {dict(sorted(counts.items()))}\n"
                     "imports inside a function that no rule explains:\n" + "\n".join(bad)
                     + "\nHINT: import it at the top of the file. It stays inside only for a "
                       "lazy framework (LAZY in tests/unit/test_architecture.py), to keep a "
                       "module out of a start-up that loads this one (START_UPS: `hpctrain "
                       "--help`, the batch step, a rank, `import hpctrain`) and would not "
                       "load it otherwise, under `if TYPE_CHECKING:`, in a `try` that "
                       "catches ImportError (an optional dependency), or to avoid a real "
                       "import-time cycle: then add (file, module, the chain) to CYCLES")


#: the most function-local imports of hpctrain's own modules (issue 41: 190 before the
#: package face became lazy); a new one needs a reason above, and this cap keeps them rare
MAX_LOCAL_HPCTRAIN_IMPORTS = 80


def test_function_local_imports_of_hpctrain_modules_stay_few():
    own = [(path, line, module) for reason, path, line, module in function_local_imports()
           if module == PACKAGE or module.startswith(PACKAGE + ".")]
    assert len(own) <= MAX_LOCAL_HPCTRAIN_IMPORTS, "\n".join(
        f"  {path}:{line}: {module}" for path, line, module in own)


def _loaded(code: str):
    p = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join("
                        "sorted(m for m in sys.modules if m.split('.')[0] == 'hpctrain')))"],
                       capture_output=True, text=True, cwd=REPO, timeout=120, check=True)
    return p.stdout.split()


def test_import_hpctrain_loads_only_what_report_needs_and_the_rest_on_first_use():
    """``import hpctrain`` (every rank, the batch step) loads report()'s few modules; a
    public name loads its own module on first use, and the names are the same objects
    as before (PEP 562 lazy attributes)."""
    face = _loaded("import hpctrain")
    assert len(face) <= 15, face
    assert "hpctrain.run" not in face and "hpctrain.config" not in face
    configs = _loaded("from hpctrain import ScalingConfig, Checkpoint")
    assert "hpctrain.config" in configs and "hpctrain.checkpoint" in configs
    assert not {"hpctrain.run", "hpctrain.trainer", "hpctrain.schedulers"} & set(configs)
    import hpctrain
    from hpctrain.config import ScalingConfig
    from hpctrain.run import Run
    assert hpctrain.ScalingConfig is ScalingConfig and hpctrain.Run is Run
    assert set(hpctrain.__all__) <= set(dir(hpctrain))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        hpctrain.NoSuchName  # noqa: B018


def test_the_layer_and_local_import_checks_can_fail(tmp_path):
    """An arrow up the layers is named with its layers; an unexplained local import and a
    re-import are found, a lazy one is not."""
    class Graph:
        modules = {"hpctrain.spec", "hpctrain.run"}

        def find_modules_directly_imported_by(self, m):
            return {"hpctrain.run"} if m == "hpctrain.spec" else set()

        def find_children(self, m):
            return set()
    assert layer_problems(Graph(), {"hpctrain.spec": 4, "hpctrain.run": 6}) == [
        "hpctrain.spec imports hpctrain.run: layer 4 → layer 6"]
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import json\n\ndef f():\n    import json\n    import torch\n"
                              "    from hpctrain import b\n")
    found = function_local_imports(str(pkg))
    assert [(r, line, m) for r, _, line, m in found] == [
        ("re-import", 4, "json"), ("lazy", 5, "torch"), (None, 6, "hpctrain")]


if __name__ == "__main__":  # python3 tests/unit/test_architecture.py [--up]: the layered graph
    sys.path.insert(0, os.path.dirname(ROOT))
    g = grimp.build_graph(PACKAGE, include_external_packages=False, cache_dir=None)
    layers, edges = read_layers(), arrows(g)
    for node in sorted(layers, key=lambda n: (layers[n], n)):
        out = sorted({b for a, b in edges if a == node})
        up = [b for b in out if layers.get(b, 0) > layers[node]]
        if "--up" not in sys.argv:
            print(f"{layers[node]} {node} → " + ", ".join(
                f"{b} ({layers.get(b, '?')})" for b in out))
        for b in up:
            print(f"UP: {edges[(node, b)]}: layer {layers[node]} → layer {layers[b]}")
    print("\n".join(layer_problems(g, layers)) or "every arrow points down or sideways")


#: no function of hpctrain is longer (issue 41: 14 were, the rank's report() at 159
#: lines and the supervisor's attempt at 172 among them)
MAX_FUNCTION_LINES = 80


def _functions():
    for path in sorted(glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True)):
        with open(path) as f:
            tree = ast.parse(f.read())
        rel = os.path.relpath(path, ROOT)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield rel, node


def test_no_function_is_longer_than_80_lines():
    too_long = [f"  {rel}:{node.lineno}: {node.name}() is {n} lines"
                for rel, node in _functions() if not isinstance(node, ast.ClassDef)
                for n in [node.end_lineno - node.lineno + 1] if n > MAX_FUNCTION_LINES]
    assert not too_long, ("functions over %d lines:\n" % MAX_FUNCTION_LINES
                          + "\n".join(too_long) + "\nHINT: split it into named steps")


def test_the_run_time_core_stays_small():
    """The rank's Session and the supervisor (issue 41): the session owns helpers (the
    agreement's Rounds, the commit pipeline, the data epochs), the supervisor takes one
    AttemptPlan."""
    sizes = {(rel, node.name): node for rel, node in _functions()}
    session = sizes["worker/session.py", "Session"]
    assert session.end_lineno - session.lineno + 1 <= 350
    init = next(n for n in sizes["allocation/supervisor.py", "Supervisor"].body
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    params = init.args.args + init.args.kwonlyargs
    assert len(params) - 1 <= 8, [a.arg for a in params]
