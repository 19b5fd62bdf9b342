"""Bounded strings: the decompressed JSON text with every string longer than a cap cut.

A trace is data from anywhere, and one string can be as large as the file: a kernel name of
a gigabyte compresses to megabytes. :class:`CappedText` sits between the decompressor and
the JSON reader and keeps the first :data:`STRING_CAP` bytes of such a string, followed by
``…`` (U+2026), so nothing downstream (the header scan, the block cutter, the decoders,
polars) ever holds more than that of one string. It counts the cuts for one warning.

The text it yields is still valid JSON: a cut never splits an escape sequence
(``\\"``, ``\\u00e9``, a surrogate pair) or a UTF-8 character, and every block it yields
ends at such a boundary too (a few bytes are held back for the next read when needed).

Cost on ordinary traces (no string near the cap): one ``count_nonzero`` over each block for
the quote parity and a ``find`` per 32 KiB; the exact, slower path runs only for blocks
that hold a backslash or a quote-free stretch longer than the cap allows.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

STRING_CAP = 64 << 10  # bytes of one JSON string kept; the rest is cut
MARK = "…".encode()
_QUOTE, _BACKSLASH = 0x22, 0x5C


def _utf8_safe(buf: bytes | bytearray, lo: int, end: int) -> int:
    """``end``, moved back to the start of a UTF-8 character it would split."""
    i = end - 1
    while i >= lo and i > end - 4 and (buf[i] & 0xC0) == 0x80:
        i -= 1  # continuation bytes
    if i < lo or buf[i] < 0x80:
        return end
    lead = buf[i]
    need = 2 if lead >= 0xC0 and lead < 0xE0 else 3 if lead < 0xF0 else 4
    return end if i + need <= end else i


def _escape_start(buf: bytes | bytearray, lo: int, j: int) -> bool:
    """Whether the character at ``j`` is not itself escaped: the run of backslashes right
    before it, counted back to ``lo`` (a position not inside an escape), pairs up. A
    backslash there starts an escape; a quote there is a string boundary."""
    i = j
    while i > lo and buf[i - 1] == _BACKSLASH:
        i -= 1
    return (j - i) % 2 == 0


def _is_high_surrogate(buf: bytes | bytearray, j: int) -> bool:
    """Whether ``\\uXXXX`` at ``j`` is a high surrogate (D800-DBFF), the first of a pair."""
    return buf[j + 2] in b"dD" and buf[j + 3] in b"89abAB"


def safe_end(buf: bytes | bytearray, lo: int, end: int) -> int:
    """The largest position <= ``end`` where string content in ``buf[lo:end]`` can be cut:
    not inside an escape sequence, not after half a surrogate pair, not inside a UTF-8
    character. ``lo`` is a token boundary (a string's start, or a block's)."""
    j = buf.rfind(b"\\", max(lo, end - 6), end)
    # the last backslash: when it is the second of an escaped backslash, that escape ends by
    # end (no escape holds a backslash inside it), so only an escape start needs a look
    if j >= 0 and _escape_start(buf, lo, j):
        size = 6 if j + 1 < len(buf) and buf[j + 1] == ord("u") else 2
        if j + size > end:  # the escape would be split: cut before it
            return _after_high_surrogate(buf, lo, j)
    end = _after_high_surrogate(buf, lo, end)
    return _utf8_safe(buf, lo, end)


def _after_high_surrogate(buf: bytes | bytearray, lo: int, end: int) -> int:
    """``end``, or 6 bytes earlier when a high surrogate escape ends there (cutting between
    the halves of a pair would leave a lone surrogate, which decoders refuse)."""
    j = end - 6
    if (
        j >= lo
        and buf[j] == _BACKSLASH
        and buf[j + 1] == ord("u")
        and _escape_start(buf, lo, j)
        and _is_high_surrogate(buf, j)
    ):
        return j
    return end


class CappedText:
    """A readable text stream: ``stream``'s JSON text with strings cut at ``cap`` bytes."""

    def __init__(self, stream: BinaryIO, cap: int = STRING_CAP, *, prefix: bytes = b"") -> None:
        self._stream = stream
        self._cap = cap
        self._segment = max(1, cap // 2)  # a quote-free stretch > 2 segments covers one
        self._prefix = prefix  # raw text read from ``stream`` before
        self._held = b""  # the tail of the last block, held back to end at a boundary
        self._in_string = False
        self._run = 0  # content bytes of the open string yielded so far
        self._cutting = False  # the open string was cut: drop until its closing quote
        self._eof = False
        self.cuts = 0

    def __getattr__(self, name: str) -> object:  # cut_short and the like
        return getattr(self._stream, name)

    def read(self, size: int = -1) -> bytes:
        """About ``size`` bytes of the filtered text (all of it for -1); b"" at the end.
        The prefix is filtered as a block of its own, so that no block is larger than the
        reader's (the decoder's working set grows with the block)."""
        while True:
            if self._prefix:
                new, self._prefix = self._prefix, b""
            elif not self._eof:
                new = self._stream.read(size)
                if not new:
                    self._eof = True
            else:
                new = b""
            buf = self._held + new if self._held else new
            self._held = b""
            if not buf:
                return b""
            out = self._block(buf, final=self._eof)
            if out or self._eof:
                return out

    # - one block -

    def _block(self, buf: bytes, *, final: bool) -> bytes:
        if not self._cutting and self._fast(buf):
            return self._hold(buf, buf, final)
        return self._hold(self._exact(buf), buf, final)

    def _fast(self, buf: bytes) -> bool:
        """Update the state and return True when no string in ``buf`` can reach the cap
        and ``buf`` has no backslash (so every quote is a string boundary)."""
        if buf.find(b"\\") >= 0:
            return False
        n = len(buf)
        first, last = buf.find(b'"'), buf.rfind(b'"')
        if first < 0:
            if self._in_string and self._run + n > self._cap:
                return False
            if self._in_string:
                self._run += n
            return True
        if self._in_string and self._run + first > self._cap:
            return False
        for start in range(first, last, self._segment):  # no quote-free stretch of >= 2 segments
            if buf.find(b'"', start, min(start + self._segment, last + 1)) < 0:
                return False
        quotes = int(np.count_nonzero(np.frombuffer(buf, np.uint8) == _QUOTE))
        in_string = self._in_string != (quotes % 2 == 1)
        if in_string and n - last - 1 > self._cap:
            return False
        self._in_string = in_string
        self._run = n - last - 1 if in_string else 0
        return True

    def _exact(self, buf: bytes) -> bytes:
        """``buf`` with long strings cut, walking its string boundaries exactly."""
        arr = np.frombuffer(buf, np.uint8)
        quotes = np.flatnonzero(arr == _QUOTE)
        behind = quotes[(quotes > 0) & (arr[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
        if behind.size:  # drop escaped quotes: an odd run of backslashes before them
            escaped = [q for q in behind.tolist() if not _escape_start(buf, 0, q)]
            quotes = np.setdiff1d(quotes, np.asarray(escaped, dtype=quotes.dtype))
        out: list[bytes] = []
        pos = 0  # bytes of buf before pos are handled
        marks = quotes.tolist()
        k = 0
        if self._in_string:  # a string carried in from the last block
            close = marks[0] if marks else None
            stop = len(buf) if close is None else close
            out.append(self._content(buf, 0, stop, closed=close is not None))
            if close is None:
                return b"".join(out)
            out.append(b'"')
            pos, k = close + 1, 1
            self._in_string = False
        # the rest: pairs of (open, close) quotes; only a long one needs work
        opens = np.asarray(marks[k::2], dtype=np.int64)
        closes = np.asarray(marks[k + 1 :: 2], dtype=np.int64)
        paired = closes.size
        lengths = closes - opens[:paired] - 1
        for i in np.flatnonzero(lengths > self._cap).tolist():
            o, c = int(opens[i]), int(closes[i])
            out.append(buf[pos : o + 1])
            keep = safe_end(buf, o + 1, o + 1 + self._cap)
            out.append(buf[o + 1 : keep] + MARK + b'"')
            self.cuts += 1
            pos = c + 1
        if opens.size > paired:  # a string left open at the end of the block
            o = int(opens[-1])
            out.append(buf[pos : o + 1])
            self._in_string, self._run, self._cutting = True, 0, False
            out.append(self._content(buf, o + 1, len(buf), closed=False))
        else:
            out.append(buf[pos:])
        return b"".join(out)

    def _content(self, buf: bytes, lo: int, stop: int, *, closed: bool) -> bytes:
        """The open string's content in ``buf[lo:stop]``, cut when it passes the cap."""
        if self._cutting:
            part = b""
        elif self._run + (stop - lo) <= self._cap:
            part = buf[lo:stop]
            self._run += stop - lo
        else:
            keep = safe_end(buf, lo, lo + self._cap - self._run)
            part = buf[lo:keep] + MARK
            self._cutting = True
            self.cuts += 1
        if closed:
            self._run, self._cutting = 0, False
        return part

    def _hold(self, out: bytes, raw: bytes, final: bool) -> bytes:
        """Hold back the end of ``out`` when it stops inside a string at a point where a
        cut could not be made (inside an escape or a UTF-8 character)."""
        if final or not self._in_string:
            return out
        if self._cutting:  # dropping: only an escape that starts at the very end matters
            if raw.endswith(b"\\") and _escape_start(raw, 0, len(raw) - 1):
                self._held = b"\\"
            return out
        lo = max(0, len(out) - self._run)  # the string's start, or the block's
        end = safe_end(out, lo, len(out))
        if end == len(out):
            return out
        self._held = out[end:]
        self._run -= len(out) - end
        return out[:end]
