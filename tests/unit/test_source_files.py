"""A function of the user's script, pickled by value, names its file again on the rank
(cloudpickle >= 3.1 writes ``<dynamic-code>``): its traceback shows the script's lines."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import functools, sys, traceback
    import cloudpickle
    from hpctrain.common.source_files import restore_source_files

    def lookup(d):
        return d["b"]

    class Helper:
        @staticmethod
        def go(d):
            return (lambda: lookup(d))()

    def train_func(config):
        Helper.go({"a": 1})

    data = cloudpickle.dumps(functools.partial(train_func, {}))
    loaded = cloudpickle.loads(data)
    if sys.argv[1] == "restore":
        restore_source_files(loaded)
    try:
        loaded()
    except KeyError:
        print(traceback.format_exc())
''')


def run(tmp_path, mode):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    p = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    return str(script), p.stdout


def test_every_frame_of_the_script_names_the_script_and_its_line(tmp_path):
    script, out = run(tmp_path, "restore")
    assert "<dynamic-code>" not in out
    for line, name, text in ((15, "train_func", 'Helper.go({"a": 1})'),
                             (12, "go", "return (lambda: lookup(d))()"),
                             (12, "<lambda>", None), (7, "lookup", 'return d["b"]')):
        assert f'File "{script}", line {line}, in {name}' in out, out
        if text:
            assert text in out


def test_without_it_the_frames_are_nameless_where_cloudpickle_renames(tmp_path):
    import cloudpickle

    _, out = run(tmp_path, "keep")
    major, minor = (int(x) for x in cloudpickle.__version__.split(".")[:2])
    if (major, minor) >= (3, 1):
        assert 'File "<dynamic-code>"' in out
