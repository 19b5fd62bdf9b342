"""``traceview diff`` and ``traceview check``."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING

import click
import orjson

from traceview.cli._options import (
    analysis_options,
    is_run,
    run_options,
    summarize_run_paths,
    summarize_trace,
    warn_once,
)
from traceview.errors import CheckError, CheckFailed, UsageError
from traceview.redact import shown

if TYPE_CHECKING:  # the analysis is imported by the command that runs: --help stays fast
    from traceview.analysis.analyze import AnalysisConfig
    from traceview.analysis.documents.run import RunSummary
    from traceview.analysis.documents.summary import Summary


@click.command(name="diff")
@click.argument("a", type=click.Path(dir_okay=True, path_type=str))
@click.argument("b", type=click.Path(dir_okay=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown"]),
    default="table",
    show_default=True,
    help="markdown pastes into a pull request.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Rows to show (biggest changes first).",
)
@click.option(
    "--model-b",
    "model_b",
    type=click.Path(dir_okay=True),
    help="B's model config.json where B runs another model (a quantized one, say); "
    "default: --model for both.",
)
@analysis_options
@run_options
def diff_command(
    a: str,
    b: str,
    as_json: bool,
    fmt: str,
    limit: int,
    model_b: str | None,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Compare trace B against trace A (the baseline): cadence and gap percentiles per phase
    and population, busy fractions, kernel time per family, launches and prompt work per
    step, and the kernels that appeared, vanished or changed most. Ratios are B/A.

    A and B may both be runs (a directory or a quoted glob of rank traces): then the compute
    skew, the straggler's excess and each rank's cadence, compute and collective wait.

    --model gives both sides' model; --model-b gives B its own (a quantized B against an
    unquantized A): each side's MFU, MBU and weight bytes read its own."""
    from dataclasses import replace

    from traceview.analysis.documents.compare import diff
    from traceview.render.table import render_diff

    analysis_b = analysis
    if model_b is not None:
        try:
            analysis_b = replace(analysis, model=model_b)  # read here: a bad one fails first
        except UsageError as exc:
            raise UsageError(f"--model-b: {str(exc).partition(': ')[2]}") from exc

    runs = is_run([a]), is_run([b])
    named = all(Path(p).exists() or "://" in p or glob.has_magic(p) for p in (a, b))
    if runs[0] != runs[1] and named:  # said before either is read (a missing one: by load)
        what = {True: "a run", False: "a trace"}
        raise CheckError(
            f"diff compares a trace with a trace, or a run with a run: A ({shown(a)}) is "
            f"{what[runs[0]]}, B ({shown(b)}) {what[runs[1]]}"
        )
    d = diff(
        _summary_or_run(a, "A: ", jobs, strict, analysis),
        _summary_or_run(b, "B: ", jobs, strict, analysis_b),
    )
    if as_json:
        click.echo(orjson.dumps(d.to_dict(), option=orjson.OPT_INDENT_2).decode())
    elif fmt == "markdown":
        click.echo(d.to_markdown(limit), nl=False)
    else:
        render_diff(d, limit)


def _summary_or_run(
    path: str, label: str, jobs: int | None, strict: bool, analysis: AnalysisConfig
) -> Summary | RunSummary:
    if is_run([path]):
        return summarize_run_paths([path], analysis, jobs=jobs, strict=strict, label=label)
    return summarize_trace(path, analysis, label=label, strict=strict)


def _checked(
    path: str, label: str, jobs: int | None, strict: bool, analysis: AnalysisConfig
) -> Summary | RunSummary:
    """A side of ``check``: a trace with no serving step (CUDA-graph capture alone, or
    every step warm-up) is bad input there, exit 2: a gate with nothing to judge never
    passes (the commands that only show a trace say so and exit 0)."""
    from traceview.errors import CaptureOnlyError, CheckError

    try:
        return _summary_or_run(path, label, jobs, strict, analysis)
    except CaptureOnlyError as exc:
        raise CheckError(f"{label}{exc}; no figure to check") from exc


def _warmup_said(x: Summary | RunSummary | None) -> str | None:
    """A trace's warm-up line where its figures leave warm-up out (None otherwise)."""
    from traceview.analysis.documents.summary import Summary, warmup_line

    if not isinstance(x, Summary) or x.document["warmup"]["kept"]:
        return None
    return warmup_line(x.document["warmup"])


