"""Every hand-written reference page says what is, in short sentences: a median of 20 words
or fewer a sentence, and none over 50 (docs/design.md, "Invariants").

``sentences`` is the one definition of a sentence here. Code spans count as one word; fenced
code, headings, HTML comments and images are skipped; each list item and each table cell is
read on its own. A sentence ends at ``.``, ``!`` or ``?`` followed by whitespace and then a
capital, a backtick, a bracket, a paren or an asterisk. A page's words are its text's
whitespace-separated words after that.
"""

from __future__ import annotations

import re
import statistics

import pytest
from conftest import ROOT

MEDIAN_MAX = 20
LONGEST_MAX = 50
GENERATED = "<!-- Everything below is generated"  # docs/cli.md: from the commands' --help

# The pages held to the bound: every hand-written page, and the header comment of every
# query file (what `traceview sql --list` and a reader of the file see).
PAGES = [
    "README.md",
    "CHANGELOG.md",
    "capture/README.md",
    "docs/README.md",
    "docs/api.md",
    "docs/capture.md",
    "docs/ci.md",
    "docs/cli.md",
    "docs/datasets.md",
    "docs/design.md",
    "docs/loading.md",
    "docs/metrics.md",
    "docs/perfetto.md",
    "docs/performance.md",
    "docs/report.md",
    "docs/sql.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "queries").glob("*.sql")),
]
# Pending: pages another branch rewrites into short sentences, each with its reason. The
# coordinator removes a mark when it merges that branch; until then a page that passes
# fails here (xfail_strict), so the mark cannot outlive its reason.
PENDING: dict[str, str] = {}


def sentences(text: str) -> list[str]:
    """The sentences of a markdown text, by the rules in this module's docstring."""
    out: list[str] = []
    para: list[str] = []
    in_code = False
    end = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*`\[])")

    def flush() -> None:
        if para:
            joined = " ".join(para)
            joined = re.sub(r"`[^`]*`", "X", joined)
            joined = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", joined)
            out.extend(s.strip() for s in end.split(joined) if s.strip())
            para.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            in_code = not in_code
            flush()
            continue
        if in_code:
            continue
        if not line or line.startswith(("#", "<!--", "![")):
            flush()
            continue
        if line.startswith("|"):
            flush()
            if re.fullmatch(r"\|[\s:|-]*\|?", line):
                continue
            for cell in line.strip("|").split("|"):
                if cell.strip():
                    para.append(cell.strip())
                    flush()
            continue
        if line.startswith(("- ", "* ")) or re.match(r"\d+\. ", line):
            flush()
            line = re.sub(r"^(- |\* |\d+\. )", "", line)
        para.append(line)
    flush()
    return out


def words(sentence: str) -> int:
    return len(sentence.split())


def prose(page: str) -> str:
    """The hand-written text of a page: a query file's leading comment without its ``--``
    markers, a markdown page up to its generated part."""
    text = (ROOT / page).read_text(encoding="utf-8")
    if page.endswith(".sql"):
        header = []
        for line in text.splitlines():
            if not line.startswith("--"):
                break
            header.append(line[3:] if line.startswith("-- ") else line[2:])
        return "\n".join(header)
    return text.split(GENERATED)[0]


def _verdict(page: str, found: list[str], median_max: float | None) -> str:
    counts = [words(s) for s in found]
    median = statistics.median(counts)
    over = [s for s in found if words(s) > LONGEST_MAX]
    if not over and (median_max is None or median <= median_max):
        return ""
    longest = sorted(found, key=words, reverse=True)[:5]
    lines = [
        f"{page}: median {median} words a sentence (bound {median_max}), "
        f"{len(over)} sentence(s) over {LONGEST_MAX}; its longest:",
        *(f"  {words(s)}: {s[:200]}" for s in longest),
    ]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=PENDING[p])) if p in PENDING else p
        for p in PAGES
    ],
)
def test_each_page_has_short_sentences(page: str) -> None:
    found = sentences(prose(page))
    assert found, f"{page}: no prose found"
    problem = _verdict(page, found, MEDIAN_MAX)
    assert not problem, problem


def test_no_help_text_runs_a_sentence_over_50_words() -> None:
    """docs/cli.md's generated part is the commands' --help text: its table cells are short
    by nature, so only the longest sentence is bounded there."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    found = sentences(text.split(GENERATED)[1].split("\n", 1)[1])
    assert len(found) > 100
    problem = _verdict("docs/cli.md (generated from --help)", found, None)
    assert not problem, problem


def test_every_page_is_held() -> None:
    """A new page joins the list, so it cannot escape the bound."""
    found = {
        p.relative_to(ROOT).as_posix()
        for pattern in ("*.md", "docs/*.md", "capture/*.md", "queries/*.sql")
        for p in ROOT.glob(pattern)
    }
    assert found - set(PAGES) == set(), f"add to PAGES: {sorted(found - set(PAGES))}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One two. Three four.", [2, 2]),  # a capital after the stop starts a sentence
        ("See e.g. the page. `x` is code.", [4, 3]),  # a lower-case word does not
        ("A `code span with words` is one word.", [5]),
        ("A [link text](x.md#a) reads as its text. [B](b.md) too.", [7, 2]),
        ("| a. B | c |\n|---|---|\n| d e f | g |", [1, 1, 1, 3, 1]),  # a cell is its own
        ("- one item\n- and another. Two.\n\n```\nnot. Prose.\n```\n# Not. Either", [2, 2, 1]),
        ("Is it? Yes! (A paren.) **Bold** too. *Ends.*", [2, 1, 4, 1]),
    ],
    ids=["stop", "lower", "code", "link", "table", "list-fence-heading", "marks"],
)
def test_the_splitter(text: str, expected: list[int]) -> None:
    assert [words(s) for s in sentences(text)] == expected


def test_the_splitter_reads_a_query_header_without_its_markers() -> None:
    assert prose("queries/top_kernels.sql").startswith("The kernels that take the most GPU time.")
    assert "SELECT" not in prose("queries/top_kernels.sql")
