"""One block's events, as a frame of every event (:meth:`columns.Block.frame`), made into
the trace's frames: the unusable events dropped and counted, the rest split by kind. Pure
functions of the block: the loader casts each part and adds it in file order."""

from __future__ import annotations

from collections import Counter

import polars as pl

from traceview.errors import TraceFormatError, describe_event
from traceview.loader.columns import EXACT_TS, NOT_AN_ID
from traceview.loader.frames import (
    DEVICE_CATS,
    EVENT_CATS,
    KNOWN_PH,
    TS_LIMIT_US,
    finite,
    to_ns,
)

# a paired B/E event's exact duration (ns), where both ends had exact times (EXACT_TS)
EXACT_DUR = "_dur_ns"
# device activity: a complete event of a kernel, memcpy or memset category, in any case
DEVICE_ACTIVITY = (pl.col("ph") == "X") & pl.col("cat").str.to_lowercase().is_in(list(DEVICE_CATS))


def ts_ns(df: pl.DataFrame) -> pl.Expr:
    """Each event's ``ts`` in ns: its exact time (:data:`EXACT_TS`) where the block has
    one, else the float's conversion."""
    return pl.coalesce(EXACT_TS, to_ns("ts")) if EXACT_TS in df.columns else to_ns("ts")


def usable(df: pl.DataFrame, path: str) -> tuple[pl.DataFrame, Counter[str]]:
    """The block's usable events, and the others counted by why; raises for device
    activity that cannot be placed in time, or on a device and stream (every figure would
    be wrong without it)."""
    if NOT_AN_ID in df.columns:
        df = _placed(df, path)
    _refuse_unplaced(df, path)
    ph = pl.col("ph")
    known = ph.is_in(list(KNOWN_PH))
    needs_ts = known & (ph != "M")
    ts_ok = finite("ts")
    dur_ok = finite("dur") & (pl.col("dur") >= 0)
    complete_ok = (ph != "X") | dur_ok
    good = known & (~needs_ts | ts_ok) & complete_ok
    skipped: Counter[str] = Counter()
    if df.select(good.all()).item():
        return df, skipped
    checked = df.with_columns(
        good.alias("_good"),
        pl.when(~known)
        .then(pl.lit("unsupported ph"))
        .when(needs_ts & ~ts_ok & _too_large("ts"))
        .then(pl.lit(f"'ts' too large for ns (|ts| >= {TS_LIMIT_US:.2g} us)"))
        .when(needs_ts & ~ts_ok)
        .then(pl.lit("'ts' missing or not a finite number"))
        .when(pl.col("dur").is_not_null() & pl.col("dur").is_finite() & (pl.col("dur") < 0))
        .then(pl.lit("negative 'dur'"))
        .when(_too_large("dur"))
        .then(pl.lit(f"'dur' too large for ns (>= {TS_LIMIT_US:.2g} us)"))
        .otherwise(pl.lit("'dur' missing or not a finite number"))
        .alias("_why"),
    )
    bad = checked.filter(~pl.col("_good"))
    fatal = bad.filter(DEVICE_ACTIVITY)
    if fatal.height:
        row = fatal.row(0, named=True)
        raise TraceFormatError(
            path,
            f"{row['_why']} on device activity ({row['cat']}); cannot place it in time",
            index=row["idx"],
            event=describe_event(row["ph"], row["name"]),
        )
    for why, ph_value, count in (
        bad.group_by("_why", "ph").len().sort("_why", "ph", nulls_last=True).iter_rows()
    ):
        label = f"{why} {ph_value!r}" if why == "unsupported ph" else why
        skipped[label] += count
    return checked.filter(pl.col("_good")).drop("_good", "_why"), skipped


def _too_large(col: str) -> pl.Expr:
    """A finite time too large for Int64 nanoseconds (:data:`TS_LIMIT_US`)."""
    c = pl.col(col)
    return c.is_not_null() & c.is_finite() & (c.abs() >= TS_LIMIT_US)


def _refuse_unplaced(df: pl.DataFrame, path: str) -> None:
    """Raise for device activity with no device or no stream: no ``args.device`` and a
    pid that is no integer (``"GPU 0"``), or the same of ``args.stream`` and the tid. Its
    time would be counted on no device, or with another device's (a probe's finding: a
    traceback in every analysing command, and two such devices read as one)."""
    unplaced = []
    for own, fallback, key in (("device", "pid", "args.device"), ("stream", "tid", "args.stream")):
        if df[own].null_count() and df[fallback].null_count():  # metadata: cheap
            unplaced.append((pl.col(own).is_null() & pl.col(fallback).is_null(), key, fallback))
    if not unplaced:
        return
    for missing, key, fallback in unplaced:
        fatal = df.filter(DEVICE_ACTIVITY & missing)
        if fatal.height:
            row = fatal.row(0, named=True)
            raise TraceFormatError(
                path,
                f"device activity ({row['cat']}) with no '{key}' and a {fallback} that is "
                "not an integer id; cannot place it on a device and stream",
                index=row["idx"],
                event=describe_event(row["ph"], row["name"]),
            )


def _placed(df: pl.DataFrame, path: str) -> pl.DataFrame:
    """``df`` without its :data:`NOT_AN_ID` mark; raises where the mark is on device
    activity: its ``args.device`` or ``args.stream`` is no id, and its pid and tid are not
    where it ran (only an absent one falls back to them)."""
    fatal = df.filter(DEVICE_ACTIVITY & pl.col(NOT_AN_ID).is_not_null())
    if fatal.height:
        row = fatal.row(0, named=True)
        raise TraceFormatError(
            path,
            f"{row[NOT_AN_ID]} is not an integer id on device activity "
            f"({row['cat']}); cannot place it on a device and stream",
            index=row["idx"],
            event=describe_event(row["ph"], row["name"]),
        )
    return df.drop(NOT_AN_ID)


