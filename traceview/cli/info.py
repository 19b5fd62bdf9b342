"""``traceview info TRACE``: what the trace holds."""

from __future__ import annotations

import click
import orjson

from traceview.cli._options import json_option, load_trace, strict_option, trace_argument


@click.command()
@trace_argument
@json_option
@strict_option
def info(trace: str, as_json: bool, strict: bool) -> None:
    """Show what TRACE holds: events by category, kernels, devices, streams, span, GPU."""
    from traceview.analysis.documents.info import info as info_doc
    from traceview.render.table import render_info

    doc = info_doc(load_trace(trace, strict=strict))
    if as_json:
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        render_info(doc)
