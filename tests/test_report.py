"""traceview report: the page holds the summary's figures (checked with an HTML parser),
needs no network, and a real headless Chromium renders it with visible charts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED

import traceview as tv
from traceview.cli import cli
from traceview.render.table import fmt_ns

A, B = GENERATED / "hybrid_chunked.json.gz", GENERATED / "hybrid_refeed.json.gz"


class Page(HTMLParser):
    """Tables by class (rows of cell texts), JSON scripts by id, SVGs, external links."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.scripts: dict[str, str] = {}
        self.svgs = 0
        self.external: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._script: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) and re.match(r"(https?:)?//", str(a[key])):
                self.external.append(str(a[key]))
        if tag == "table":
            self._table = str(a.get("class") or "")
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "script":
            self._script = str(a.get("id"))
            self.scripts[self._script] = ""
        elif tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "script":
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._script is not None:
            self.scripts[self._script] += data


def _page(tmp_path: Path, *traces: Path) -> tuple[Path, Page]:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", *map(str, traces), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    page = Page()
    page.feed(out.read_text(encoding="utf-8"))
    return out, page


@pytest.mark.slow
def test_the_page_holds_the_summarys_figures(tmp_path: Path) -> None:
    _, page = _page(tmp_path, A)
    doc = tv.summarize(tv.load(A)).to_dict()
    assert json.loads(page.scripts["traceview-summary-0"]) == json.loads(json.dumps(doc))
    families = page.tables["families"][1:]
    assert [r[0] for r in families] == [f["family"] for f in doc["families"]]
    assert [r[2] for r in families] == [fmt_ns(f["total_ns"]) for f in doc["families"]]
    phases = page.tables["phases"][1:]
    assert [r[0] for r in phases] == ["all"] + [p["kind"] for p in doc["steps"]["phases"]]
    assert [r[3] for r in phases[1:]] == [
        fmt_ns(p["cadence"]["p50_ns"]) for p in doc["steps"]["phases"]
    ]
    gaps = page.tables["gaps"][1:]
    assert [int(r[1].replace(",", "")) for r in gaps] == [g["n"] for g in doc["decode_gaps"]]
    assert page.svgs >= 2 and not page.external
    assert "diff" not in page.tables


@pytest.mark.slow
def test_two_traces_give_the_diff_and_both_heartbeats(tmp_path: Path) -> None:
    out, page = _page(tmp_path, A, B)
    diff = json.loads(page.scripts["traceview-diff"])
    rows = page.tables["diff"][1:]
    headline = [r for r in diff["rows"] if r["role"] == "headline"]
    rest = [r for r in diff["rows"] if r["role"] != "headline"][:40]
    assert len(rows) == len(headline) + len(rest)
    assert [r[5] for r in rows[: len(headline)]] == [r["verdict"] or r["why"] for r in headline]
    # a workload row (a total) is shown, never judged
    shown = {r[1]: r[5] for r in rows}
    assert all(shown[r["metric"]] == "workload" for r in rest if r["role"] == "workload")
    assert "traceview-summary-1" in page.scripts
    text = out.read_text(encoding="utf-8")
    assert "A — hybrid_chunked.json.gz" in text and "B — hybrid_refeed.json.gz" in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install -y chromium)")
@pytest.mark.parametrize("n", [1, 2], ids=["one-trace", "two-traces"])
def test_a_headless_chromium_renders_it(tmp_path: Path, n: int) -> None:
    out, _ = _page(tmp_path, *[A, B][:n])
    # a copy with a probe that reports each chart's rendered size in the title
    probe = tmp_path / "probe.html"
    probe.write_text(
        out.read_text(encoding="utf-8").replace(
            "</body>",
            "<script>window.addEventListener('load', () => { document.title = 'SIZES:' + "
            "[...document.querySelectorAll('.chart svg')].map(e => { const r = "
            "e.getBoundingClientRect(); return Math.round(r.width) + 'x' + "
            "Math.round(r.height); }).join(','); });</script></body>",
        ),
        encoding="utf-8",
    )
    common = [
        str(CHROMIUM),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,2000",
    ]
    dom = subprocess.run(
        [*common, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120
    )
    title = re.search(r"<title>SIZES:([^<]*)</title>", dom.stdout)
    assert title, dom.stdout[:500]
    sizes = [tuple(map(int, s.split("x"))) for s in title.group(1).split(",")]
    assert len(sizes) == n + 1  # one heartbeat, one gap chart per trace
    assert all(w > 300 and h > 100 for w, h in sizes), sizes
    shot = tmp_path / "report.png"
    run = subprocess.run(
        [*common, f"--screenshot={shot}", out.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    console = [
        line
        for line in (run.stderr + dom.stderr).splitlines()
        if "CONSOLE" in line or "Uncaught" in line or "Failed to load" in line
    ]
    assert not console, console
