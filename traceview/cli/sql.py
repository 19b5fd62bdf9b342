"""``traceview sql``: PerfettoSQL query files on a trace."""

from __future__ import annotations

import sys

import click

from traceview.cli._options import load_trace, output_file, output_options, say, strict_option
from traceview.errors import QueryError


@click.command()
@click.argument("args", nargs=-1, type=click.Path(path_type=str))
@click.option("-e", "--execute", "sql_text", help="SQL text to run instead of a query file.")
@click.option("--list", "list_queries", is_flag=True, help="List the built-in query files.")
@click.option(
    "--engine",
    type=click.Choice(["auto", "embedded", "perfetto"]),
    default="auto",
    show_default=True,
    help="auto: Perfetto's trace processor when a binary is configured, else the embedded engine.",
)
@click.option(
    "--tp-bin",
    envvar="TRACEVIEW_TRACE_PROCESSOR",
    help="Perfetto trace_processor binary [env: TRACEVIEW_TRACE_PROCESSOR].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Interrupt the query after this many seconds.",
)
@strict_option
@output_options
def sql(
    args: tuple[str, ...],
    sql_text: str | None,
    list_queries: bool,
    engine: str,
    tp_bin: str | None,
    timeout: float,
    strict: bool,
    fmt: str | None,
    output: str | None,
    force: bool,
) -> None:
    """Run a PerfettoSQL query on a trace: traceview sql QUERY.sql TRACE, or
    traceview sql -e "select ..." TRACE. QUERY may also name a built-in query
    (traceview sql --list). The query is read-only; its last statement's rows are printed.
    """
    from traceview.loader.nsys import is_export_file
    from traceview.render.base import guess_format, write_output
    from traceview.sqlengine import (
        builtin_queries,
        needs_raw_args,
        query_header,
        resolve_query,
        run_embedded,
    )
    from traceview.sqlengine.perfetto_engine import run_perfetto

    if list_queries:
        for name, path in builtin_queries().items():
            first = query_header(path).splitlines()[0] if query_header(path) else ""
            click.echo(f"{name:<18} {first}")
        return
    if sql_text is not None:
        if len(args) != 1:
            raise click.UsageError("with -e SQL, give exactly one TRACE")
        query, trace_path = sql_text, args[0]
    else:
        if len(args) != 2:
            raise click.UsageError("give QUERY.sql TRACE (or -e SQL TRACE, or --list)")
        query, trace_path = args
    # -e is SQL text, whatever it reads like (a built-in query's name, one word)
    text, where = (sql_text, "<sql>") if sql_text is not None else resolve_query(query)
    if output is not None:  # the writer rule first: a folder is said to be one
        output = str(
            output_file(output, [trace_path, *([str(where)] if where else [])], force=force)
        )
    chosen = guess_format(output, fmt)
    if engine == "auto" and tp_bin and is_export_file(trace_path):
        engine = "embedded"  # an Nsight Systems export: trace_processor cannot read it
    if engine == "perfetto" or (engine == "auto" and tp_bin):
        if strict:
            raise click.UsageError(
                "--strict is traceview's loader's: Perfetto's trace processor reads the "
                "file itself (give --engine embedded)"
            )
        df = run_perfetto(trace_path, text, where, binary=tp_bin, timeout_s=timeout)
    else:
        trace = load_trace(trace_path, strict=strict, raw_args=needs_raw_args(text))
        df = run_embedded(trace, text, where, timeout_s=timeout)
    if df.width == 0 and output is None:
        raise QueryError(f"{query}: the last statement returned no columns")
    write_output(df, chosen, output, force=force, stdout=sys.stdout.buffer)
    if output is not None:
        say(f"wrote {output} ({df.height:,} row{'' if df.height == 1 else 's'})")
