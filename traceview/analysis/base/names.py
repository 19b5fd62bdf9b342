"""Kernel names made short enough to read: for titles, warnings and table cells."""

from __future__ import annotations

import re

_ANONYMOUS = "(anonymous namespace)::"
_MANGLED_PART = re.compile(r"(\d+)([A-Za-z_]\w*)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _demangled_head(name: str) -> str:
    """A mangled (Itanium) name's qualified identifier and its first long template argument
    name: ``_ZN7ck_tile6kentryI…38FmhaBatchPrefill…Kernel…`` → ``ck_tile::kentry<FmhaBatch…>``."""
    parts: list[str] = []
    i = 3 if name.startswith("_ZN") else 2
    while (m := _MANGLED_PART.match(name, i)) and len(m.group(2)) >= int(m.group(1)):
        parts.append(m.group(2)[: int(m.group(1))])
        i = m.start(2) + int(m.group(1))
    head = "::".join(parts) or name
    inner = [
        part
        for m in re.finditer(r"(?<!\d)\d+", name[i:])
        if int(m.group()) > 8
        and _IDENTIFIER.fullmatch(part := name[i + m.end() : i + m.end() + int(m.group())])
    ]
    return f"{head}<{inner[0]}…>" if inner else head


def short_name(name: str, width: int = 60) -> str:
    """A kernel name short enough for a title, a warning or a table cell: the return type,
    template arguments and parameters of a C++ name cut (``void flash::fwd<128, …>(…)`` →
    ``flash::fwd<…>``), a mangled name read for its identifiers, and what is still longer
    than ``width`` cut with ``…``."""
    text = name.strip()
    if text.startswith("_Z"):
        text = _demangled_head(text)
    else:
        text = text.replace(_ANONYMOUS, "")
        if text.startswith("void "):
            text = text[5:]
        cut = min((i for i in (text.find("<"), text.find("(")) if i > 0), default=-1)
        if cut > 0:
            text = text[:cut] + ("<…>" if text[cut] == "<" else "")
    return text if len(text) <= width else text[: width - 1] + "…"
