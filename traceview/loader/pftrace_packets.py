"""A Perfetto ``Trace`` protobuf, packet by packet: each ``packet`` field's length read as
the varint the file states, its bytes read as far as the file goes (never allocated from
the claim), and parsed as a ``TracePacket`` with the perfetto package's classes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

from traceview.errors import MissingDependencyError, TraceFormatError

Message = Any  # a protobuf message of Perfetto's (its generated classes carry no types)


def _protos() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError:  # pragma: no cover - perfetto is a core dependency
        raise MissingDependencyError(
            "reading Perfetto traces needs the perfetto package: pip install perfetto"
        ) from None
    return perfetto_trace_pb2


def varint(stream: BinaryIO) -> int | None:
    shift = result = 0
    while True:
        b = stream.read(1)
        if not b:
            return None if shift == 0 else -1
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            return -1


# the most one packet may claim: Perfetto's own readers take no message over 64 MiB
# (protozero's RingBufferMessageReader::kMaxMsgSize), and a packet that large is read at
# most once into memory, so a small compressed file cannot make a large allocation
MAX_PACKET = 64 << 20
READ_CHUNK = 1 << 20


def read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    """The next ``size`` bytes, None where the stream ends first. Read a chunk at a time:
    ``size`` is the file's claim, so the memory taken follows the bytes the file holds,
    never the number it states."""
    if size <= READ_CHUNK:
        data = stream.read(size)
        return data if len(data) == size else None
    parts, have = [], 0
    while have < size:
        part = stream.read(min(READ_CHUNK, size - have))
        if not part:
            return None
        parts.append(part)
        have += len(part)
    return b"".join(parts)


def packets(stream: BinaryIO, path: str) -> Iterator[Message]:
    """Yield TracePacket messages one at a time from a Trace protobuf stream."""
    pb2 = _protos()
    index = 0
    while True:
        tag = varint(stream)
        if tag is None:
            return
        size = varint(stream)
        if tag != 0x0A or size is None or size < 0:
            raise TraceFormatError(path, f"not a Perfetto trace: bad field at packet #{index}")
        if size >= MAX_PACKET:
            raise TraceFormatError(
                path,
                f"not a Perfetto trace: packet #{index} claims {size:,} bytes, more than "
                "Perfetto's readers take in one packet (64 MiB)",
            )
        data = read_exactly(stream, size)
        if data is None:
            raise TraceFormatError(path, f"truncated Perfetto trace in packet #{index}")
        packet = pb2.TracePacket()
        try:
            packet.ParseFromString(data)
        except Exception:
            raise TraceFormatError(path, f"packet #{index} is not a valid TracePacket") from None
        yield packet
        index += 1


# the debug annotations read as ids, each into a column of its own
ID_KEYS = ("device", "stream", "correlation", "External id")
_INT64 = range(-(2**63), 2**63)


def ident(value: object) -> int | None:
    """An id annotation's value (``device``, ``stream``, ``correlation``) as the JSON reader
    reads it: an int, an integral double or a numeric string; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def fits_int64(value: object) -> bool:
    """Whether an int fits Int64 (floats and strings are judged where they are read): a
    packet's time is a uint64, and an annotation may be one."""
    return not isinstance(value, int) or isinstance(value, bool) or value in _INT64


__all__ = [
    "ID_KEYS",
    "MAX_PACKET",
    "Message",
    "fits_int64",
    "ident",
    "packets",
    "read_exactly",
    "varint",
]
