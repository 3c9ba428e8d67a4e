"""``hpctrain completion bash|zsh|tcsh``: the shell's completion script for ``hpctrain``
(its commands, their options, file names where a command takes a file), made by shtab
from the same argparse parser the command line uses. shtab is optional: without it the
command says how to install it."""
from __future__ import annotations

import argparse
import sys

from hpctrain.common.install import pip_install
from hpctrain.errors import HpctrainError

SHELLS = ("bash", "zsh", "tcsh")

#: positional arguments and options that name a file (completed as file names)
_FILES = ("job", "runs", "run", "storage")
_FILE_OPTIONS = ("--output",)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (HpctrainError with a HINT when
    shtab is not installed)."""
    try:
        import shtab
    except ImportError:
        raise HpctrainError("hpctrain completion needs shtab (shell completion scripts "
                            "from argparse).\nHINT: " + pip_install("shtab")) from None
    for action in _actions(parser):
        if action.dest in _FILES and not action.option_strings or any(
                o in _FILE_OPTIONS for o in action.option_strings):
            action.complete = shtab.FILE  # type: ignore[attr-defined]
    return shtab.complete(parser, shell=shell)


def _actions(parser: argparse.ArgumentParser):
    """Every action of ``parser`` and of its subcommands' parsers."""
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # (aliases: once)
                yield from _actions(sub)


def print_script(parser: argparse.ArgumentParser, shell: str) -> int:
    sys.stdout.write(script(parser, shell))
    return 0
