"""The documentation is tested like code.

- Every fenced ``python`` block of ``docs/**/*.md`` and ``README.md`` runs: a page's blocks
  in order, in one fresh Python process, in a temporary directory (its own storage path and
  user config), sharing their names as the cells of a notebook would. A block that cannot
  run here (it needs a GPU or a real cluster) is preceded by ``<!-- test: skip REASON -->``
  and is compiled instead; no block, run or not, may hold a ``...`` placeholder.
- A ``bash`` block preceded by ``<!-- test: run -->`` runs too (``bash -euo pipefail``, in
  the same directory, after the blocks above it); other shell blocks (installs, cluster
  submissions) are not run.
- A block preceded by ``<!-- test: file NAME -->`` is written to ``NAME`` in that directory
  (a job file or a training script the page then runs); every ``toml`` block is parsed.
- A block that includes a file (``--8<-- "examples/x.py"``, pymdownx.snippets) shows a
  complete example: the file must exist and a test of the suite must run it.
- ``mkdocs build --strict`` passes (warnings are errors: broken internal links and anchors,
  pages left out of the nav, API names that do not resolve).
- The API reference documents every name of every public module's ``__all__``; the CLI
  page names every subcommand of ``hpctrain --help``; each of Ray Train's user guides has
  its hpctrain page in ``docs/ray-guides.md``.
"""
from __future__ import annotations

import ast
import glob
import html
import importlib
import os
import re
import shutil
import subprocess
import sys

import pytest
from docs_snippets import (DOCS, PAGES, RUN_PAGES, blocks, fresh_venv_pages, page_install,
                           run_blocks)
from docs_snippets import includes as _includes
from docs_snippets import runnable as _runnable
from helpers import ROOT

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib


def _has_ellipsis(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree))


def _where(b) -> str:
    return f"{b['page']}:{b['line']}"


@pytest.mark.parametrize("page", PAGES)
def test_snippets_are_well_formed(page):
    """Cheap checks of every block: Python compiles and holds no ``...`` placeholder,
    TOML parses, included files exist and are run by the suite, markers are known."""
    check_well_formed(page)


def check_well_formed(page):
    tests_text = "\n".join(open(p, encoding="utf-8").read()
                           for p in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"),
                                     recursive=True)
                           if not p.endswith("test_docs.py"))
    for b in blocks(page):
        includes = _includes(b)
        if includes:
            for inc in includes:
                assert os.path.isfile(os.path.join(ROOT, inc)), f"{_where(b)}: {inc} not found"
                assert os.path.basename(inc) in tests_text, (
                    f"{_where(b)}: {inc} is shown as a complete example but no test runs it")
            continue
        if b["lang"] in ("python", "py"):
            try:
                tree = ast.parse(b["code"], filename=_where(b))
            except SyntaxError as e:
                pytest.fail(f"{_where(b)}: does not compile: {e}")
            assert not _has_ellipsis(tree), (
                f"{_where(b)}: a `...` placeholder in a Python snippet; write code that runs")
        elif b["lang"] == "toml" and b["mark"] != "skip":
            try:
                tomllib.loads(b["code"])
            except tomllib.TOMLDecodeError as e:
                pytest.fail(f"{_where(b)}: TOML does not parse: {e}")
        if b["mark"] == "skip":
            assert b["arg"], f"{_where(b)}: `<!-- test: skip -->` needs a reason"
        if b["mark"] == "run":
            assert b["lang"] in ("bash", "sh", "console"), f"{_where(b)}: `run` marks shell blocks"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in RUN_PAGES if p not in fresh_venv_pages()])
def test_snippets_run(page, tmp_path):
    """The page's snippets, run as a reader would: in order, in a fresh process. (The pages
    whose install is plain hpctrain or hpctrain[torch] run in a fresh venv with only that
    install instead: tests/local/test_docs_fresh_venv.py.)"""
    p = run_snippets(_runnable(page), tmp_path)
    assert p.returncode == 0, (f"a snippet of {page} failed (exit {p.returncode}); the last "
                               f"'== page:line' names it:\n{p.stdout[-6000:]}\n{p.stderr[-6000:]}")


def run_snippets(runnable, tmp_path):
    work = tmp_path / "work"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HPCTRAIN_STORAGE_PATH=str(work / "runs"),  # "runs" in the snippets
               XDG_CONFIG_HOME=str(tmp_path / "xdg"), OMP_NUM_THREADS="1",
               HPCTRAIN_DOCS_TEST="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("HPCTRAIN_SITE", None)
    return run_blocks(runnable, str(work), env)


BROKEN_PAGE = "docs/getting-started/local.md"


def _broken_copy(tmp_path, edit):
    """A copy of a real page whose first Python block is changed by ``edit`` (a reader's
    typo, a placeholder), and that block's line in the copy."""
    first = next(b for b in blocks(BROKEN_PAGE) if b["lang"] in ("python", "py")
                 and not _includes(b))
    text = open(os.path.join(ROOT, BROKEN_PAGE), encoding="utf-8").read()
    broken = edit(first["code"])
    assert broken != first["code"]
    page = tmp_path / "broken.md"
    page.write_text(text.replace(first["code"], broken, 1), encoding="utf-8")
    return str(page), first["line"]


