"""Secrets in URLs never reach a shareable output (issue 32, item 7): a trace read as
``http://user:PASSWORD@host/x.json.gz`` or through a presigned URL
(``?X-Amz-Signature=…&X-Amz-Credential=…``) is named without them in the summary, the
warnings, the errors, a scan's dataset, a run's document, the report, the annotated trace
and the charts, while the host, the path and the non-secret parameters (``versionId``)
stay; the object is still read with the full URL."""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result
from conftest import GENERATED
from s3server import free_port

from traceview import environ
from traceview.batch.scan import scan
from traceview.batch.scan_task import ScanOptions
from traceview.cli import cli
from traceview.loader import remote
from traceview.redact import scrub, shown

# every secret the URLs below carry; none may appear in any output byte
SECRETS = ("PASSWORD", "SECRETSIG", "AKIDSECRET", "SECRETTOKEN", "SASSIG")
SIGNING = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIDSECRET%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600"
    "&X-Amz-Security-Token=SECRETTOKEN&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=SECRETSIG&versionId=keep"
)
# the same query as it must be shown: the credentials' values replaced, the rest kept
SIGNING_SHOWN = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED"
    "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600"
    "&X-Amz-Security-Token=REDACTED&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=REDACTED&versionId=keep"
)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """Serves the folder to anyone: any credentials, any query."""

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up early (a HEAD, a range read) is not news


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:PORT`` of a plain HTTP server holding two traces, ``t.json.gz``: the
    first half of hybrid_chunked's bytes (a truncated trace, which warns),
    ``report.sqlite`` (an Nsight Systems export) and ``broken.json``, which fails."""
    root = tmp_path_factory.mktemp("served")
    for name in ("hybrid_chunked", "dense_sglang"):
        shutil.copy(GENERATED / f"{name}.json.gz", root / f"{name}.json.gz")
    data = (GENERATED / "hybrid_chunked.json.gz").read_bytes()
    (root / "t.json.gz").write_bytes(data[: len(data) // 2])
    shutil.copy(GENERATED / "nsys" / "nsys_vllm.sqlite", root / "report.sqlite")
    (root / "broken.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ')
    handler = functools.partial(_Quiet, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _with_password(host: str, name: str) -> str:
    return f"http://user:PASSWORD@{host}/{name}"


def _signed(host: str, name: str) -> str:
    return f"http://{host}/{name}?{SIGNING}"


def _clean(*texts: str | bytes) -> None:
    """No secret in any of ``texts``."""
    for text in texts:
        raw = text if isinstance(text, bytes) else text.encode()
        for secret in SECRETS:
            assert secret.encode() not in raw, (secret, raw[:2000])


def _run(*args: str, code: int = 0) -> Result:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == code, (r.stdout, r.stderr)
    _clean(r.stdout, r.stderr)
    return r


# --- the function ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [
        ("/data/x.json.gz", "/data/x.json.gz"),
        ("http://h:8080/a/x.json.gz", "http://h:8080/a/x.json.gz"),
        ("http://u:p@h:8080/a/x.json.gz?v=1", "http://REDACTED@h:8080/a/x.json.gz?v=1"),
        ("https://TOKEN@github.example/x.json", "https://REDACTED@github.example/x.json"),
        ("s3://AKID:SECRET@bkt/k/x.json.gz", "s3://REDACTED@bkt/k/x.json.gz"),
        ("http://u:SE?CR#ET@h/x", "http://REDACTED@h/x"),
        ("http://h/a@b/x?e=a@b", "http://h/a@b/x?e=a@b"),
        (
            "https://b.s3.amazonaws.com/x?AWSAccessKeyId=A&Expires=9&Signature=S",
            "https://b.s3.amazonaws.com/x?AWSAccessKeyId=REDACTED&Expires=9&Signature=REDACTED",
        ),
        (
            "https://storage.googleapis.com/b/x?X-Goog-Credential=C&X-Goog-Date=D"
            "&X-Goog-Signature=S&generation=7",
            "https://storage.googleapis.com/b/x?X-Goog-Credential=REDACTED&X-Goog-Date=D"
            "&X-Goog-Signature=REDACTED&generation=7",
        ),
        (
            "https://a.blob.core.windows.net/c/x?sv=2022&se=2026&sp=r&SIG=abc%3D",
            "https://a.blob.core.windows.net/c/x?sv=2022&se=2026&sp=r&SIG=REDACTED",
        ),
        (
            "https://h/x?token=t&Access_Token=t&api_key=k&APIKEY=k&password=p&secret=s&x=1",
            "https://h/x?token=REDACTED&Access_Token=REDACTED&api_key=REDACTED"
            "&APIKEY=REDACTED&password=REDACTED&secret=REDACTED&x=1",
        ),
        ("https://h/x#access_token=t&state=1", "https://h/x#access_token=REDACTED&state=1"),
    ],
)
def test_shown_keeps_the_identity_and_drops_the_credentials(given: str, expected: str) -> None:
    assert shown(given) == expected
    assert shown(expected) == expected


def test_scrub_redacts_every_url_in_a_message() -> None:
    text = "GET URL('http://u:PASSWORD@h/x?sig=SASSIG') failed; see http://h/y?versionId=3"
    assert scrub(text) == (
        "GET URL('http://REDACTED@h/x?sig=REDACTED') failed; see http://h/y?versionId=3"
    )
    assert scrub("http://h/x?sig=S: no such object (see http://u:p@h).") == (
        "http://h/x?sig=REDACTED: no such object (see http://REDACTED@h)."
    )
    assert scrub("/data/a://b x") == "/data/a://b x"


# --- every output ------------------------------------------------------------------------


def test_summarize_json_names_the_object_without_its_credentials(host: str) -> None:
    for url, expected in (
        (_with_password(host, "hybrid_chunked.json.gz"), f"http://REDACTED@{host}/"),
        (_signed(host, "hybrid_chunked.json.gz"), f"http://{host}/"),
    ):
        doc = json.loads(_run("summarize", url, "--json").stdout)
        path = doc["trace"]["path"]
        assert path.startswith(expected + "hybrid_chunked.json.gz"), path
    assert path.endswith("?" + SIGNING_SHOWN)
    both = f"http://user:PASSWORD@{host}/report.sqlite?{SIGNING}"  # copied, then read
    doc = json.loads(_run("summarize", both, "--json").stdout)
    assert doc["trace"]["path"] == f"http://REDACTED@{host}/report.sqlite?{SIGNING_SHOWN}"
    info = _run("info", _signed(host, "hybrid_chunked.json.gz"))
    assert f"{host}/hybrid_chunked.json.gz" in info.stdout + info.stderr


def test_the_screen_and_its_warnings_name_no_credential(host: str) -> None:
    for url in (_with_password(host, "t.json.gz"), _signed(host, "t.json.gz")):
        r = _run("summarize", url)
        assert "Warning:" in r.stderr and "truncated" in r.stderr
        assert f"{host}/t.json.gz" in r.stderr


def test_an_error_names_the_url_without_its_credentials(host: str) -> None:
    url = f"http://user:PASSWORD@{host}/nope.json.gz?X-Amz-Signature=SECRETSIG&versionId=keep"
    r = _run("summarize", url, code=2)
    assert r.stderr.strip() == (
        f"Error: http://REDACTED@{host}/nope.json.gz?X-Amz-Signature=REDACTED&versionId=keep: "
        "no such object"
    )


def test_an_endpoint_url_with_credentials_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = f"http://key:PASSWORD@127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    # unsigned requests (the driver's own credentials would make it refuse the URL's), one
    # attempt: the driver's message names the endpoint it could not reach
    once = {"anon": True, "config_kwargs": {"retries": {"max_attempts": 1}}}
    monkeypatch.setenv(environ.STORAGE_OPTIONS, json.dumps(once))
    opts = ["--storage-option", f"endpoint_url={closed}"]
    r = CliRunner().invoke(cli, ["summarize", "s3://bkt/x.json.gz", *opts])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    _clean(r.stdout, r.stderr)
    assert r.stderr.startswith("Error: s3://bkt/x.json.gz: ")
    assert "REDACTED@127.0.0.1" in r.stderr
    r = CliRunner().invoke(cli, ["summarize", "s3://bkt/x.json.gz", "--storage-option", closed])
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.stderr
    _clean(r.stdout, r.stderr)


@pytest.mark.slow
def test_a_run_document_names_its_ranks_without_credentials(host: str, tmp_path: Path) -> None:
    urls = [_with_password(host, "hybrid_chunked.json.gz"), _signed(host, "dense_sglang.json.gz")]
    doc = json.loads(_run("summarize", *urls, "--json", "-j", "1").stdout)
    paths = sorted(r["path"] for r in doc["ranks"])
    assert paths == sorted(
        [
            f"http://REDACTED@{host}/hybrid_chunked.json.gz",
            f"http://{host}/dense_sglang.json.gz?{SIGNING_SHOWN}",
        ]
    )
    _run("summarize", *urls, "-j", "1")
    out = tmp_path / "steps.csv"
    _run("steps", *urls, "-j", "1", "-o", str(out))
    text = out.read_text()
    _clean(text)
    assert f"{host}/dense_sglang.json.gz?" in text
    folder = tmp_path / "annotated"
    _run("annotate", *urls, "-j", "1", "-o", str(folder))
    assert sorted(f.name for f in folder.iterdir()) == [
        "dense_sglang.json.gz",
        "hybrid_chunked.json.gz",
    ]
    r = _run("summarize", *urls, _with_password(host, "nope.json.gz"), code=2)
    assert r.stderr.startswith(f"Error: http://REDACTED@{host}/nope.json.gz: no such object")


def _every_cell(ds: Path) -> str:
    """Every column of every Parquet file of the dataset, as text."""
    cells = []
    files = sorted(ds.rglob("*.parquet"))
    assert files
    for f in files:
        df = pl.read_parquet(f)
        cells.append(df.select(pl.all().cast(pl.String)).write_csv())
    return "\n".join(cells)


def test_a_scan_stores_no_credential(host: str, tmp_path: Path) -> None:
    urls = [
        _with_password(host, "hybrid_chunked.json.gz"),
        _signed(host, "dense_sglang.json.gz"),
        _signed(host, "hybrid_chunked.json.gz"),  # the same bytes: an alias, or skipped
        _signed(host, "broken.json"),  # a failure: its errors/ row
    ]
    ds = tmp_path / "ds"
    r = CliRunner().invoke(cli, ["scan", *urls, "-o", str(ds), "-j", "1"])
    assert r.exit_code == 0, r.stderr
    _clean(r.stdout, r.stderr)
    assert "scanned 2" in r.stderr and "failed 1" in r.stderr
    failed = f"Warning: http://{host}/broken.json?{SIGNING_SHOWN}: not scanned: "
    assert failed + "no device activity (no kernels)\n" in r.stderr  # the URL said once
    cells = _every_cell(ds)
    _clean(cells)
    traces = pl.read_parquet(ds / "traces" / "*.parquet")
    hybrid = {  # one of the two URLs of the same bytes is scanned, the other skipped
        f"http://REDACTED@{host}/hybrid_chunked.json.gz",
        f"http://{host}/hybrid_chunked.json.gz?{SIGNING_SHOWN}",
    }
    paths = sorted(traces["path"])
    assert paths[0] == f"http://{host}/dense_sglang.json.gz?{SIGNING_SHOWN}"
    assert len(paths) == 2 and paths[1] in hybrid
    errors = pl.read_parquet(ds / "errors" / "*.parquet")
    assert errors["path"].to_list() == [f"http://{host}/broken.json?{SIGNING_SHOWN}"]
    # the files themselves, whatever their encoding
    for f in ds.rglob("*"):
        if f.is_file():
            _clean(f.read_bytes())


def test_an_object_with_a_version_is_still_skipped_unread(
    host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The incremental skip matches an object by its URL as stored (without credentials),
    its size and its version: a second scan of the same URL reads nothing."""
    monkeypatch.setattr(remote, "version_of", lambda info: "etag:fixed")
    url = _signed(host, "hybrid_chunked.json.gz")
    first = scan([url], tmp_path / "ds", ScanOptions(jobs=1))
    assert first.scanned == [url] and first.bytes_read > 0
    again = scan([url], tmp_path / "ds", ScanOptions(jobs=1))
    assert again.scanned == [] and again.skipped == [url] and again.bytes_read == 0
    _clean(_every_cell(tmp_path / "ds"))


