"""The careful path for a block of JSON text the typed decoder refused: orjson, else
Python's json (which also reads NaN and Infinity), else one clear error that names the byte
where the text is wrong and the last complete event before it, the same whatever the block
size and the number of workers (docs/loading.md, "What happens to bad events")."""

from __future__ import annotations

import json
import re

import msgspec
import orjson

from traceview.errors import TraceFormatError
from traceview.loader.boundaries import error_byte


class CutInsideAnEvent(Exception):  # noqa: N818 - a signal to the loader, not an error
    """The text given as whole events ends inside one (a cut in a string or object)."""


def parse(
    doc: bytes,
    path: str,
    *,
    base: int | None,
    where: str,
    cut: bool = False,
    offset: int | None = None,
) -> object:
    """``doc`` parsed; ``cut``: the text may end inside an event (raises
    :class:`CutInsideAnEvent`).

    An error names the byte where it is, where ``offset`` (the offset of ``doc[0]`` in the
    trace's JSON text) is given, and, for events (``doc`` an array whose first event is
    number ``base``), the last complete event before it.

    Raises:
        TraceFormatError: ``doc`` is not JSON (one line naming ``path``).
    """
    try:
        return orjson.loads(doc)
    except orjson.JSONDecodeError:
        pass
    text = ""
    try:  # decoded here: json.loads would guess UTF-16 from a NUL near the start
        text = doc.decode("utf-8", "surrogatepass")
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if cut and isinstance(exc, json.JSONDecodeError) and ends_inside(exc, text):
            raise CutInsideAnEvent from None
        # the text before the error, decoded once: up to a JSON error's character, or up
        # to the first byte that is not UTF-8 (all of it UTF-8)
        if isinstance(exc, json.JSONDecodeError):
            head = text[: exc.pos]
            byte = _bytes_of(head)
        else:
            byte = exc.start
            head = doc[:byte].decode("utf-8", "surrogatepass")
        at = f" at byte {offset + byte}" if offset is not None else ""
        before = events_before(head, byte) if base is not None else None
        after = ""
        if before is not None and base is not None and base + before > 0:
            after = f" (after event #{base + before - 1})"
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else _not_utf8(doc, exc)
        raise TraceFormatError(path, f"invalid JSON in {where}{at}{after}: {msg}") from None


def refuse_bad_trailer(trailer: bytes, path: str, *, offset: int) -> None:
    """Refuse the keys after the events array (``trailer``, the text after its ``]``, at
    byte ``offset``) where they are not JSON (``"displayTimeUnit": ms}``, ``1}}``, a byte
    that is not UTF-8); text that is whole up to where it stops (``"displayTimeUnit": "m``,
    ``"a": 1.``, half a character) is a cut, not refused here.

    Raises:
        TraceFormatError: naming the byte of the fault.
    """
    prefix = b'{"traceEvents":[]'
    doc = prefix + trailer
    # msgspec tells a cut (its "truncated", or a number stopped at the last byte) from a
    # fault; what only Python's decoder reads (NaN, Infinity, a surrogate's raw bytes) is
    # stood in for by what msgspec reads
    readable = _SURROGATE.sub(b"\xef\xbf\xbd", _NON_FINITE.sub(b"null", doc))
    try:
        msgspec.json.decode(readable)
        return  # the keys read: what failed is before them
    except msgspec.DecodeError as exc:
        said, byte = str(exc), error_byte(exc)
        at_end = byte is not None and byte >= len(readable) and "trailing" not in said
        if "truncated" in said or at_end:
            return
    where = "invalid JSON after the events array at byte"
    try:
        text = doc.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        at = offset + exc.start - len(prefix)
        raise TraceFormatError(path, f"{where} {at}: {_not_utf8(doc, exc)}") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        at = offset + _bytes_of(text[: exc.pos]) - len(prefix)
        raise TraceFormatError(path, f"{where} {at}: {exc.msg}") from None


def _bytes_of(text: str) -> int:
    """The bytes ``text`` (decoded from UTF-8 with surrogatepass) was read from."""
    return len(text.encode("utf-8", "surrogatepass"))


def _not_utf8(doc: bytes, exc: UnicodeDecodeError) -> str:
    """What is wrong at a byte of ``doc`` that is not UTF-8, without the decoder's own
    positions (they count in ``doc``, not in the file)."""
    return f"not UTF-8 (a sequence from 0x{doc[exc.start]:02x}: {exc.reason})"


# what Python's decoder reads beyond JSON (not -NaN); null, which no number goes on from
_NON_FINITE = re.compile(rb"NaN|-?Infinity")
_SURROGATE = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")  # U+D800-U+DFFF as UTF-8 (3 bytes)


def parse_events(
    doc: bytes, path: str, *, base: int, cut: bool = False, offset: int | None = None
) -> list[object]:
    """:func:`parse` of ``doc``, ``[`` and events from number ``base`` on, and ``]``.

    Raises:
        TraceFormatError: ``doc`` is not JSON (naming the byte and the event before it).
        CutInsideAnEvent: ``cut`` and the text ends inside an event.
    """
    events = parse(doc, path, base=base, where="events", cut=cut, offset=offset)
    if not isinstance(events, list):  # "[" ... "]" parses to an array or not at all
        raise TraceFormatError(path, "invalid JSON in events: not an array")
    return events


def ends_inside(exc: json.JSONDecodeError, text: str) -> bool:
    """Whether Python's decoder failed because ``text`` (events given as whole) ends inside
    one: a string still open at its end, or the error at its last characters (the last two
    bytes are ASCII: a quote, a brace, the closing bracket)."""
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(text) - 2


# an error's event is counted only in this much text before it (a block is 6 MB; a text
# with no event boundary may be far larger)
_MAX_COUNTED_BYTES = 128 << 20
_WHITESPACE = " \t\n\r"


def events_before(text: str, byte: int) -> int | None:
    """How many values of the array whose ``text`` (``[`` then events, ``byte`` bytes of
    it) runs up to an error are complete before it: each read in turn by Python's JSON
    decoder (any value: an event, a null, an array), up to the first that does not read or
    is not followed by a comma."""
    if byte > _MAX_COUNTED_BYTES or not text.lstrip(_WHITESPACE).startswith("["):
        return None
    read = json.JSONDecoder().raw_decode
    at, count = text.index("[") + 1, 0
    while True:
        while at < len(text) and text[at] in _WHITESPACE:
            at += 1
        try:
            _, at = read(text, at)
        except ValueError:
            return count
        except RecursionError:  # nested deeper than Python's decoder reads: not counted
            return None
        if at == len(text) and text[at - 1] not in '}]"':
            return count  # a number or literal cut at the error may go on past it
        count += 1
        while at < len(text) and text[at] in _WHITESPACE:
            at += 1
        if at >= len(text) or text[at] != ",":
            return count
        at += 1