def test_a_broken_snippet_fails_its_page_and_is_named(tmp_path):
    """What the two tests above catch, shown on a real page broken on purpose: a snippet
    that raises fails the run and the runner names its line; a `...` placeholder fails
    the cheap check."""
    page, line = _broken_copy(tmp_path, lambda code: code.replace("report(", "reprot(", 1)
                              if "report(" in code else code + "undefined_name_here\n")
    p = run_snippets(_runnable(page), tmp_path)
    assert p.returncode != 0
    assert [x for x in p.stdout.split("\n") if x.startswith("== ")][-1] == f"== {page}:{line}"
    assert "reprot" in p.stdout + p.stderr or "undefined_name_here" in p.stderr
    page, _ = _broken_copy(tmp_path, lambda code: code + "loss = ...\n")
    with pytest.raises(AssertionError, match="a `...` placeholder in a Python snippet"):
        check_well_formed(page)


def test_readme_is_a_first_screen():
    """The README is short and points into the docs, and says how to build them."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(text.split("\n")) <= 120
    assert "mkdocs build --strict" in text
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert os.path.isfile(os.path.join(ROOT, target)), f"README links to missing {target}"


PUBLIC_MODULES = ["hpctrain", "hpctrain.torch", "hpctrain.lightning",
                  "hpctrain.huggingface.transformers", "hpctrain.tensorflow",
                  "hpctrain.tensorflow.keras", "hpctrain.horovod", "hpctrain.mpi",
                  "hpctrain.xgboost", "hpctrain.lightgbm", "hpctrain.data",
                  "hpctrain.callbacks", "hpctrain.tune", "hpctrain.job"]
# constants documented in their module's prose rather than as entries of their own
NOT_ENTRIES = {"__version__", "CREDENTIAL_RE", "REMAINDERS", "MODEL_FILE", "STATE_FILE"}


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_api_reference_covers_every_public_name(module):
    names = importlib.import_module(module).__all__
    text = "\n".join(open(p, encoding="utf-8").read()
                     for p in glob.glob(os.path.join(DOCS, "reference", "*.md")))
    entries = set(re.findall(r"^::: ([\w.]+)", text, re.M))
    # a lazily created class is documented where it is defined (x._callback.Name, x._Name)
    documented = {e.split(".")[-1].lstrip("_") for e in entries if e.startswith(module + ".")}
    missing = [n for n in names if n not in NOT_ENTRIES and n not in documented]
    assert not missing, f"docs/reference/ has no `::: {module}.<name>` for {missing}"


def test_cli_page_names_every_subcommand():
    p = subprocess.run([sys.executable, "-m", "hpctrain", "--help"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    commands = re.search(r"\{([\w,]+)\}", p.stdout)
    names = commands.group(1).split(",") if commands else \
        re.findall(r"^    (\w+)\s{2,}", p.stdout, re.M)
    assert len(names) >= 10, p.stdout
    page = open(os.path.join(DOCS, "cli.md"), encoding="utf-8").read()
    missing = [n for n in names if f"## `hpctrain {n}" not in page]
    assert not missing, f"docs/cli.md has no section `## hpctrain NAME` for {missing}"


# Ray Train's user guides (docs.ray.io, train/user-guides) and its framework guides
RAY_GUIDES = ["Data loading and preprocessing", "Configuring scale and GPUs", "Local mode",
              "Configuring persistent storage", "Monitoring and logging metrics",
              "Saving and loading checkpoints", "Validating checkpoints asynchronously",
              "Elastic training",
              "Experiment tracking", "Inspecting training results",
              "Handling failures and node preemption", "Reproducibility",
              "Hyperparameter optimization", "Get started with PyTorch",
              "Get started with PyTorch Lightning", "Get started with Hugging Face Transformers",
              "Get started with Hugging Face Accelerate", "Get started with DeepSpeed",
              "Get started with TensorFlow and Keras", "Get started with Horovod",
              "Get started with XGBoost", "Get started with LightGBM"]


def test_every_ray_guide_has_its_page():
    text = open(os.path.join(DOCS, "ray-guides.md"), encoding="utf-8").read()
    for guide in RAY_GUIDES:
        row = [line for line in text.split("\n") if line.startswith("|") and guide in line]
        assert row, f"docs/ray-guides.md has no row for Ray's guide {guide!r}"
        assert re.search(r"\]\([\w/.-]+\.md(#[\w-]+)?\)", row[0]), \
            f"the row of {guide!r} links to no hpctrain page"


# The Ray names hpctrain has: every one is in the porting table (with what differs)
RAY_NAME_MODULES = ["hpctrain.train", "hpctrain.tune", "hpctrain.train.torch",
                    "hpctrain.train.tensorflow", "hpctrain.train.horovod",
                    "hpctrain.train.lightning", "hpctrain.train.xgboost",
                    "hpctrain.train.lightgbm", "hpctrain.train.huggingface.transformers",
                    "hpctrain.train.callbacks"]


@pytest.mark.parametrize("module", RAY_NAME_MODULES)
def test_the_porting_table_names_every_ray_name(module):
    text = open(os.path.join(DOCS, "porting.md"), encoding="utf-8").read()
    names = importlib.import_module(module).__all__
    text = re.sub(r"```.*?```", " ", text, flags=re.S)  # fenced blocks out: spans pair up
    code = " ".join(re.findall(r"`([^`]+)`", text))      # the names in code spans
    missing = [n for n in names if not re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", code)]
    assert not missing, f"docs/porting.md does not name {missing} (from {module}.__all__)"


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict``: what CI runs, warnings as errors."""
    if shutil.which("mkdocs") is None:
        try:
            importlib.import_module("mkdocs")
            importlib.import_module("mkdocstrings")
        except ImportError:
            pytest.skip(reason="mkdocs is not installed (pip install -e '.[docs]')")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                       text=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), timeout=280)
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "hpctrain" / "index.html").is_file()
    for module, cls in TRAINERS:
        page = tmp_path / "site" / "reference" / module.split(".")[-1] / "index.html"
        _check_trainer_page(page.read_text(encoding="utf-8"), module, cls)