def _pairs(values: tuple[str, ...], flag: str, file: dict[str, object]) -> dict[str, object]:
    """The ``flag`` bounds (KEY=VALUE) with the checks file's of the same direction. A KEY
    bounded twice is refused: one of the two would silently not be checked."""
    out = dict(file)
    given: set[str] = set()
    for item in values:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise CheckError(
                f"{flag} {item!r}: expected KEY=VALUE, e.g. decode_gaps.decode.p99_ns=5ms"
            )
        if key in given:
            raise CheckError(
                f"{flag} {key}: bounded twice ({out[key]!r} and {value!r}); give each bound once"
            )
        if key in out:
            raise CheckError(
                f"{flag} {key}: also bounded by the checks file ({out[key]!r}); give each "
                "bound once"
            )
        given.add(key)
        out[key] = value
    return out


@click.command(name="check")
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
@click.option(
    "--max",
    "maximum",
    multiple=True,
    metavar="KEY=VALUE",
    help="Fail if the summary figure at KEY exceeds VALUE (units: ns, us, ms, s, %).",
)
@click.option(
    "--min",
    "minimum",
    multiple=True,
    metavar="KEY=VALUE",
    help="Fail if the summary figure at KEY is below VALUE.",
)
@click.option(
    "--checks",
    "checks_file",
    type=click.Path(dir_okay=False),
    help="TOML file of bounds: [max], [min], [options].",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=True, path_type=str),
    help="A baseline trace to compare against.",
)
@click.option(
    "--max-regression",
    help="With --baseline: how much worse (e.g. 10%) a figure diff judges may get.",
)
@click.option(
    "--prefill-growth",
    type=float,
    help="Fail if a mixed phase's prompt work per step grows more than this factor "
    "from its first chunk to its last (re-prefill from token 0); a number ≥ 1 (1 is flat).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@analysis_options
@run_options
def check_command(
    trace: str,
    maximum: tuple[str, ...],
    minimum: tuple[str, ...],
    checks_file: str | None,
    baseline: str | None,
    max_regression: str | None,
    prefill_growth: float | None,
    as_json: bool,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Check TRACE (or a run: a directory or quoted glob of rank traces) against bounds:
    exit 0 when all hold, 1 when any fails (with a table of what failed), 2 on bad input.
    KEY is a path in the summary document, e.g. decode_gaps.decode.p99_ns,
    steps.phases.mixed.cadence_p50_ns, busy.fraction; for a run skew.p99_ns,
    straggler.excess_p50_ns, ranks.3.collective_wait_p50_ns (by rank)."""
    from traceview.analysis.documents.checks import (
        Bounds,
        ChecksFile,
        a_figure,
        check,
        load_checks,
        parse_value,
        prefill_growth_bound,
    )
    from traceview.render.table import render_check

    file = load_checks(checks_file) if checks_file else ChecksFile({}, {})
    baseline = baseline or file.baseline
    regression = max_regression or file.max_regression
    growth = prefill_growth if prefill_growth is not None else file.prefill_growth
    if regression is not None and baseline is None:
        raise CheckError("--max-regression needs --baseline")
    if baseline is not None and regression is None:
        raise CheckError("--baseline needs --max-regression (e.g. 10%)")
    if not (maximum or minimum or file.maximum or file.minimum or baseline or growth is not None):
        raise click.UsageError(
            "nothing to check: give --max, --min, --checks, --baseline or --prefill-growth"
        )
    bounds_max = _pairs(maximum, "--max", file.maximum)
    bounds_min = _pairs(minimum, "--min", file.minimum)
    for path, raw in (*bounds_max.items(), *bounds_min.items()):  # before any trace is read
        parse_value(raw, path, a_figure(path))
    where = "--prefill-growth" if prefill_growth is not None else f"{checks_file}: prefill_growth"
    growth_bound = None if growth is None else prefill_growth_bound(growth, where)
    ruleset = Bounds(
        maximum=bounds_max,
        minimum=bounds_min,
        baseline=_checked(baseline, "baseline: ", jobs, strict, analysis) if baseline else None,
        max_regression=parse_value(regression, "--max-regression", "fraction")
        if regression
        else None,
        prefill_growth=growth_bound,
    )
    subject = _checked(trace, "", jobs, strict, analysis)
    # a figure over fewer steps than the trace holds: say which were left out, and why
    sides: list[tuple[str, str | None, Summary | RunSummary | None]] = [
        ("", trace, subject),
        ("baseline: ", baseline, ruleset.baseline),
    ]
    for label, source, said in sides:
        line = _warmup_said(said)
        if source is not None and line is not None:
            warn_once(shown(source), f"warm-up: {line}", label)
    result = check(subject, ruleset)
    if as_json:
        click.echo(
            orjson.dumps(
                {"ok": result.ok, "checks": result.rows}, option=orjson.OPT_INDENT_2
            ).decode()
        )
    else:
        render_check(result)
    if not result.ok:
        raise CheckFailed(f"{len(result.failed)} of {len(result.rows)} check(s) failed")
