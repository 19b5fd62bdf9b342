"""Which paths name a figure of the summary (or run) document, decided from the document's
schema (the ``TypedDict``s of :mod:`traceview.analysis.base.document`), never from one
trace's document: a path is a figure of every trace's summary or of none.

A path is what ``check`` takes (docs/cli.md): dotted keys; in a list, an item's index or
the name that identifies it (a phase's ``kind``, a gap population, a ``family``, a rank);
a section whose list is named by kind or family may skip the list's name
(``efficiency.decode.mbu_p50`` is ``efficiency.phases.decode.mbu_p50``). Kinds, gap
populations, idle causes and ranks are closed sets (a typo is no figure); family names,
step-kind sources and dtypes are open (any name may be a family under a rules file), so a
family a trace lacks is a figure that trace does not have.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Iterator
from typing import Literal, get_args, get_origin, get_type_hints, is_typeddict

from traceview._deprecated import deprecated
from traceview.analysis.base.document import (
    DEPRECATED_KEYS,
    KINDS,
    EfficiencyFamily,
    EfficiencyPhase,
    FamilyRow,
    GapStats,
    Phase,
    PhaseWork,
    RankRow,
    RunDocument,
    SummaryDocument,
    TimeBreakdown,
)
from traceview.analysis.timing.idle import CAUSES
from traceview.errors import CheckError

Name = Callable[[str], bool]


def _one_of(names: tuple[str, ...]) -> Name:
    return frozenset(names).__contains__


def _any_name(name: str) -> bool:
    return bool(name)


def _a_rank(name: str) -> bool:
    return name.isdigit()


_POPULATIONS: tuple[str, ...] = get_args(get_type_hints(GapStats)["population"])

# the field that names a list's items, and the names it may take
_IDENTITY: dict[object, tuple[str, Name]] = {
    Phase: ("kind", _one_of(KINDS)),
    PhaseWork: ("kind", _one_of(KINDS)),
    TimeBreakdown: ("kind", _one_of(KINDS)),
    EfficiencyPhase: ("kind", _one_of(KINDS)),
    GapStats: ("population", _one_of(_POPULATIONS)),
    FamilyRow: ("family", _any_name),
    EfficiencyFamily: ("family", _any_name),
    RankRow: ("rank", _a_rank),
}

# the keys a ``dict[str, ...]`` field may hold, by the field's name; any other is open
_KEYS: dict[str, Name] = {
    "cadence_by_kind": _one_of(KINDS),
    "cadence_by_phase": _one_of(KINDS),  # deprecated: cadence_by_kind
    "idle_ns": _one_of(CAUSES),
}

Found = tuple[list[str], object]  # the path's parts as the document spells them, leaf type


@functools.cache
def _fields(typed: type) -> dict[str, object]:
    return get_type_hints(typed)


def _bare(hint: object) -> object:
    """``X | None`` -> ``X`` (``int | float | None`` -> ``int | float``)."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = tuple(a for a in get_args(hint) if a is not type(None))
        if len(args) == 1:
            return args[0]
        return typing.Union[args]  # noqa: UP007 (a tuple of types, built at run time)
    return hint


def _walk(
    hint: object, parts: list[str], i: int, renamed: set[tuple[str, str]], name: str = ""
) -> Iterator[Found]:
    """Every reading of ``parts[i:]`` under ``hint``, the longest names first (as
    :func:`~traceview.analysis.documents.checks.lookup` tries them). A deprecated key
    (:data:`~traceview.analysis.base.document.DEPRECATED_KEYS`) reads as its new name, and
    ``renamed`` gets the pair."""
    hint = _bare(hint)
    if i == len(parts):
        yield [], hint
        return
    part = parts[i]
    origin = get_origin(hint)
    if isinstance(hint, type) and is_typeddict(hint):
        fields = _fields(hint)
        new = DEPRECATED_KEYS.get(hint, {}).get(part)
        if new is not None:
            renamed.add((part, new))
            part = new
        if part in fields:
            for found, leaf in _walk(fields[part], parts, i + 1, renamed, part):
                yield [part, *found], leaf
            return
        for field, child in fields.items():  # a list's name skipped: its items by name
            child = _bare(child)
            if get_origin(child) is list:
                for found, leaf in _items(get_args(child)[0], parts, i, renamed):
                    if not _is_section(leaf):  # past the item: a name alone is no figure
                        yield [field, *found], leaf
    elif origin is list:
        item = get_args(hint)[0]
        if part.isdigit():  # by index (or a run's rank)
            for found, leaf in _walk(item, parts, i + 1, renamed):
                yield [part, *found], leaf
        else:
            yield from _items(item, parts, i, renamed)
    elif origin is dict:
        allowed = _KEYS.get(name, _any_name)
        for k in range(len(parts) - i, 0, -1):  # a key may hold dots (a family's name)
            key = ".".join(parts[i : i + k])
            if allowed(key):
                for found, leaf in _walk(get_args(hint)[1], parts, i + k, renamed):
                    yield [key, *found], leaf


def _items(
    item: object, parts: list[str], i: int, renamed: set[tuple[str, str]]
) -> Iterator[Found]:
    """The items of a list selected by the name that identifies them (which may hold dots:
    a family's name)."""
    if item not in _IDENTITY:
        return
    allowed = _IDENTITY[item][1]
    for k in range(len(parts) - i, 0, -1):
        ident = ".".join(parts[i : i + k])
        if allowed(ident):
            for found, leaf in _walk(item, parts, i + k, renamed):
                yield [ident, *found], leaf


def _is_number(hint: object) -> bool:
    if get_origin(hint) in (typing.Union, types.UnionType):
        return all(_is_number(a) for a in get_args(hint))
    return hint in (int, float)


def _is_section(hint: object) -> bool:
    return isinstance(hint, type) and is_typeddict(hint) or get_origin(hint) in (list, dict)


def figure_path(path: str, *, run: bool = False, stacklevel: int = 2) -> str:
    """The path of the figure ``path`` names in every summary (``run``: every run
    document), with a skipped list's name put back (``efficiency.decode.mbu_p50`` ->
    ``efficiency.phases.decode.mbu_p50``) and a deprecated key's new name in its place
    (which warns: a ``DeprecationWarning`` for the caller ``stacklevel`` frames up); a
    given trace may still lack it (a phase kind it never ran, a family it has no kernel
    of, efficiency without ``--model``).

    Raises:
        CheckError: a path that is no figure of the schema (a typo), that names a section,
            or text.
    """
    root = RunDocument if run else SummaryDocument
    renamed: set[tuple[str, str]] = set()
    readings = list(_walk(root, path.split("."), 0, renamed)) if path else []
    for old, new in sorted(renamed):
        deprecated(f"{path}: the key {old!r}", f"{new!r}", stacklevel=stacklevel + 1)
    if not readings:
        what = "run document" if run else "summary"
        raise CheckError(
            f"{path}: not a figure of the {what} (see traceview summarize --json for the paths)"
        )
    for parts, leaf in readings:
        if _is_number(leaf):
            return ".".join(parts)
    fields = [leaf for _, leaf in readings if not _is_section(leaf)]
    if not fields:
        raise CheckError(f"{path}: names a section, not a figure")
    leaf = fields[0]
    text = leaf is str or get_origin(leaf) is Literal
    kind = "a flag" if leaf is bool else "text" if text else "no number"
    raise CheckError(f"{path}: names {kind}, not a number")
