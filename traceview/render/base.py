"""Renderers for tables: one per output format, chosen by name or by the output suffix."""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Protocol

import polars as pl

from traceview._io import atomic_write, check_output
from traceview.errors import TraceviewError

__all__ = ["RENDERERS", "atomic_write", "guess_format", "write_output"]


class Renderer(Protocol):
    extension: str
    binary: bool

    def render(self, df: pl.DataFrame, out: IO[bytes]) -> None: ...


class CsvRenderer:
    extension, binary = ".csv", False

    def render(self, df: pl.DataFrame, out: IO[bytes]) -> None:
        df.write_csv(out)


class JsonRenderer:
    extension, binary = ".json", False

    def render(self, df: pl.DataFrame, out: IO[bytes]) -> None:
        out.write(df.write_json().encode() + b"\n")


class ParquetRenderer:
    extension, binary = ".parquet", True

    def render(self, df: pl.DataFrame, out: IO[bytes]) -> None:
        df.write_parquet(out)


class TableRenderer:
    """A plain text table (rich, no colour), as wide as its columns need. For a terminal,
    ``max_cell`` cuts longer text with ``…`` and ``width`` keeps the leading columns that
    fit, naming the rest below the table."""

    extension, binary = ".txt", False

    def __init__(self, max_cell: int | None = None, width: int | None = None) -> None:
        self.max_cell, self.width = max_cell, width

    def _fit(self, df: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
        """The leading columns whose widths (header or widest cell, plus padding) fit."""
        if self.width is None:
            return df, []
        used, keep = 0, list[str]()
        for name in df.columns:
            text = df[name].cast(pl.String, strict=False).fill_null("")
            widest = max([len(name), *(min(len(x), self.max_cell or len(x)) for x in text)])
            if keep and used + widest + 2 > self.width:
                break
            used += widest + 2
            keep.append(name)
        return df.select(keep), [c for c in df.columns if c not in keep]

    def render(self, df: pl.DataFrame, out: IO[bytes]) -> None:
        from rich import box
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        from traceview.render.safe import line

        cut = self.max_cell

        def cell(v: object) -> Text:  # trace text is data: no markup, no control bytes
            text = "" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)
            if cut is not None and len(text) > cut:
                text = text[: cut - 1] + "…"
            return Text(line(text))  # one line: a line break would read as another row

        df, left_out = self._fit(df)

        table = Table(box=box.SIMPLE_HEAD)
        for name, dtype in df.schema.items():
            table.add_column(
                Text(line(name)),
                justify="right" if dtype.is_numeric() else "left",
                no_wrap=True,
            )
        for row in df.iter_rows():
            table.add_row(*(cell(v) for v in row))
        text = io.StringIO()
        Console(file=text, width=100_000, color_system=None, highlight=False).print(table)
        lines = [row.rstrip() for row in text.getvalue().splitlines()]
        if left_out:
            lines.append(
                f"{len(left_out)} more column(s) not shown: {', '.join(left_out)} "
                "(-o FILE or --format csv keeps every column)"
            )
        out.write("\n".join(lines).encode() + b"\n")


RENDERERS: dict[str, type[Renderer]] = {
    "table": TableRenderer,
    "csv": CsvRenderer,
    "json": JsonRenderer,
    "parquet": ParquetRenderer,
}


def guess_format(output: str | None, given: str | None) -> str:
    """The format asked for, else the one the output suffix names, else ``table``.

    Raises:
        TraceviewError: ``output``'s suffix names no format (and none was given).
    """
    if given:
        return given
    if output:
        suffix = Path(output).suffix.lower()
        for name, cls in RENDERERS.items():
            if cls.extension == suffix:
                return name
        known = ", ".join(cls.extension for cls in RENDERERS.values())
        raise TraceviewError(
            f"{output}: unknown output suffix {suffix or '(none)'!r}; known: {known} "
            "(or give --format)"
        )
    return "table"


TERMINAL_CELL = 48  # a terminal table's longest cell (kernel names, annotations, paths)


def write_output(
    df: pl.DataFrame, fmt: str, output: str | None, *, force: bool, stdout: IO[bytes]
) -> None:
    """Render ``df`` to ``output`` (atomically; refuses to overwrite without ``force``)
    or to ``stdout``. A table on a terminal cuts long cells and shows the columns that
    fit; piped, its cells are cut but every column is kept; a file keeps everything."""
    renderer = RENDERERS[fmt]()
    if fmt in ("csv", "json"):  # a BLOB (x'00ff') as its hex text: text formats hold no bytes
        df = df.with_columns(
            pl.col(c).bin.encode("hex") for c, t in df.schema.items() if t == pl.Binary
        )
    if output is None and fmt == "table":
        import shutil

        tty = getattr(stdout, "isatty", lambda: False)()
        width = shutil.get_terminal_size().columns if tty else None
        renderer = TableRenderer(max_cell=TERMINAL_CELL, width=width)
    if output is None:
        if renderer.binary:
            raise TraceviewError(f"--format {fmt} is binary: give an output file with -o")
        buf = io.BytesIO()
        renderer.render(df, buf)
        data = buf.getvalue()
        if fmt == "csv" and getattr(stdout, "isatty", lambda: False)():
            from traceview.render.safe import terminal

            # on a terminal, trace text is shown, never obeyed (piped, it stays data)
            data = terminal(data.decode("utf-8", "replace")).encode()
        try:
            stdout.write(data)
            stdout.flush()
        except BrokenPipeError:
            raise  # the reader stopped early (``| head``): the command line ends quietly
        except OSError as exc:  # ``> /dev/full``, a full disk
            raise TraceviewError(
                f"standard output cannot be written: {exc.strerror or exc}"
            ) from None
        return
    path = check_output(output, force=force)  # the writer rule (the CLI adds its inputs)

    def write(target: Path) -> None:
        with open(target, "wb") as f:
            renderer.render(df, f)

    atomic_write(path, write, overwrite=force)
