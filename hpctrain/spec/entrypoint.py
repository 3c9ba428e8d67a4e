"""The training function of a job: :class:`EntryPoint` (``"pkg.mod:func"`` or
``"path/to/file.py:func"``), checked without running the user's code, then resolved."""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import ConfigError
from ..common.tomlfile import did_you_mean as _did_you_mean
from ..common.tomlfile import kind_name as _kind
from ..common.tomlfile import show_value as _show

_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass
class EntryPoint:
    """The training function: ``"pkg.mod:func"`` or ``"path/to/file.py:func"``.

    Exactly one of ``module`` and ``path`` is set; ``path`` is absolute.
    """

    module: Optional[str]
    path: Optional[str]
    function: str
    key: str = field(default="job.entrypoint", compare=False, repr=False)
    file: Optional[str] = field(default=None, compare=False, repr=False)
    base_dir: Optional[str] = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, *, base_dir: str, key: str = "job.entrypoint",
              file: Optional[str] = None) -> "EntryPoint":
        """Parse ``"X:Y"``. ``X`` ending in ``.py`` (or holding a ``/``) is a file, resolved
        against ``base_dir`` and required to exist; otherwise it is a dotted module name."""
        usage = 'expected "module:function" or "file.py:function"'
        if not isinstance(text, str):
            raise ConfigError(f"{key}: {usage}, got {_show(text)} ({_kind(text)})", file=file)
        target, sep, function = text.strip().rpartition(":")
        if not sep or not target:
            raise ConfigError(f"{key}: {usage}, got {_show(text)}", file=file,
                              hint='name the function to call, e.g. "train.py:train_func"')
        if not function.isidentifier() or keyword.iskeyword(function):
            raise ConfigError(f'{key}: expected a Python function name after ":", got '
                              f"{_show(function)} (in {_show(text)})", file=file)
        if target.endswith(".py") or "/" in target or os.sep in target:
            if not target.endswith(".py"):
                raise ConfigError(f"{key}: expected a .py file before \":\", got {_show(target)}",
                                  file=file)
            path = os.path.abspath(os.path.join(base_dir, os.path.expanduser(target)))
            if not os.path.isfile(path):
                raise ConfigError(f"{key}: file not found: {path} (from {_show(text)})",
                                  file=file,
                                  hint="relative paths are resolved against the job file's "
                                       "directory")
            return cls(None, path, function, key=key, file=file, base_dir=base_dir)
        if not _MODULE_RE.match(target):
            raise ConfigError(f'{key}: expected a dotted module name (like "mypkg.train") '
                              f'or a .py file before ":", got {_show(target)}', file=file)
        return cls(target, None, function, key=key, file=file,
                   base_dir=os.path.abspath(base_dir))

    def __str__(self) -> str:
        return f"{self.module if self.path is None else self.path}:{self.function}"

    def _error(self, message: str, hint: Optional[str] = None) -> ConfigError:
        return ConfigError(f"{self.key}: {message}", file=self.file, hint=hint)

    def _import_module(self) -> Any:
        assert self.module is not None
        try:
            return importlib.import_module(self.module)
        except ModuleNotFoundError as e:
            ours = e.name is not None and (self.module == e.name
                                           or self.module.startswith(e.name + "."))
            if not ours:
                raise  # the module itself imports something missing: the user's traceback
            # Console scripts do not put the working directory on sys.path; try the job
            # file's directory before giving up.
            if self.base_dir and self.base_dir not in sys.path:
                sys.path.insert(0, self.base_dir)
                importlib.invalidate_caches()
                return self._import_module()
            raise self._error(f"cannot import module {self.module!r}: {e}",
                              "is the package installed, or on PYTHONPATH?") from e

    def _load_file(self) -> Any:
        assert self.path is not None
        if not os.path.isfile(self.path):
            raise self._error(f"file not found: {self.path}")
        digest = hashlib.sha1(self.path.encode()).hexdigest()[:12]
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(self.path))[0])
        name = f"_hpctrain_entry_{stem}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        directory = os.path.dirname(self.path)
        if directory not in sys.path:
            sys.path.insert(0, directory)  # so that sibling imports work
        spec = importlib.util.spec_from_file_location(name, self.path)
        if spec is None or spec.loader is None:
            raise self._error(f"cannot load {self.path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module

    def check(self) -> None:
        """Check, without running any of the user's code, that the function exists:
        parse the file (or the module's source) and look for a top-level definition of
        that name. Lets ``hpctrain run``/``validate`` refuse a bad entry point before
        anything starts, without importing torch in the driver."""
        if self.path is not None:
            source_file = self.path
        else:
            try:
                found = importlib.util.find_spec(self.module)
            except (ImportError, ValueError):
                found = None
            if found is None and self.base_dir:
                if self.base_dir not in sys.path:
                    sys.path.insert(0, self.base_dir)
                importlib.invalidate_caches()
                try:
                    found = importlib.util.find_spec(self.module)
                except (ImportError, ValueError):
                    found = None
            if found is None:
                raise self._error(f"cannot find module {self.module!r}",
                                  "is the package installed, or on PYTHONPATH?")
            source_file = found.origin
            if not source_file or not source_file.endswith(".py"):
                return  # compiled or namespace module: resolve() will tell
        try:
            with open(source_file, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=source_file)
        except SyntaxError as e:
            raise self._error(f"{source_file} does not parse: {e.msg} (line {e.lineno})") from None
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif not isinstance(node, (ast.Expr, ast.Pass)):
                return  # conditional definitions etc.: leave it to resolve()
        if self.function not in names:
            where = self.path if self.path is not None else self.module
            raise self._error(f"{where} defines no function {self.function!r}",
                              _did_you_mean(self.function, sorted(names)))

    def resolve(self) -> Callable[..., Any]:
        """Import the module (or load the file) and return the function."""
        module = self._load_file() if self.path is not None else self._import_module()
        where = self.path if self.path is not None else self.module
        try:
            obj = getattr(module, self.function)
        except AttributeError:
            names = [n for n in dir(module)
                     if not n.startswith("_") and callable(getattr(module, n, None))]
            raise self._error(f"{where} has no function {self.function!r}",
                              _did_you_mean(self.function, names)) from None
        if not callable(obj):
            raise self._error(f"{self} is not callable (found {_show(obj)}, "
                              f"{type(obj).__name__})")
        return obj


