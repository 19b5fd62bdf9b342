"""What of a URL may be shown or stored: the object's identity, never its credentials.

A trace at a URL can carry secrets in its name: a user and password
(``http://user:PASSWORD@host/x.json.gz``, ``s3://KEY:SECRET@bucket/key``) or a signature in
its query (a presigned S3 URL's ``X-Amz-Signature``, a GCS signed URL's
``X-Goog-Signature``, an Azure SAS's ``sig``, an ``access_token``). Everything traceview
shows or writes (summaries, warnings, errors, a scan's rows, a run's document, reports,
charts) names the URL by :func:`shown`; the real URL is used only to read the object.

:func:`shown` keeps the scheme, host, port, path and every query parameter that is not a
credential (``versionId``, ``generation``, ``X-Amz-Date``, ``X-Amz-Expires``, a SAS's
``se``/``sp``/``sv``: they say which object and until when, and are no secret). It
replaces by ``REDACTED``:

- the userinfo (``user:password@`` or ``token@``): ``http://REDACTED@host/x.json.gz``;
- the value of a query parameter whose name (case-insensitive, percent-decoded) is a
  credential: one that contains ``signature``, ``token``, ``secret``, ``password``,
  ``passwd``, ``credential``, ``apikey``/``api_key``/``api-key``, ``accesskey``/
  ``access_key`` or ``accessid`` (``X-Amz-Signature``, ``X-Amz-Credential``,
  ``X-Amz-Security-Token``, ``Signature``, ``AWSAccessKeyId``, ``X-Goog-Signature``,
  ``X-Goog-Credential``, ``GoogleAccessId``, ``access_token``, ``client_secret``, ...),
  or is ``sig`` (Azure SAS), ``pwd``, ``auth`` or ``authorization``.

:func:`scrub` does the same to every URL inside a free text (an error message from a
store's driver, which may quote the URL it was given).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MARK = "REDACTED"

_SECRET_PARTS = (
    "signature",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "apikey",
    "api_key",
    "api-key",
    "accesskey",
    "access_key",
    "accessid",
)
_SECRET_NAMES = frozenset({"sig", "pwd", "auth", "authorization"})

# a URL inside a text: a scheme, then everything up to a space, a quote or an angle bracket,
# but for the punctuation that ends a sentence or a message's "URL: problem"
_URL_IN_TEXT = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`:;,.)\]]"
)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def is_secret(name: str) -> bool:
    """Whether a query parameter named ``name`` carries a credential."""
    low = unquote(name).strip().lower()
    return low in _SECRET_NAMES or any(part in low for part in _SECRET_PARTS)


def _param(item: str) -> str:
    name, sep, _ = item.partition("=")
    return f"{name}={MARK}" if sep and is_secret(name) else item


def _params(text: str) -> str:
    return "&".join(_param(item) for item in text.split("&"))


_HOST_PORT = re.compile(r"[^:@\[\]]*:\d*|\[[0-9A-Fa-f:.]*\](:\d*)?")  # host:port, [v6]:port


def shown(name: str) -> str:
    """``name`` as it may be shown or stored: a URL without its userinfo and with its
    credential query parameters' values replaced by ``REDACTED`` (see the module doc);
    anything that is not a URL (a file's path), as it is. ``shown(shown(x)) == shown(x)``."""
    scheme, sep, rest = name.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return name
    slash = rest.find("/")
    head = rest if slash == -1 else rest[:slash]
    at = head.rfind("@")  # a password may hold '?' or '#'
    if at == -1 and ":" in head and not _HOST_PORT.fullmatch(head):
        # "user:pa/ss@host": a password may hold a raw '/' too (fail closed: the userinfo
        # runs to the last '@' before the query or fragment)
        limit = min([i for i in map(rest.find, "?#") if i != -1], default=len(rest))
        at = rest[:limit].rfind("@")
    user = f"{MARK}@" if at != -1 else ""
    rest = rest[at + 1 :]
    end = min([i for i in map(rest.find, "/?#") if i != -1], default=len(rest))
    authority, tail = user + rest[:end], rest[end:]
    before, hash_, fragment = tail.partition("#")
    path, q, query = before.partition("?")
    if q:
        query = _params(query)
    if "=" in fragment:  # an OAuth implicit grant's #access_token=...
        fragment = _params(fragment)
    return f"{scheme}://{authority}{path}{q}{query}{hash_}{fragment}"


def scrub(text: str) -> str:
    """``text`` with every URL in it as :func:`shown` gives it (a message that quotes the
    URL it failed on shows no credential)."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: shown(m.group()), text)


# --- text for the terminal: one definition, read by the loader and by render/safe.py -------

# C0 controls but tab and newline, DEL, C1 controls; the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069) and marks (U+061C, U+200E, U+200F) that can
# reorder what a reader sees; the line and paragraph separators (U+2028, U+2029: a table's
# row broken in two); the characters that show nothing, so two names look alike (soft
# hyphen, U+034F, Hangul fillers, U+17B4/U+17B5, U+180E, zero-width space, word joiner,
# invisible operators, variation selectors, U+FEFF, interlinear annotations, tags; the
# zero-width joiners U+200C/U+200D are kept: scripts and emoji need them); and lone
# surrogates (a file name's bytes that are not UTF-8, as Python reads them), which no
# terminal, font or UTF-8 file takes
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\ud800-\udfff"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)


def _visible(m: re.Match[str]) -> str:
    code = ord(m.group())
    if 0xDC80 <= code <= 0xDCFF:  # the byte a file name held (surrogateescape): \xff
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def terminal(text: object) -> str:
    """``text`` with every control character and bidi override shown as a visible escape:
    safe to print to a terminal as plain text (not as rich markup); a URL in it without its
    credentials."""
    return _UNSAFE.sub(_visible, scrub(str(text)))


def line(text: object) -> str:
    """``text`` for one line on the terminal (an error, a warning, a "wrote …" line):
    :func:`terminal` (which shows ``\\r`` as ``\\x0d``), and a line break in it (a file
    name may hold one) shown as ``\\x0a``, so no name can start a line that reads as
    traceview's own."""
    return terminal(text).replace("\n", "\\x0a")