def split(df: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The block's usable events by the frame they belong to (only those with rows):
    ``kernels``, ``events``, ``flows``, ``shapes``, ``metadata`` with times in ns, and
    ``begin_end``: the raw rows of ``B``/``E`` events, paired once the whole trace is read."""
    cat = pl.col("cat").str.to_lowercase().fill_null("")
    complete = pl.col("ph") == "X"
    device = complete & cat.is_in(list(DEVICE_CATS))
    instant = pl.col("ph").is_in(["i", "I"])
    raw = ["args_json"] if "args_json" in df.columns else []
    ts = ts_ns(df)
    dur_ns = pl.coalesce(EXACT_DUR, to_ns("dur")) if EXACT_DUR in df.columns else to_ns("dur")

    parts = {
        "kernels": df.filter(device).select(
            ts.alias("ts_ns"),
            dur_ns.alias("dur_ns"),
            pl.col("name").fill_null(""),
            pl.col("cat"),
            cat.replace_strict(DEVICE_CATS, default="kernel").alias("event_kind"),
            "pid",
            "tid",
            pl.coalesce("device", "pid").alias("device"),
            pl.coalesce("stream", "tid").alias("stream"),
            "correlation",
            "external_id",
            *raw,
        ),
        "events": df.filter((complete & ~device) | instant).select(
            ts.alias("ts_ns"),
            pl.when(instant).then(0).otherwise(dur_ns).alias("dur_ns"),
            pl.col("name").fill_null(""),
            pl.col("cat").fill_null(""),
            pl.when(instant)
            .then(pl.lit("instant"))
            .otherwise(cat.replace_strict(EVENT_CATS, default="other"))
            .alias("event_kind"),
            "pid",
            "tid",
            "correlation",
            "external_id",
            *raw,
        ),
        "flows": df.filter(pl.col("ph").is_in(["s", "t", "f"])).select(
            ts.alias("ts_ns"),
            "id",
            pl.col("ph").alias("phase"),
            pl.col("cat").fill_null(""),
            "pid",
            "tid",
            pl.col("name").fill_null(""),
            (pl.col("bp") == "e").fill_null(False).alias("enclosing"),
        ),
        "metadata": df.filter(pl.col("ph") == "M").select(
            pl.col("name").fill_null(""), "pid", "tid", pl.col("meta_value").alias("value")
        ),
        "begin_end": df.filter(pl.col("ph").is_in(["B", "E"])),
    }
    if "input_dims" in df.columns:
        parts["shapes"] = df.filter(complete & ~device & pl.col("input_dims").is_not_null()).select(
            ts.alias("ts_ns"),
            dur_ns.alias("dur_ns"),
            pl.col("name").fill_null(""),
            *("pid", "tid", "input_dims", "input_types", "concrete_inputs"),
        )
    return {key: frame for key, frame in parts.items() if frame.height}


def without_copies(kernels: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Device activity without identical copies of an event, and how many were dropped.
    Copies share ``ts_ns``, so only the rows of tied start times are compared, not the
    whole frame."""
    ts = pl.col("ts_ns")
    tied = kernels.with_row_index("_row").filter((ts == ts.shift(1)) | (ts == ts.shift(-1)))
    if tied.height == 0:
        return kernels, 0
    copies = tied.filter(~pl.struct(pl.exclude("_row")).is_first_distinct())["_row"]
    if copies.len() == 0:
        return kernels, 0
    keep = ~pl.int_range(pl.len(), dtype=pl.UInt32).is_in(copies.implode())
    return kernels.filter(keep), copies.len()


def pair_begin_end(parts: list[pl.DataFrame]) -> tuple[pl.DataFrame | None, Counter[str]]:
    """The ``B``/``E`` rows of every block (:func:`split`'s ``begin_end``) as complete
    events, matched per pid/tid as nested, in one frame of the blocks' columns (None where
    none pairs); and the unmatched ones counted."""
    skipped: Counter[str] = Counter()
    if not parts:
        return None, skipped
    # blocks with and without "Input Dims" (or args) have other columns: nulls fill in
    rows = pl.concat(parts, how="diagonal").sort("idx")
    exact = EXACT_TS in rows.columns
    stacks: dict[tuple[object, object], list[dict[str, object]]] = {}
    complete: list[dict[str, object]] = []
    for row in rows.iter_rows(named=True):
        key = (row["pid"], row["tid"])
        if row["ph"] == "B":
            stacks.setdefault(key, []).append(row)
        elif stacks.get(key):
            begin = stacks[key].pop()
            paired = {**begin, "ph": "X", "dur": row["ts"] - begin["ts"]}
            if exact:  # both ends' exact times, where each has one
                a, b = begin[EXACT_TS], row[EXACT_TS]
                # never negative: the float said E is not before B (usable() checks it)
                paired[EXACT_DUR] = None if a is None or b is None else max(b - a, 0)
            complete.append(paired)
        else:
            skipped["'E' without a matching 'B'"] += 1
    unmatched = sum(len(s) for s in stacks.values())
    if unmatched:
        skipped["'B' without a matching 'E'"] += unmatched
    if not complete:
        return None, skipped
    schema = {**rows.schema, **({EXACT_DUR: pl.Int64()} if exact else {})}
    return pl.DataFrame(complete, schema=schema), skipped
