"""Where events and the events array end in raw trace JSON text: the byte-level searches the
streaming reader (:mod:`traceview.load.json`) cuts blocks and finds a truncation with."""

from __future__ import annotations

import json
import re

import msgspec
import orjson

from traceview.load.columns import DECODER

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
    try:  # Python's decoder tolerates NaN and stops at the array's end
        s = doc.decode("utf-8", errors="replace")
        _, end = json.JSONDecoder().raw_decode(s)
        return len(s[:end].encode("utf-8")) - 1
    except ValueError:
        return None


def error_byte(exc: Exception) -> int | None:
    """msgspec's ``(byte N)``: N is one past the offending byte's offset."""
    match = _BYTE_POS.search(str(exc))
    return int(match.group(1)) if match else None


def ends_inside(exc: json.JSONDecodeError, doc: bytes) -> bool:
    """Whether Python's decoder failed because ``doc`` (events given as whole) ends inside
    one: a string still open at its end, or the error at its last bytes."""
    if exc.msg.startswith("Unterminated string"):
        return True
    byte = python_error_byte(exc, doc)
    return byte is not None and byte >= len(doc) - 2


def python_error_byte(exc: json.JSONDecodeError | UnicodeDecodeError, doc: bytes) -> int | None:
    """The offset in ``doc`` of the byte Python's decoder stopped at, ``doc`` having been
    decoded as UTF-8 (surrogatepass): a JSON error's ``pos`` counts characters."""
    if isinstance(exc, UnicodeDecodeError):
        return exc.start
    try:
        text = doc.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return len(text[: exc.pos].encode("utf-8", "surrogatepass"))


_MAX_TRIES = 64  # event ends tried before an error's event is left unnamed


def events_before(doc: bytes, byte: int) -> int | None:
    """How many events of the array ``doc`` (``[`` then events) end before byte ``byte``:
    the last ``}`` before it after which the array decodes (one inside a string or a nested
    object cannot), None where none of the last few does."""
    if not doc.lstrip().startswith(b"["):
        return None
    end = byte
    for _ in range(_MAX_TRIES):
        close = doc.rfind(b"}", 0, end)
        if close < 0:
            return 0
        head = doc[: close + 1] + b"]"
        try:
            events = orjson.loads(head)
        except orjson.JSONDecodeError:
            try:
                events = json.loads(head.decode("utf-8", "surrogatepass"))
            except ValueError:
                end = close
                continue
        return len(events) if isinstance(events, list) else None
    return None
