"""The ``traceview`` command: a click group over the library; errors become one line."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import IO, Any

import click

from traceview import environ
from traceview.errors import EXIT_BROKEN_PIPE, EXIT_OK, TraceviewError, TraceviewWarning
from traceview.render.safe import line


class _UsageLine(click.UsageError):
    """A usage error (an unknown command or option, a bad or missing value) as one line,
    ``Error: <click's message, its "Did you mean …?" kept> (see 'traceview CMD --help')``,
    exit 2, instead of click's usage line, hint line and error line."""

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(_message(error), error.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        where = self.ctx.command_path if self.ctx is not None else "traceview"
        text = f"Error: {line(self.format_message())} (see '{line(where)} --help')"
        click.echo(text, file=file, err=file is None)


def _message(error: click.UsageError) -> str:
    """click's message; a bad value named as traceview's own checks name one
    (``--device: 'abc' is not a valid integer``, not ``Invalid value for '--device': …``)."""
    if (
        isinstance(error, click.BadParameter)
        and not isinstance(error, click.MissingParameter)  # "Missing option '-o' / …"
        and error.param is not None
    ):
        param = error.param
        name = (
            max(param.opts, key=len)
            if isinstance(param, click.Option)
            else param.human_readable_name
        )
        return f"{name}: {error.message.rstrip('.')}"
    return error.format_message()


@contextlib.contextmanager
def _usage_in_one_line() -> Iterator[None]:
    """Every click usage error raised inside as a :class:`_UsageLine`."""
    try:
        yield
    except (_UsageLine, click.exceptions.NoArgsIsHelpError):
        raise  # already one line; or the help, asked for by giving no arguments
    except click.UsageError as exc:
        raise _UsageLine(exc) from exc


class _Group(click.Group):
    """Turns a TraceviewError into ``Error: <message>`` on stderr and its exit code, and a
    click usage error, of every command, into one such line (:class:`_UsageLine`)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: object,
    ) -> click.Context:
        with _usage_in_one_line():  # the group's own options
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _usage_in_one_line():  # the command's name, its options, its own checks
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> object:
        from traceview.cli._options import forget_warnings, log_as_warnings, show_deprecations

        forget_warnings()
        # --storage-option, --workers and --no-cache set these for one command (its worker
        # processes see them)
        scoped = (environ.STORAGE_OPTIONS, environ.CACHE, environ.WORKERS)
        given = {name: os.environ.get(name) for name in scoped}
        try:
            with warnings.catch_warnings(), log_as_warnings():
                # commands print trace.meta.warnings themselves, once, in a summary line
                warnings.simplefilter("ignore", TraceviewWarning)
                show_deprecations()
                result = self._invoke_and_publish(ctx)
                sys.stdout.flush()  # a closed pipe is met here, not in click's own net (exit 1)
                return result
        except TraceviewError as exc:
            if ctx.params.get("debug"):
                raise
            prefix = "" if exc.exit_code == EXIT_OK else "Error: "
            click.echo(f"{prefix}{line(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:  # the reader stopped early (``| head``): end quietly
            _drop_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
        except OSError as exc:  # what the system refused a write that has no message of ours
            if ctx.params.get("debug"):
                raise
            _drop_stdout()
            where = f"{os.fsdecode(exc.filename)}: " if exc.filename else ""
            refused = TraceviewError(f"{where}{exc.strerror or exc}")  # scrubbed, as all are
            click.echo(f"Error: {line(refused)}", err=True)
            ctx.exit(refused.exit_code)
        finally:
            for name, value in given.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def _invoke_and_publish(self, ctx: click.Context) -> object:
        """The command, then its outputs bound for URLs uploaded if it succeeded."""
        from traceview.cli._options import publish_outputs

        try:
            result = super().invoke(ctx)
        except click.exceptions.Exit as done:
            publish_outputs(done.exit_code == 0)
            raise
        except BaseException:
            publish_outputs(False)
            raise
        publish_outputs(True)
        return result


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="traceview")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Neither read nor write the loaded-trace cache (also TRACEVIEW_CACHE=0).",
)
def cli(debug: bool, no_cache: bool) -> None:
    """Analyse GPU profiler traces of LLM inference engines.

    Exit codes: 0 ok, 1 a check failed, 2 bad input or usage, 3 missing optional dependency,
    141 the reader of the output stopped early.
    """
    if no_cache:
        # the switch the cache reads, so the run and scan workers see it too; for this
        # command only (_Group.invoke restores it)
        os.environ[environ.CACHE] = "0"


def _register() -> None:
    from traceview.cli import (
        annotate,
        cache,
        capture,
        compare,
        cost,
        heartbeat,
        info,
        report,
        scan,
        sql,
        summarize,
    )

    readers = (
        info.info,
        summarize.summarize,
        summarize.steps,
        heartbeat.heartbeat,
        heartbeat.gaps,
        sql.sql,
        compare.diff_command,
        compare.check_command,
        cost.cost,
        scan.scan,
        annotate.annotate,
        report.report,
    )
    for command in readers:  # every command that reads traces reads them at URLs too
        command.params.append(_storage_option())
        command.params.append(_workers_option())
    for command in (*readers, cache.cache, capture.capture, capture.itl, capture.demo):
        cli.add_command(command)


def _storage_option() -> click.Option:
    """``--storage-option KEY=VALUE``: passed to the object store's driver (fsspec's
    s3fs, gcsfs, adlfs) for every URL the command reads or writes, and to its workers."""

    def keep(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
        import json

        from traceview.loader.remote import option_value, storage_options
        from traceview.redact import scrub

        if not value:
            return
        pairs = storage_options()
        for item in value:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise click.BadParameter(f"{scrub(item)!r}: expected KEY=VALUE", ctx, param)
            pairs[key.strip()] = option_value(text)
        os.environ[environ.STORAGE_OPTIONS] = json.dumps(pairs)  # worker processes see it too

    return click.Option(
        ["--storage-option"],
        multiple=True,
        metavar="KEY=VALUE",
        expose_value=False,
        callback=keep,
        help="Passed to the object store's driver for URLs (e.g. anon=true, "
        "requester_pays=true, profile=NAME); repeatable.",
    )


def _workers_option() -> click.Option:
    """``--workers N``: the processes each trace's JSON is decoded on (``TRACEVIEW_WORKERS``,
    set for this command, so a run's or scan's worker processes see it too)."""

    def keep(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
        if value is None:
            return
        if value < 1:
            raise click.BadParameter(f"{value} is not a count of processes >= 1", ctx, param)
        os.environ[environ.WORKERS] = str(value)

    return click.Option(
        ["--workers"],
        type=int,
        metavar="N",
        expose_value=False,
        callback=keep,
        help="Processes that decode each JSON trace (default: TRACEVIEW_WORKERS, else every "
        "core up to 8; with --jobs, the cores shared among the jobs).",
    )


_register()


def _drop_stdout() -> None:
    """Send what is left for standard output nowhere, so that the interpreter's last flush
    of a closed pipe or a full disk prints no second error (Python's advice for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        cli.main(args=argv, prog_name="traceview")
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
