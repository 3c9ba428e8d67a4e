"""A griffe extension for the API reference: hpctrain's docstrings are written in
reStructuredText habits (``code``, :class:`Name`, doctest examples), which Markdown would
misread (``>>>`` is a nested quote, ``[[0, 1]]`` a link). Each docstring is turned into
Markdown before mkdocstrings renders it: double backticks become single ones, roles become
inline code, and each doctest paragraph becomes a fenced ``pycon`` block. Loaded by
mkdocs.yml (``extensions: [docs/griffe_rst.py:RstToMarkdown]``)."""
from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`~?([^`]+)`")
_DOUBLE = re.compile(r"``(.+?)``", re.S)


def _fence_doctests(text: str) -> str:
    out, block = [], []
    lines = text.split("\n")
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            out += [indent + "```pycon"] + [indent + b for b in block] + [indent + "```"]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    text = _fence_doctests(text)
    parts = re.split(r"(```.*?```)", text, flags=re.S)  # leave fenced code alone
    for k in range(0, len(parts), 2):
        p = _ROLE.sub(lambda m: "`" + m.group(1).split(".")[-1] + "`"
                      if m.group(0).startswith((":class:`~", ":func:`~", ":meth:`~", ":attr:`~"))
                      else "`" + m.group(1) + "`", parts[k])
        p = _DOUBLE.sub(lambda m: "`" + m.group(1) + "`", p)
        # a reST literal block marker ("text::") ends in a colon in Markdown
        p = re.sub(r"::\n", ":\n", p)
        parts[k] = p
    return "".join(parts)


class RstToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
