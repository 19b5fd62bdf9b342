"""docs/metrics.md's figure index stays true: every field of the summary document
(``SummaryDocument``, walked from its ``TypedDict``s) has a row; every row names a field,
links to the entry that defines it, and gives that entry's function and test; every
function named imports, and every test named is a test function of its file.

A path is written as ``check`` reads it (docs/metrics.md, "The figure index"): dotted keys;
``<kind>``, ``<population>`` or ``<family>`` for a list item named by that field;
``<i>`` for a list item by position; ``<kind>``, ``<cause>``, ``<family>``, ``<source>``
or ``<dtype>`` for a key of a map; a list of plain values is one figure.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
import typing
from functools import cache
from typing import get_args, get_origin, get_type_hints, is_typeddict

import pytest
from conftest import ROOT

from traceview.analysis.base.document import DEPRECATED_KEYS, SummaryDocument
from traceview.analysis.documents.fields import _IDENTITY, figure_path

PAGE = ROOT / "docs" / "metrics.md"

# the placeholder standing for a key of each map field, by the field's name
MAP_KEYS = {
    "cadence_by_kind": "<kind>",
    "kind_sources": "<source>",
    "busy_by_family": "<family>",
    "idle_ns": "<cause>",
    "peak_flops": "<dtype>",
}
# what ``check`` reads in place of each placeholder (a name every trace may have)
EXAMPLES = {
    "<kind>": "decode",
    "<population>": "all",
    "<family>": "gemm",
    "<cause>": "host_late",
    "<source>": "annotation",
    "<dtype>": "bf16",
    "<i>": "0",
}


def _bare(hint: object) -> object:
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _leaves(hint: object, path: str, name: str, out: dict[str, object]) -> None:
    hint = _bare(hint)
    if isinstance(hint, type) and is_typeddict(hint):
        renamed = DEPRECATED_KEYS.get(hint, {})
        for field, child in get_type_hints(hint).items():
            if field not in renamed:  # a deprecated key: the table of deprecated keys
                _leaves(child, f"{path}.{field}" if path else field, field, out)
    elif get_origin(hint) is list:
        item = _bare(get_args(hint)[0])
        if isinstance(item, type) and is_typeddict(item):
            key = f"<{_IDENTITY[item][0]}>" if item in _IDENTITY else "<i>"
            _leaves(item, f"{path}.{key}", name, out)
        else:
            out[path] = hint  # a list of plain values is one figure
    elif get_origin(hint) is dict:
        assert name in MAP_KEYS, f"{path}: a map with no placeholder for its keys"
        _leaves(get_args(hint)[1], f"{path}.{MAP_KEYS[name]}", name, out)
    else:
        out[path] = hint


@cache
def summary_fields() -> dict[str, object]:
    """Every leaf field of the summary document, by its path, with its type."""
    out: dict[str, object] = {}
    _leaves(SummaryDocument, "", "", out)
    return out


def expand(heading: str) -> list[str]:
    """``a.{b, c.d}`` -> ``a.b``, ``a.c.d`` (the paths an entry's heading names)."""
    m = re.fullmatch(r"(.*?)\{([^}]*)\}(.*)", heading)
    if not m:
        return [heading]
    head, inner, tail = m.groups()
    return [p for part in inner.split(",") for p in expand(f"{head}{part.strip()}{tail}")]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> list[tuple[str, str]]:
    """Each heading of a page (outside code blocks) with its anchor; a repeated anchor
    gets ``-1``, ``-2``, … as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append((line, base if not n else f"{base}-{n}"))
    return out


class Entry(typing.NamedTuple):
    heading: str
    anchor: str
    paths: list[str]
    text: str
    unit: str
    computed: str
    checked: str


@cache
def entries() -> list[Entry]:
    """Every figure entry of the page: a ``### `path` `` heading, then its definition and
    its Population, Unit, Computed by and Checked by lines."""
    text = PAGE.read_text(encoding="utf-8")
    found = iter(anchors(text))
    out = []
    for block in re.split(r"^(?=#{1,6} )", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        line, anchor = next(found)
        assert line == heading
        m = re.fullmatch(r"### `([^`]+)`", heading.strip())
        if not m:
            continue
        lines = dict(re.findall(r"^- (Population|Unit|Computed by|Checked by):? (.*)$", body, re.M))
        computed = re.fullmatch(r"`([^`]+)`\.?", lines.get("Computed by", "").strip())
        checked = re.fullmatch(r"`([^`]+)`\.?", lines.get("Checked by", "").strip())
        assert computed and checked and "Population" in lines and "Unit" in lines, heading
        out.append(
            Entry(
                heading,
                anchor,
                expand(m.group(1)),
                body.split("\n- ")[0].strip(),
                lines["Unit"].strip(),
                computed.group(1),
                checked.group(1),
            )
        )
    return out


class Row(typing.NamedTuple):
    path: str
    anchor: str
    unit: str
    computed: str
    checked: str


ROW = re.compile(
    r"^\| \[`(?P<path>[^`]+)`\]\(#(?P<anchor>[^)]+)\) \| (?P<unit>[^|]+?) \| "
    r"`(?P<computed>[^`]+)` \| `(?P<checked>[^`]+)` \|$"
)


@cache
def index() -> list[Row]:
    """The rows of the page's figure index."""
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("## The figure index", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        if line.startswith("| [`"):
            m = ROW.match(line)
            assert m, f"an index row not in the index's shape: {line}"
            rows.append(Row(**m.groupdict()))
    return rows


def test_every_field_of_the_summary_has_one_row_and_every_row_a_field() -> None:
    fields = summary_fields()
    paths = [r.path for r in index()]
    assert len(fields) > 150  # the walk reached the whole document
    missing = [p for p in fields if p not in paths]
    assert not missing, "docs/metrics.md's figure index lacks:\n" + "\n".join(missing)
    stray = [p for p in paths if p not in fields]
    assert not stray, "docs/metrics.md's figure index names no field:\n" + "\n".join(stray)
    doubled = sorted({p for p in paths if paths.count(p) > 1})
    assert not doubled, f"rows given twice: {doubled}"
    assert paths == list(fields), "the rows follow the document's order"


def test_every_row_links_to_the_entry_that_defines_it() -> None:
    by_anchor = {e.anchor: e for e in entries()}
    wrong = []
    for r in index():
        e = by_anchor.get(r.anchor)
        if e is None or r.path not in e.paths:
            wrong.append(f"{r.path}: #{r.anchor} is not its entry")
        elif (r.computed, r.checked) != (e.computed, e.checked):
            wrong.append(f"{r.path}: its row and its entry name another function or test")
        elif r.unit not in e.unit:
            wrong.append(f"{r.path}: unit {r.unit!r} is not its entry's ({e.unit!r})")
    assert not wrong, "\n".join(wrong)


def test_every_entry_of_the_summary_names_fields_it_has() -> None:
    """An entry whose path starts with a section of the summary names only fields of it
    (the page's other entries are the run's, the cost command's and the itl documents')."""
    fields = summary_fields()
    sections = set(get_type_hints(SummaryDocument))
    stale = [
        p for e in entries() for p in e.paths if p.split(".")[0] in sections and p not in fields
    ]
    assert not stale, f"entries name no field of the summary: {stale}"


def test_every_path_of_a_number_is_one_check_reads() -> None:
    """With each placeholder given a name (``<kind>`` decode, ``<i>`` 0, …), the path of a
    number is the path ``check`` takes, as it writes it."""
    for path, hint in summary_fields().items():
        if _bare(hint) not in (int, float):
            continue
        given = ".".join(EXAMPLES.get(part, part) for part in path.split("."))
        assert figure_path(given) == given, path


def _function(name: str) -> object:
    module, _, attr = name.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@cache
def _test_functions(file: str) -> set[str]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    return {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
    }


def test_every_function_named_exists() -> None:
    missing = []
    for name in sorted({e.computed for e in entries()}):
        try:
            assert callable(_function(name)) or isinstance(_function(name), property)
        except (ImportError, AttributeError, AssertionError):
            missing.append(name)
    assert not missing, f"docs/metrics.md names functions that do not exist: {missing}"


def test_every_test_named_exists() -> None:
    missing = []
    for name in sorted({e.checked for e in entries()}):
        file, _, test = name.partition("::")
        test = test.split("[")[0]  # a parametrized test's id may be given
        if not (ROOT / file).is_file() or test not in _test_functions(file):
            missing.append(name)
    assert not missing, f"docs/metrics.md names tests that do not exist: {missing}"


def test_every_deprecated_key_is_listed_with_its_new_one() -> None:
    """The summary's renamed keys (DEPRECATED_KEYS) are listed apart from the index, each
    beside the path of its new key, which the index holds."""
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("### Deprecated keys", 1)[1].split("\n#", 1)[0]
    listed = dict(re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", table, re.M))
    fields = summary_fields()
    wanted: dict[str, str] = {}

    def walk(hint: object, path: str) -> None:
        hint = _bare(hint)
        if isinstance(hint, type) and is_typeddict(hint):
            for field, child in get_type_hints(hint).items():
                here = f"{path}.{field}" if path else field
                new = DEPRECATED_KEYS.get(hint, {}).get(field)
                if new is not None:
                    wanted[here] = f"{path}.{new}" if path else new
                else:
                    walk(child, here)
        elif get_origin(hint) is list:
            item = _bare(get_args(hint)[0])
            key = f"<{_IDENTITY[item][0]}>" if item in _IDENTITY else "<i>"
            walk(item, f"{path}.{key}")

    walk(SummaryDocument, "")
    assert wanted and listed == wanted
    for new in wanted.values():
        assert any(p == new or p.startswith(f"{new}.") for p in fields), new


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_links_into_the_metrics_page_find_their_heading(page: str) -> None:
    """Every link to a heading of metrics.md, from any page, finds it; and so does every
    link from metrics.md to a heading of design.md."""
    docs = ROOT / "docs"
    text = (docs / page).read_text(encoding="utf-8")
    links = [("metrics.md", a) for a in re.findall(r"\]\(metrics\.md#([^)]+)\)", text)]
    if page == "metrics.md":
        links += [("metrics.md", a) for a in re.findall(r"\]\(#([^)]+)\)", text)]
        links += [("design.md", a) for a in re.findall(r"\]\(design\.md#([^)]+)\)", text)]
    missing = [
        f"{target}#{a}"
        for target, a in links
        if a not in {x for _, x in anchors((docs / target).read_text(encoding="utf-8"))}
    ]
    assert not missing, f"{page} links to headings that do not exist: {missing}"
