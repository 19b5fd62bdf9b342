"""load/strings.CappedText: strings longer than the cap are cut, the text stays valid JSON,
and nothing else changes, whatever the block sizes and wherever escapes and multi-byte
characters fall."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceview.loader.strings import MARK, CappedText

MARK_TEXT = MARK.decode()


class Chunks(io.RawIOBase):
    """``data`` read back in the given chunk sizes (cycled)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.pos, self.i = data, sizes, 0, 0

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        n = self.sizes[self.i % len(self.sizes)]
        self.i += 1
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


def _through(text: bytes, cap: int, sizes: list[int]) -> tuple[bytes, int]:
    capped = CappedText(Chunks(text, sizes), cap=cap)  # type: ignore[arg-type]
    out = []
    while chunk := capped.read(sizes[0]):
        out.append(chunk)
    return b"".join(out), capped.cuts


TEXT = st.text(alphabet=st.sampled_from(list('ab"\\/\n\té€😀\u2028') + ["x"] * 4), max_size=80)
VALUES = st.recursive(
    st.none() | st.integers(-1000, 1000) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    doc=VALUES,
    cap=st.integers(4, 40),
    sizes=st.lists(st.integers(1, 64), min_size=1, max_size=5),
    ascii_only=st.booleans(),
)
def test_long_strings_are_cut_and_the_rest_is_kept(
    doc: object, cap: int, sizes: list[int], ascii_only: bool
) -> None:
    text = json.dumps(doc, ensure_ascii=ascii_only).encode()
    out, cuts = _through(text, cap, sizes)
    # pairs, not dicts: two keys cut to the same prefix stay two
    got = json.loads(out, object_pairs_hook=Pairs)
    # a string counts by its text in the file: with ensure_ascii, its escapes count
    assert _check_file(json.loads(text, object_pairs_hook=Pairs), got, cap, ascii_only) == cuts


class Pairs(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs."""


def _check_file(original: object, got: object, cap: int, ascii_only: bool) -> int:
    if isinstance(original, str):
        size = len(json.dumps(original, ensure_ascii=ascii_only).encode()) - 2
        if size <= cap:
            assert got == original
            return 0
        assert isinstance(got, str) and got.endswith(MARK_TEXT)
        kept = got[: -len(MARK_TEXT)]
        assert original.startswith(kept)
        assert len(json.dumps(kept, ensure_ascii=ascii_only).encode()) - 2 <= cap
        return 1
    if isinstance(original, Pairs):
        assert isinstance(got, Pairs) and len(got) == len(original)
        return sum(
            _check_file(k, g, cap, ascii_only) + _check_file(v, w, cap, ascii_only)
            for (k, v), (g, w) in zip(original, got, strict=True)
        )
    if isinstance(original, list):
        assert isinstance(got, list) and len(got) == len(original)
        return sum(_check_file(a, b, cap, ascii_only) for a, b in zip(original, got, strict=True))
    assert got == original
    return 0


def test_a_text_without_long_strings_passes_unchanged() -> None:
    text = json.dumps({"traceEvents": [{"name": "k" * 30, "ts": i} for i in range(500)]})
    out, cuts = _through(text.encode(), 64, [7, 100, 1000])
    assert out == text.encode() and cuts == 0


def test_a_gigantic_string_is_read_in_bounded_pieces() -> None:
    body = b"x}, {" * 400_000  # 2 MB of one string that looks like event boundaries
    text = b'{"traceEvents": [{"name": "' + body + b'", "ts": 1}]}'
    out, cuts = _through(text, 1024, [65536])
    doc = json.loads(out)
    assert cuts == 1 and len(doc["traceEvents"][0]["name"]) == 1024 + 1
    assert doc["traceEvents"][0]["ts"] == 1
