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

- the userinfo (``user:password@`` or ``token@``): ``http://REDACTED@host/x.json.gz``,
  however the password is spelled (see below);
- the value of a query parameter (split at ``&`` and at ``;``) whose name
  (case-insensitive, percent-decoded) is a credential: one that contains ``signature``,
  ``token``, ``secret``, ``password``, ``passwd``, ``credential``, ``apikey``/``api_key``/
  ``api-key``, ``accesskey``/``access_key`` or ``accessid`` (``X-Amz-Signature``,
  ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``Signature``, ``AWSAccessKeyId``,
  ``X-Goog-Signature``, ``X-Goog-Credential``, ``GoogleAccessId``, ``access_token``,
  ``client_secret``, ...),
  ``auth_key``/``authkey``,
  or is ``sig`` (Azure SAS), ``pwd``, ``auth``, ``authorization``, ``key`` (a Google API
  key), ``code`` (an OAuth grant) or ``jwt``.

:func:`scrub` does the same to every URL inside a free text (an error message from a
store's driver, which may quote the URL it was given).

A password typed into a URL need not be percent-encoded: ``s3://KEY:SE?CR/ET@bkt/x`` and
``s3://KEY:p#a/ss@bkt/x`` are what a user writes, and a reader may take them so. A URL
parser that follows RFC 3986 (``urllib.parse``, ``rfc3986``, ``yarl``) ends the authority at
the first ``/``, ``?`` or ``#``: it reads ``KEY:SE`` as the host and the rest of the secret
as the path or the query, and shows it. So the authority is read here by hand, failing
closed: a userinfo begins where the text before the first ``/``, ``?`` or ``#`` holds an
``@``, or a ``:`` that starts no port (a bucket's name holds no ``:``, so only an http(s)
host has a port). It runs to the last ``@`` that a host follows, before the query or
fragment that comes after the first host and ``/`` (a ``?`` or ``#`` before that may be the
password's own). That last ``@`` ends the userinfo even where the text after it is no host
this module knows (an IPv6 zone, an IPvFuture, a port that is no number): what is not
certainly a host is redacted. A password that holds an ``@``, then a ``/`` and a ``?``,
stays ambiguous with a path and a query, and is read as they are.

In a free text, a URL ends at a space. A userinfo that no ``@`` ends there (a password
with a space in it) runs to the next ``@`` on the line; with none, the text before the
first ``/`` is redacted.
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
    "auth_key",
    "authkey",
)
_SECRET_NAMES = frozenset({"sig", "pwd", "auth", "authorization", "key", "code", "jwt"})

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
    """A query's (or fragment's) parameters, each credential's value redacted; the
    separators, ``&`` and ``;`` (the W3C's alternative to ``&``), kept as they are."""
    return "".join(_param(item) for item in re.split(r"([&;])", text))


_HOST = re.compile(r"(?:[^:@/?#\[\]]*|\[[0-9A-Fa-f:.]*\])(?::\d*)?")  # host[:port], [v6][:port]
_HOST_PORT = re.compile(r"[^:@\[\]]*:\d*|\[[0-9A-Fa-f:.]*\](:\d*)?")  # host:port, [v6]:port
_PORTED = ("http", "https")  # the schemes whose authority may end in a port


def _userinfo_end(scheme: str, rest: str) -> int:
    """Where the userinfo of ``scheme://rest`` ends: the index of its ``@`` in ``rest``,
    -1 where there is none (see the module doc)."""
    head = re.split(r"[/?#]", rest, maxsplit=1)[0]
    ported = scheme.lower() in _PORTED and _HOST_PORT.fullmatch(head) is not None
    if "@" not in head and (":" not in head or ported):
        return -1
    ats = []  # each '@': its index, where the text after it ends, and whether it is a host
    for m in re.finditer("@", rest):
        host = re.split(r"[/?#]", rest[m.end() :], maxsplit=1)[0]
        ats.append((m.start(), m.end() + len(host), _HOST.fullmatch(host) is not None))
    stop = len(rest)  # the query or fragment past the first host and its path
    hosts = [a for a in ats if a[2]] or ats  # what follows no '@' is certainly a host: fail closed
    for _, host_end, _ in hosts:
        if rest.startswith("/", host_end):
            query = re.search(r"[?#]", rest[host_end:])
            stop = host_end + query.start() if query else stop
            break
    # the last '@' before that stop ends the userinfo, whether or not a host follows it
    return max((at for at, _, _ in ats if at < stop), default=-1)


def shown(name: str) -> str:
    """``name`` as it may be shown or stored: a URL without its userinfo and with its
    credential query parameters' values replaced by ``REDACTED`` (see the module doc);
    anything that is not a URL (a file's path), as it is. ``shown(shown(x)) == shown(x)``."""
    scheme, sep, rest = name.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return name
    at = _userinfo_end(scheme, rest)
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


def has_userinfo(name: str) -> bool:
    """Whether a URL names a user (and perhaps a password) before its host (see the
    module doc for how a password with ``/``, ``?`` or ``#`` in it is read)."""
    scheme, sep, rest = name.partition("://")
    return bool(sep) and _SCHEME.fullmatch(scheme) is not None and _userinfo_end(scheme, rest) != -1


def secrets(name: str) -> list[str]:
    """The credentials a URL carries, longest first: its userinfo and each credential
    parameter's value, as written and percent-decoded; none for a path."""
    scheme, sep, rest = name.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return []
    found = set()
    at = _userinfo_end(scheme, rest)
    if at > 0:
        found.add(rest[:at])
        rest = rest[at + 1 :]
    for part in re.split(r"[?#]", rest)[1:]:
        for item in re.split(r"[&;]", part):
            key, eq, value = item.partition("=")
            if eq and value and is_secret(key):
                found.add(value)
    found |= {unquote(x) for x in found}
    return sorted((x for x in found if x), key=len, reverse=True)


def scrub(text: str, about: str | None = None) -> str:
    """``text`` with every URL in it as :func:`shown` gives it (a message that quotes the
    URL it failed on shows no credential); given the URL ``about`` that the text is about,
    also every credential of that URL (:func:`secrets`) wherever the text quotes it (a
    driver that names the bucket ``user:pw@bkt`` it was given)."""
    for secret in secrets(about) if about is not None else ():
        # as a word of its own: a short token is no reason to mangle the words around it
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MARK, text)
    if "://" not in text:
        return text
    out, pos = [], 0
    for m in _URL_IN_TEXT.finditer(text):
        if m.start() < pos:
            continue  # inside a userinfo already redacted
        url, end = m.group(), m.end()
        scheme, _, rest = url.partition("://")
        if _open_userinfo(scheme, rest):
            # a password with a space in it: the userinfo runs to the next '@' on the line
            line_end = text.find("\n", end)
            at = text.find("@", end, len(text) if line_end == -1 else line_end)
            if at != -1:
                out.append(f"{text[pos : m.start()]}{scheme}://{MARK}@")
                pos = at + 1
                continue
            # no '@' ends it: what precedes the first '/' is no host (fail closed)
            head = re.split(r"([/?#])", rest, maxsplit=1)
            url = f"{scheme}://{MARK}" + "".join(head[1:])
            out.append(text[pos : m.start()] + url)
            pos = end
            continue
        out.append(text[pos : m.start()] + shown(url))
        pos = end
    return "".join(out) + text[pos:]


def _open_userinfo(scheme: str, rest: str) -> bool:
    """Whether ``scheme://rest`` starts a userinfo (a ``:`` that starts no port) that no
    ``@`` ends: the text that follows it may hold the rest of the password."""
    head = re.split(r"[/?#]", rest, maxsplit=1)[0]
    ported = scheme.lower() in _PORTED and _HOST_PORT.fullmatch(head) is not None
    return "@" not in rest and ":" in head and not ported


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
