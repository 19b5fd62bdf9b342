"""What a URL that cannot be used says (issue 32, items 6 and 9): one line, exit 2, in
words that fit (a URL with no bucket, a bucket that does not exist, a server that refuses
an upload), never a traceback; a scheme in upper case is the same scheme."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED
from s3server import filesystem, s3_server

import traceview as tv
from traceview.cli import cli

LOCAL = GENERATED / "dense_vllm_detailed.json.gz"
TRACE = "s3://bkt/in/t.json.gz"


@pytest.fixture(scope="module")
def bucket() -> Iterator[str]:
    with s3_server() as url:
        fs = filesystem(url)
        fs.mkdir("bkt")
        fs.put(str(LOCAL), TRACE.removeprefix("s3://"))
        yield url


def _error(args: list[str]) -> list[str]:
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, (args, r.stderr, r.exception)
    return r.stderr.splitlines()


@pytest.mark.parametrize(
    ("args", "url"),
    [
        (["summarize", "s3://"], "s3://"),
        (["info", "s3:///t.json.gz"], "s3:///t.json.gz"),
        (["scan", "s3://", "-o", "X"], "s3://"),
    ],
)
def test_a_url_with_no_bucket_is_one_line(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _error(args) == [f"Error: {url}: names no bucket; give s3://BUCKET/PATH"]
    assert not (tmp_path / "X").exists()


def test_an_http_url_with_no_host_is_one_line() -> None:
    assert _error(["info", "http://"]) == ["Error: http://: names no host; give http://HOST/PATH"]


def test_an_output_in_a_bucket_that_does_not_exist_is_refused_before_any_work(
    bucket: str,
) -> None:
    # one line: refused before the trace is read (its analysis warns on stderr)
    assert _error(["steps", TRACE, "-o", "s3://nobucket/x.csv"]) == [
        "Error: s3://nobucket/x.csv: cannot be written: the bucket 'nobucket' does not exist"
    ]
    assert _error(["scan", TRACE, "-o", "s3://nobucket/ds", "-j", "1"]) == [
        "Error: s3://nobucket/ds: cannot be written: the bucket 'nobucket' does not exist"
    ]


@pytest.mark.slow
def test_an_upper_case_scheme_is_the_same_scheme(bucket: str) -> None:
    lower = CliRunner().invoke(cli, ["info", TRACE])
    upper = CliRunner().invoke(cli, ["info", "S3://bkt/in/t.json.gz"])
    assert lower.exit_code == 0 and upper.exit_code == 0, upper.stderr
    assert upper.stdout == lower.stdout.replace(TRACE, "S3://bkt/in/t.json.gz")
    r = CliRunner().invoke(cli, ["steps", "S3://bkt/in/t.json.gz", "-o", "S3://bkt/out/s.csv"])
    assert r.exit_code == 0, r.stderr
    got = filesystem(bucket).cat("bkt/out/s.csv").decode()
    assert got.count("\n") == tv.steps(tv.load(LOCAL)).height + 1  # the header, each step


@pytest.mark.slow
def test_an_http_server_that_refuses_an_upload_says_so() -> None:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        """A static file server: it reads an upload whole, then refuses it (501), as
        http.server does without reading it (which races the upload: a broken pipe)."""

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                    self.rfile.read(size + 2)
                self.rfile.readline()
            else:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_error(501, "Unsupported method ('POST')")

    handler = functools.partial(Quiet, directory=str(GENERATED))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        out = f"{base}/z/out.csv"
        lines = _error(["steps", f"{base}/{LOCAL.name}", "-o", out])
    finally:
        server.shutdown()
        server.server_close()
    assert lines[-1] == (
        f"Error: {out}: cannot be written: the server refused the upload (POST): "
        "501 Unsupported method ('POST')"
    )


@pytest.mark.parametrize(
    "url", ["s3://user:pw@bkt/x.json.gz", "s3://AKIA:SE?CR/ET@bkt/x.json.gz"], ids=["plain", "?/"]
)
def test_an_s3_url_with_credentials_says_why_in_one_line(url: str) -> None:
    """Issue 49: ``s3://user:pw@…`` ended in "Parameter validation failed:" with no reason
    (botocore's reason is on the lines below that one)."""
    (said,) = _error(["summarize", url])
    head = "Error: s3://REDACTED@bkt/x.json.gz: an s3:// URL carries no credentials"
    assert said.startswith(head)
    assert "--storage-option key=KEY" in said and "pw" not in said and "SE?CR" not in said


def test_a_drivers_reason_below_its_heading_line_is_kept_without_the_secret() -> None:
    """A driver whose message is a heading line then the reason (botocore's
    ParamValidationError) is read whole, on one line, and a credential of the URL it quotes
    apart from the URL is redacted too."""
    from traceview.loader.remote import failure

    url = "https://user:pw123@h.example/x.json.gz?sig=SECRET"
    exc = ValueError(
        'Parameter validation failed:\nInvalid bucket name "user:pw123@h.example": no\n'
        "signature SECRET is accepted"
    )
    said = str(failure(url, exc))
    assert said == (
        "https://REDACTED@h.example/x.json.gz?sig=REDACTED: cannot read the object: Parameter "
        'validation failed: Invalid bucket name "REDACTED@h.example": no signature REDACTED '
        "is accepted"
    )


def test_an_ipv6_host_is_read() -> None:
    """The probe of issue 49: ``https://[::1]:8080/x.json.gz`` failed with "ClientSession.
    _request() got an unexpected keyword argument 'target_options'" (fsspec read the host's
    "::" as its separator of chained URLs), and its brackets made it a glob. A trace served
    on the IPv6 loopback reads as the same file does."""
    import socket

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    class Server6(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6

    try:
        server = Server6(("::1", 0), functools.partial(Quiet, directory=str(GENERATED)))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://[::1]:{server.server_address[1]}/dense_sglang.json.gz"
        got = tv.summarize(tv.load(url, options=tv.LoadOptions(cache=False))).to_dict()
    finally:
        server.shutdown()
        server.server_close()
    want = tv.summarize(tv.load(GENERATED / "dense_sglang.json.gz")).to_dict()
    assert got["steps"] == want["steps"] and got["families"] == want["families"]
