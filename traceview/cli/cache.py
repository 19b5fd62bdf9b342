"""``traceview cache info|clear``: the loaded-trace cache."""

from __future__ import annotations

import os

import click
import orjson

from traceview import environ
from traceview.cli._options import json_option, say
from traceview.errors import TraceviewError


@click.group()
def cache() -> None:
    """The cache of loaded traces: a trace opened again, unchanged, reads its frames from
    here instead of parsing its JSON (off with --no-cache or TRACEVIEW_CACHE=0)."""


@cache.command()
@json_option
def info(as_json: bool) -> None:
    """Where the cache is, its entries and size, and its bound."""
    from traceview.loader import cache as trace_cache

    doc = trace_cache.info()
    if as_json:
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return
    said = os.environ.get(environ.CACHE, "").strip()
    state = "on" if doc["enabled"] else f"off ({environ.CACHE}={said})"
    click.echo(f"cache      {doc['dir']} ({state})")
    click.echo(f"entries    {doc['entries']:,}")
    click.echo(f"size       {doc['bytes'] / 2**20:,.1f} MiB of {doc['max_bytes'] / 2**30:,.1f} GiB")


@cache.command()
def clear() -> None:
    """Remove every cached trace."""
    from traceview.loader import cache as trace_cache

    n, failed = trace_cache.clear()
    say(f"removed {n} cached trace{'s' if n != 1 else ''} from {trace_cache.cache_dir()}")
    if failed:
        raise TraceviewError(
            f"{trace_cache.cache_dir()}: could not remove {len(failed)} "
            f"entr{'ies' if len(failed) != 1 else 'y'} (is the folder writable?): "
            + ", ".join(failed[:3])
            + (" …" if len(failed) > 3 else "")
        )
