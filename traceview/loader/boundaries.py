"""Where events and the events array end in raw trace JSON text: the byte-level searches the
streaming reader (:mod:`traceview.loader.json`) cuts blocks and finds a truncation with."""

from __future__ import annotations

import json
import re

import msgspec

from traceview.loader.columns import DECODER

_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")


def last_cut(buf: bytes) -> int:
    """Offset just after the last ``}`` that is followed by ``, {`` (a likely event boundary).

    The candidate is only likely: the decoder validates it (a cut inside a string or a
    nested object cannot decode, since raw JSON strings cannot hold an unescaped quote).
    """
    end = len(buf)
    while True:
        pos = buf.rfind(b"}", 0, end)
        if pos < 0:
            return -1
        if _CUT.match(buf, pos):
            return pos + 1
        end = pos


def array_end(text: bytes) -> int | None:
    """Offset in ``text`` just past the ``]`` that closes the events array (None: no ``]``).

    ``text`` is what follows the array's opening ``[``.
    """
    doc = b"[" + text
    try:
        DECODER.decode(doc)
        return len(text)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        pos = error_byte(exc)
        if pos is not None and "trailing characters" in str(exc):
            return pos - 2
    try:  # Python's decoder tolerates NaN and stops at the array's end; a byte that is
        # not UTF-8 stays one character, so the offset counts the file's bytes
        s = doc.decode("utf-8", errors="surrogateescape")
        _, end = json.JSONDecoder().raw_decode(s)
        return len(s[:end].encode("utf-8", errors="surrogateescape")) - 1
    except ValueError:
        return None


def error_byte(exc: Exception) -> int | None:
    """msgspec's ``(byte N)``: N is one past the offending byte's offset."""
    match = _BYTE_POS.search(str(exc))
    return int(match.group(1)) if match else None
