"""A path as text that every writer takes.

Python reads the bytes of a file name that are not UTF-8 as lone surrogates
(``surrogateescape``: the byte 0xff is ``"\\udcff"``), and no UTF-8 encoder, parquet column,
JSON document or font takes those. :func:`stored` gives the text a name is written as (a
dataset's ``path`` and ``run`` columns, a summary document's ``trace.path``): each such byte
as the visible escape ``\\xff``, and a backslash that would read as the start of one (or of
a doubled backslash) doubled, so :func:`local` gives the path back exactly. A name that is
UTF-8 (nearly every one) is its own stored text. What is only shown (a terminal line, a
chart's title) is escaped by :mod:`traceview.render.safe` instead.
"""

from __future__ import annotations

import re

# a surrogateescape'd byte, or a backslash before what would read as an escape
_TO_STORE = re.compile(r"[\udc80-\udcff]|\\(?=\\|[\udc80-\udcff]|x[89a-f][0-9a-f])")
_FROM_STORE = re.compile(r"\\\\|\\x[89a-f][0-9a-f]")


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return "\\\\" if c == "\\" else f"\\x{ord(c) - 0xDC00:02x}"


def _unescape(m: re.Match[str]) -> str:
    c = m.group()
    return "\\" if c == "\\\\" else chr(0xDC00 + int(c[2:], 16))


def stored(path: str) -> str:
    """``path`` as valid UTF-8 text: its undecodable bytes as ``\\xHH`` (lower case), a
    backslash before a backslash, such a byte, or ``xHH`` (HH from 80) doubled; every other
    character as it is."""
    return _TO_STORE.sub(_escape, path)


def local(text: str) -> str:
    """The path :func:`stored` made ``text`` from (``os.fsencode`` of it gives the file
    name's bytes back)."""
    return _FROM_STORE.sub(_unescape, text)
