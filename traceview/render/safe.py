"""Trace text is data: every string read from a trace (kernel, GPU, category and annotation
names, paths, error details) is neutralised for where it is shown, by one function per
destination. Nothing a trace holds may drive the terminal, a chart's text engine, a
markdown table or an HTML page.

- :func:`terminal`: C0/C1 control characters (ESC sequences, OSC titles, bells) and the
  bidirectional overrides are shown as visible escapes (``\\x1b``, ``\\u202e``); print the
  result as plain text (no rich markup is read from it; the terminal renderers print with
  markup off).
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, and the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069) and marks that can reorder what a reader sees
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: object) -> str:
    """``text`` with every control character and bidi override shown as a visible escape:
    safe to print to a terminal as plain text (not as rich markup)."""
    return _UNSAFE.sub(_visible, str(text))