# every public trainer: its reference page shows its full signature and its methods
TRAINERS = [("hpctrain.torch", "TorchTrainer"), ("hpctrain.tensorflow", "TensorflowTrainer"),
            ("hpctrain.horovod", "HorovodTrainer"), ("hpctrain.mpi", "MPITrainer"),
            ("hpctrain.xgboost", "XGBoostTrainer"), ("hpctrain.lightgbm", "LightGBMTrainer")]
RAY_TRAINER_KEYWORDS = ["train_loop_per_worker", "train_loop_config", "scaling_config",
                        "run_config", "datasets", "dataset_config", "resume_from_checkpoint",
                        "metadata", "scheduler", "site"]
TRAINER_METHODS = ["fit", "submit", "restore", "can_restore"]


def _check_trainer_page(html_text, module, cls):
    """The built page of ``module`` shows ``cls(...)`` with every one of Ray's keywords,
    typed, no ``**kwargs`` standing for them, and an entry for each of its methods."""
    text = html.unescape(re.sub(r"<[^>]+>", "", html_text))
    m = re.search(rf"\b{cls}\((.*?)\)\s*\n", text, re.S)
    assert m, f"the reference page of {module} shows no signature of {cls}"
    signature = " ".join(m.group(1).split())
    config = f"{cls[:-len('Trainer')].lower()}_config"
    missing = [k for k in RAY_TRAINER_KEYWORDS + [config] if not re.search(rf"\b{k}: \w", signature)]
    assert not missing, f"{cls}'s signature on its reference page lacks {missing}: {signature}"
    assert "**kwargs" not in signature, signature
    methods = [n for n in TRAINER_METHODS if f'id="{module}.{cls}.{n}"' not in html_text]
    assert not methods, f"the reference page of {module} has no entry for {cls}.{methods}"


def test_the_trainer_page_check_fails_on_a_kwargs_signature():
    """What the built-site check reads: a page with ``**kwargs`` for the configs fails it."""
    page = ('<code>TorchTrainer(train_loop_per_worker, *, train_loop_config: Optional[Dict] '
            '= None, torch_config: Optional[TorchConfig] = None, **kwargs)</code>\n'
            + "".join(f'<h3 id="hpctrain.torch.TorchTrainer.{n}"></h3>' for n in TRAINER_METHODS))
    with pytest.raises(AssertionError, match="lacks .*scaling_config"):
        _check_trainer_page(page, "hpctrain.torch", "TorchTrainer")


@pytest.mark.parametrize("text, install", [
    ("```bash\npip install -e '.[torch]'   # a checkout\npip install -e '.[torch,data]'\n```",
     "hpctrain[torch]"),                                     # the first one the page shows
    ("Needs `pip install '.[tracking]'` (tensorboardX, ...).", "hpctrain[tracking]"),
    ("pip install hpctrain[torch,data]", "hpctrain[data,torch]"),
    ('pip install "hpctrain[ data ]"', "hpctrain[data]"),
    ("pip install -e .\npip install shtab", "hpctrain"),
    ("pip install shtab; pip install dist/hpctrain-0.1.0-py3-none-any.whl", "hpctrain"),
    ("no install shown", "hpctrain"),
    ("<!-- install: hpctrain[torch] -->\nNeeds `pip install '.[plot]'` for one command",
     "hpctrain[torch]"),                                     # the marker wins
    ("<!-- install: hpctrain -->", "hpctrain"),
])
def test_page_install_is_the_install_the_page_names(text, install):
    assert page_install(text) == install


def test_a_bad_install_marker_names_the_page_and_what_is_expected():
    with pytest.raises(ValueError, match=r"docs/x.md: `<!-- install: torch -->`: expected "
                                         r"hpctrain or hpctrain\[extra,...\]"):
        page_install("<!-- install: torch -->", "docs/x.md")
