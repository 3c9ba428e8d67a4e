"""A training function's frames name its file again after the trip through the payload.

cloudpickle 3.1 and later write ``<dynamic-code>`` as the file name of every code object it
pickles by value (a function defined in the user's script, ``__main__``), so that a payload is
the same wherever the script lies. A rank's traceback then reads
``File "<dynamic-code>", line 10, in train_func``, with no source line. cloudpickle keeps the
module's ``__file__`` in the globals it rebuilds for such a function, so a rank can give the
name back: :func:`restore_source_files` walks what it is given (a function, the closures and
partials around it, the functions and classes of the script that came with it, their nested
functions and lambdas) and renames every ``<dynamic-code>`` to its module's file. Code that
kept its name (older cloudpickle, a function imported by reference) is left as it is, and so
is a function whose module had no file (a notebook cell, ``python -c``).
"""
from __future__ import annotations

import functools
import types
from typing import Any

#: What cloudpickle >= 3.1 writes as a by-value code object's file name.
DYNAMIC = "<dynamic-code>"


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    if code.co_filename != DYNAMIC and consts == code.co_consts:
        return code
    return code.replace(co_consts=consts, co_filename=filename
                        if code.co_filename == DYNAMIC else code.co_filename)


def restore_source_files(*objs: Any) -> None:
    """Rename ``<dynamic-code>`` back to the module's file in the code reachable from
    *objs* (see the module's docstring)."""
    seen: set = set()
    todo = list(objs)
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            if obj.__code__.co_filename != DYNAMIC:
                continue  # by reference, or named already: nothing of the script's below
            filename = obj.__globals__.get("__file__")
            if isinstance(filename, str) and filename:
                obj.__code__ = _renamed(obj.__code__, filename)
            for cell in obj.__closure__ or ():
                try:
                    todo.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            todo.extend(obj.__globals__.values())  # the script's other functions, classes
            todo.extend(obj.__defaults__ or ())
        elif isinstance(obj, (staticmethod, classmethod)):
            todo.append(obj.__func__)
        elif isinstance(obj, property):
            todo.extend((obj.fget, obj.fset, obj.fdel))
        elif isinstance(obj, functools.partial):
            todo.extend((obj.func, *obj.args, *obj.keywords.values()))
        elif isinstance(obj, type):
            todo.extend(vars(obj).values())
        elif isinstance(obj, types.MethodType):
            todo.append(obj.__func__)