@pytest.mark.slow
def test_the_report_names_no_credential(host: str, tmp_path: Path) -> None:
    both = f"http://user:PASSWORD@{host}/hybrid_chunked.json.gz?{SIGNING}"
    page = tmp_path / "r.html"
    _run("report", both, "-o", str(page))
    html = page.read_text()
    _clean(html)
    assert f"REDACTED@{host}/hybrid_chunked.json.gz?" in html and "versionId=keep" in html


@pytest.mark.slow
def test_annotate_and_the_charts_name_no_credential(host: str, tmp_path: Path) -> None:
    signed = _signed(host, "hybrid_chunked.json.gz")
    with_password = _with_password(host, "dense_sglang.json.gz")
    out = tmp_path / "a.json.gz"
    _run("annotate", signed, "-o", str(out))
    _clean(gzip.decompress(out.read_bytes()))
    svg = tmp_path / "hb.svg"
    _run("heartbeat", signed, "-o", str(svg))
    _clean(svg.read_bytes())
    gaps = tmp_path / "gaps.svg"
    _run("gaps", with_password, "-o", str(gaps))
    _clean(gaps.read_bytes())


@pytest.mark.parametrize(
    "url, glob",
    [
        ("s3://b/runs/*/rank*.json.gz", True),
        ("s3://b/rank?.json.gz", True),
        ("s3://b/r[0-3].json.gz", True),
        ("s3://b/x.json.gz?versionId=3", False),
        (f"http://h/x.json.gz?{SIGNING}", False),
        ("s3://b/*.json.gz?versionId=3", True),
    ],
)
def test_a_query_is_no_glob(url: str, glob: bool) -> None:
    assert remote.is_glob(url) is glob


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pa/ss@127.0.0.1:9/x.json",
        "s3://AKID:wJal/rXUtn+FEMI/K7MDENG@bkt/runs/x.json.gz",
        "http://u:p/q@h:1/x?versionId=3",
    ],
    ids=["slash", "aws-secret", "slash-and-query"],
)
def test_a_password_holding_a_slash_is_redacted(url: str) -> None:
    """A reviewer's finding: the userinfo was looked for before the first '/' only, so an
    AWS secret key with a '/' in it was shown."""
    said = shown(url)
    secret = url.split("://", 1)[1].rsplit("@", 1)[0]
    assert secret not in said and said.count("REDACTED@") == 1
    assert secret not in scrub(f"Error: {url}: no such object")


