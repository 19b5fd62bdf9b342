"""Trace text is data: every string read from a trace (kernel, GPU, category and annotation
names, paths, error details) is neutralised for where it is shown, by one function per
destination. Nothing a trace holds may drive the terminal, a chart's text engine, a
markdown table or an HTML page.

:func:`terminal`, and every function built on it, also names a URL without its credentials
(:func:`traceview.redact.scrub`: no userinfo, no signature or token in its query), whatever
the text that holds it.

- :func:`terminal`: C0/C1 control characters (ESC sequences, OSC titles, bells), the
  bidirectional overrides and a file name's bytes that are not UTF-8 (lone surrogates, as
  Python reads them) are shown as visible escapes (``\\x1b``, ``\\u202e``, ``\\xff``); print the
  result as plain text (no rich markup is read from it; the terminal renderers print with
  markup off).
- :func:`chart`: the same visible escapes; the charts' style turns matplotlib's mathtext off
  (``text.parse_math``), so ``$`` and ``\\frac`` are shown as typed.
- :func:`markdown_text` and :func:`markdown_code`: a markdown table cell. Pipes are escaped
  (GitHub's tables split on them, even inside code spans), the characters that mean
  something in a cell are backslash-escaped in text, and a code span is fenced with more
  backticks than the name holds; a line break is shown as ``\\x0a``, as :func:`line` shows
  it.
- :func:`html_text` and :func:`json_for_html`: HTML text with ``&<>"'`` escaped, and JSON
  to embed in a ``<script type="application/json">`` element with ``<``, ``>`` and ``&`` as
  ``\\u003c`` etc., so no ``</script``, ``<!--`` or ``<script`` can end or confuse the
  element, and ``JSON.parse`` of the element's text gives the document back exactly.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping

import orjson

# one line and plain terminal text are defined beside the URL redaction (the loader uses them)
from traceview.redact import line as line
from traceview.redact import terminal as terminal


def chart(text: object) -> str:
    """``text`` for a matplotlib title, label or legend: controls shown as visible escapes
    (the charts' style reads no mathtext, so ``$`` needs no escape)."""
    return terminal(text)


# the characters that mean something inside a table cell: escapes, code, emphasis,
# strikethrough, links, HTML, entities and the cell separator
_MD_PUNCT = re.compile(r"([\\`*_~\[\]<>&|])")


def markdown_text(text: object) -> str:
    """``text`` for a markdown table cell, shown as the characters it is: each character
    that means something inside a cell backslash-escaped, a line break as ``\\x0a``
    (:func:`line`)."""
    return _MD_PUNCT.sub(r"\\\1", line(text))


def markdown_code(text: object, *, cell: bool = True) -> str:
    """``text`` as a code span: fenced with one backtick more than its longest run of
    backticks. In a table ``cell``, pipes are escaped (GitHub splits cells on them even
    inside code spans, and reads ``\\|`` there as a pipe); outside one they are left."""
    body = line(text)
    if cell:
        body = body.replace("|", "\\|")
    runs = re.findall(r"`+", body)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def html_text(text: object) -> str:
    """``text`` for HTML element content or a quoted attribute: ``&<>"'`` escaped, controls
    shown as visible escapes (most are not allowed in HTML at all)."""
    return html.escape(terminal(text), quote=True)


def json_for_html(doc: Mapping[str, object]) -> str:
    """``doc`` as JSON for a ``<script type="application/json">`` element: ``<``, ``>`` and
    ``&`` written as JSON unicode escapes, so nothing in a string can end the element or put
    the HTML parser into a script-escape state, and the text still parses to ``doc``."""
    text = orjson.dumps(doc).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
