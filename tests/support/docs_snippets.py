"""The docs pages as tests read them: their fenced blocks, the markers above them, the
blocks a page runs, the install a page names, and the runner that executes a page's blocks
in one fresh process (tests/unit/test_docs.py in the development environment,
tests/local/test_docs_fresh_venv.py in a fresh venv with only the page's install)."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from typing import Dict, List, Optional

from helpers import ROOT

DOCS = os.path.join(ROOT, "docs")
PAGES = sorted([os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(DOCS, "**", "*.md"),
                                                             recursive=True)] + ["README.md"])

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)[^\n]*$")
_MARK = re.compile(r"^\s*<!--\s*test:\s*(?P<what>skip|run|file)\b\s*(?P<arg>.*?)\s*-->\s*$")
_INCLUDE = re.compile(r'^\s*-{1,2}8<-{1,2}\s*"([^"]+)"\s*$')
# `<!-- install: hpctrain[torch] -->`: the install of a page that shows no `pip install`
_INSTALL_MARK = re.compile(r"^\s*<!--\s*install:\s*(?P<what>[^\s>]+)\s*-->\s*$", re.M)
# `pip install -e '.[torch]'`, `pip install '.[a,b]'`, `pip install hpctrain[torch]`, `pip install .`
_PIP_INSTALL = re.compile(
    r"""pip\s+install\s+(?:-e\s+)?(?P<q>['"]?)(?P<what>\.|hpctrain)(?:\[(?P<extras>[\w,\s-]*)\])?(?P=q)(?![\w./-])""")
_INSTALL = re.compile(r"^hpctrain(?:\[(?P<extras>[\w,\s-]*)\])?$")


def page_install(text: str, page: str = "<page>") -> str:
    """The install a page names, normalised to ``hpctrain`` or ``hpctrain[a,b]`` (extras
    sorted): its ``<!-- install: hpctrain[x] -->`` marker if it has one, else the first
    ``pip install`` of hpctrain it shows (``pip install -e '.[torch]'``, ``pip install
    hpctrain[torch]``, in a block or in the prose), else plain ``hpctrain``."""
    marker = _INSTALL_MARK.search(text)
    if marker:
        m = _INSTALL.match(marker.group("what"))
        if m is None:
            raise ValueError(f"{page}: `<!-- install: {marker.group('what')} -->`: expected "
                             f"hpctrain or hpctrain[extra,...]")
        extras = m.group("extras")
    else:
        m = _PIP_INSTALL.search(text)
        extras = m.group("extras") if m else None
    names = sorted({e.strip() for e in (extras or "").split(",") if e.strip()})
    return f"hpctrain[{','.join(names)}]" if names else "hpctrain"


def install_extras(install: str) -> List[str]:
    """``hpctrain[a,b]`` -> ``["a", "b"]``."""
    m = _INSTALL.match(install)
    assert m, install
    return [e for e in (m.group("extras") or "").split(",") if e]


def read_page(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def blocks(page: str) -> List[Dict]:
    """The fenced blocks of ``page``: dicts with lang, code, line (1-based, of the fence),
    mark ('skip' | 'run' | 'file' | None) and arg (the mark's reason or file name)."""
    lines = read_page(page).split("\n")
    out, i, mark = [], 0, (None, "")
    while i < len(lines):
        m = _MARK.match(lines[i])
        if m:
            mark = (m.group("what"), m.group("arg"))
            i += 1
            continue
        f = _FENCE.match(lines[i])
        if f:
            indent, fence, lang = f.group("indent"), f.group("fence"), f.group("lang").lower()
            start, body = i, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            out.append({"lang": lang, "code": "\n".join(body) + "\n", "line": start + 1,
                        "mark": mark[0], "arg": mark[1], "page": page})
            mark = (None, "")
        elif lines[i].strip():
            mark = (None, "")  # a marker applies to the block right below it
        i += 1
    return out


def includes(block) -> List[str]:
    return [m.group(1) for m in map(_INCLUDE.match, block["code"].split("\n")) if m]


def runnable(page: str) -> List[Dict]:
    """The blocks of ``page`` a test runs (kind 'python' | 'bash') or writes ('file')."""
    out = []
    for b in blocks(page):
        if includes(b) or b["mark"] == "skip":
            continue
        if b["mark"] == "file":
            out.append({**b, "kind": "file"})
        elif b["lang"] in ("python", "py"):
            out.append({**b, "kind": "python"})
        elif b["mark"] == "run":
            out.append({**b, "kind": "bash"})
    return out


RUN_PAGES = [p for p in PAGES if any(b["kind"] != "file" for b in runnable(p))]

RUNNER = r'''
import json, os, subprocess, sys
for b in json.load(open(sys.argv[1])):
    where = "%s:%d" % (b["page"], b["line"])
    print("== " + where, flush=True)
    if b["kind"] == "file":
        os.makedirs(os.path.dirname(os.path.abspath(b["arg"])), exist_ok=True)
        with open(b["arg"], "w") as f:
            f.write(b["code"])
    elif b["kind"] == "python":
        exec(compile(b["code"], where, "exec"), globals())
    else:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", b["code"]])
        if r.returncode:
            sys.exit("%s: the shell block exited %d" % (where, r.returncode))
'''


def run_blocks(blocks_: List[Dict], work, env: Dict[str, str], python: str = sys.executable,
               timeout: int = 280) -> subprocess.CompletedProcess:
    """Runs ``blocks_`` in order in one fresh ``python`` process in the new directory
    ``work`` (``examples/`` linked into it); the output names each block (``== page:line``)
    before it runs, so the last such line names the one that failed."""
    os.makedirs(work)
    os.symlink(os.path.join(ROOT, "examples"), os.path.join(work, "examples"))
    with open(os.path.join(work, "blocks.json"), "w") as f:
        json.dump(blocks_, f)
    with open(os.path.join(work, "run_blocks.py"), "w") as f:
        f.write(RUNNER)
    return subprocess.run([python, "run_blocks.py", "blocks.json"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)


def failed_block(stdout: str) -> Optional[str]:
    """The ``page:line`` of the last block the runner started (the failing one)."""
    started = [x[3:] for x in stdout.split("\n") if x.startswith("== ")]
    return started[-1] if started else None


#: The installs tests/local/test_docs_fresh_venv.py makes a fresh venv for; a page with
#: another install runs in the development environment (tests/unit/test_docs.py).
FRESH_INSTALLS = ("hpctrain", "hpctrain[torch]")
#: Pages whose install is one of those but that need what no extra installs.
MAIN_ENV_ONLY = {
    "docs/frameworks/horovod.md": "Horovod is built by scripts/install-horovod.sh, no extra",
}


def fresh_venv_pages() -> List[str]:
    """The pages that run in a fresh venv with their install, not in the development one."""
    return [p for p in RUN_PAGES if p not in MAIN_ENV_ONLY
            and page_install(read_page(p), p) in FRESH_INSTALLS]