@pytest.mark.parametrize(
    "url, expected",
    [
        ("s3://AKIA:SE?CR/ET@bkt/k/x.json.gz", "s3://REDACTED@bkt/k/x.json.gz"),
        ("s3://AKIA:p#a/ss@bkt/k/x.json.gz", "s3://REDACTED@bkt/k/x.json.gz"),
        ("s3://AKIA:1234/ab@bkt/k", "s3://REDACTED@bkt/k"),  # no bucket has a port
        ("s3://u:p@ss/x@bkt/k?e=a@b", "s3://REDACTED@bkt/k?e=a@b"),
        ("http://u:p@h/x?email=a@b.example", "http://REDACTED@h/x?email=a@b.example"),
        ("http://u:SE?CR/ET@h:8080/x#y@z", "http://REDACTED@h:8080/x#y@z"),
        ("https://h/x?a=1;Signature=SEC", "https://h/x?a=1;Signature=REDACTED"),
        (
            "https://h/x?a=1;;sig=S&X-Amz-Credential=C;b=2",
            "https://h/x?a=1;;sig=REDACTED&X-Amz-Credential=REDACTED;b=2",
        ),
        ("https://h/x#state=1;access_token=T", "https://h/x#state=1;access_token=REDACTED"),
    ],
    ids=[
        "query-mark",
        "hash",
        "digits",
        "at-in-password",
        "at-in-query",
        "port",
        "semicolon",
        "mixed-separators",
        "fragment",
    ],
)
def test_a_secret_spelled_with_url_delimiters_is_redacted(url: str, expected: str) -> None:
    """Issue 49: a password holding '?' or '#' (then '/'), and a credential after ';' in the
    query, were shown as they were written."""
    assert shown(url) == expected
    assert shown(expected) == expected
    said = scrub(f"Error: {url}: no such object")
    assert said == f"Error: {expected}: no such object"
    for secret in ("SE?CR/ET", "p#a/ss", "1234/ab", "p@ss/x", "SEC", "=S&", "=C;", "=T"):
        if secret in url:
            assert secret not in said


def test_a_path_with_an_at_sign_is_kept() -> None:
    for url in ("http://host:8080/a@b/x.json", "s3://bkt/a@b/x", "http://[::1]:8080/a@b"):
        assert shown(url) == url


@pytest.mark.parametrize(
    "url, expected",
    [
        (
            "https://user:pw@[fe80::1%25eth0]:8080/x.json.gz",
            "https://REDACTED@[fe80::1%25eth0]:8080/x.json.gz",
        ),
        ("https://user:pw@[v1.fe]/x", "https://REDACTED@[v1.fe]/x"),
        ("https://user:pw@host:80a/x", "https://REDACTED@host:80a/x"),
        ("https://user:pw@host:8080:1/x", "https://REDACTED@host:8080:1/x"),
        ("https://user:pw@host:-1/x", "https://REDACTED@host:-1/x"),
        ("s3://AKIA:pw@my:bucket/k", "s3://REDACTED@my:bucket/k"),
        ("s3://AKIA:p/pw@my:bucket/k", "s3://REDACTED@my:bucket/k"),
    ],
    ids=["ipv6-zone", "ipvfuture", "port-letters", "two-ports", "negative-port", "colon", "slash"],
)
def test_a_userinfo_before_an_unknown_host_is_redacted(url: str, expected: str) -> None:
    """The probe of issue 49: the userinfo was shown whenever the text after its '@' was no
    host the module knew. What is not certainly a host is redacted."""
    assert shown(url) == expected
    said = scrub(f"Error: {url}: no such object")
    assert said == f"Error: {expected}: no such object" and "pw" not in said


@pytest.mark.parametrize("name", ["key", "auth_key", "jwt", "code", "AuthKey"])
def test_more_credential_parameters_are_redacted(name: str) -> None:
    url = f"https://h/x?{name}=AIzaSECRET&v=1"
    assert shown(url) == f"https://h/x?{name}=REDACTED&v=1"


def test_a_password_with_a_space_is_redacted_from_a_message() -> None:
    """A URL in a text ends at a space: the rest of a password holding one was shown."""
    said = scrub("cannot read s3://AKIA:SE CRET@bkt/k: 403 Forbidden")
    assert said == "cannot read s3://REDACTED@bkt/k: 403 Forbidden"
    assert "SE" not in scrub("cannot read s3://AKIA:SE") and "AKIA" not in scrub("s3://AKIA:SE x")
    assert scrub("see http://h:8080 and more @ things") == "see http://h:8080 and more @ things"
