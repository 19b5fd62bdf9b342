"""Kernel -> layer family, by ordered regex rules (first match wins), and the role patterns.

The built-in preset is ``traceview/presets/default.toml``; a user rules file has the same
shape, and its rules are tried before the preset's. Patterns are Python regular
expressions, searched case-insensitively in the kernel name. Classification runs once per
distinct name (a trace has hundreds, not millions), then maps onto the frame.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, cast

import numpy as np
import polars as pl

from traceview.errors import RulesError

OTHER = "other"


@dataclass(frozen=True, slots=True)
class Rule:
    family: str
    patterns: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rules:
    """A classification: ordered rules plus the role patterns.

    Attributes:
        name: where the rules came from (preset name, plus the rules file).
        rules: ordered rules; the first that matches names the family.
        step_marker: families whose kernels are step markers.
        decode_marker: patterns of the per-layer recurrent decode kernel.
        full_attention_decode: patterns tried in order when no decode marker is present.
        prefill_family: families whose kernels mean prompt work (mixed steps).
        prefill: patterns of full-attention prefill variants (mixed steps).
        step_edge: patterns of kernels that run at a step's edge (sampling, argmax, the
            embedding lookup); some also run inside layers (a top-1 router's argmax).
    """

    name: str
    rules: tuple[Rule, ...]
    step_marker: tuple[str, ...] = ("full_attention",)
    decode_marker: tuple[str, ...] = ()
    full_attention_decode: tuple[str, ...] = ()
    prefill_family: tuple[str, ...] = ()
    prefill: tuple[str, ...] = ()
    step_edge: tuple[str, ...] = ()
    _compiled: dict[str, re.Pattern[str]] = field(default_factory=dict, compare=False)

    def regex(self, pattern: str) -> re.Pattern[str]:
        if pattern not in self._compiled:
            self._compiled[pattern] = re.compile(pattern, re.IGNORECASE)
        return self._compiled[pattern]

    def family_of(self, name: str, cat: str = "") -> str:
        """The family of one kernel name (and its category)."""
        lower_cat = cat.lower()
        for rule in self.rules:
            if lower_cat and lower_cat in rule.categories:
                return rule.family
            if any(self.regex(p).search(name) for p in rule.patterns):
                return rule.family
        return OTHER

    def matches_any(self, name: str, patterns: tuple[str, ...]) -> bool:
        return any(self.regex(p).search(name) for p in patterns)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RulesError(f"{where}: expected a string or a list of strings")
    return tuple(value)


def _parse(doc: dict[str, Any], source: str) -> tuple[list[Rule], dict[str, tuple[str, ...]]]:
    rules = []
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list):
        raise RulesError(f"{source}: 'rule' must be an array of tables ([[rule]])")
    for i, raw in enumerate(raw_rules):
        where = f"{source}: rule #{i + 1}"
        if not isinstance(raw, dict) or not isinstance(raw.get("family"), str):
            raise RulesError(f"{where}: needs a 'family' string")
        patterns = _strings(raw.get("patterns", raw.get("pattern")), f"{where} patterns")
        categories = tuple(c.lower() for c in _strings(raw.get("categories"), where))
        if not patterns and not categories:
            raise RulesError(f"{where}: needs 'patterns' or 'categories'")
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise RulesError(f"{where}: bad pattern {p!r}: {exc}") from None
        rules.append(Rule(raw["family"], patterns, categories))
    roles_raw = doc.get("roles", {})
    if not isinstance(roles_raw, dict):
        raise RulesError(f"{source}: [roles] must be a table")
    roles = {k: _strings(v, f"{source}: roles.{k}") for k, v in roles_raw.items()}
    known = {
        "step_marker",
        "decode_marker",
        "full_attention_decode",
        "prefill_family",
        "prefill",
        "step_edge",
    }
    unknown = set(roles) - known
    if unknown:
        raise RulesError(f"{source}: unknown role(s) {', '.join(sorted(unknown))}")
    return rules, roles


def _read_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{source}: not valid TOML: {exc}") from None


def presets() -> list[str]:
    """Names of the built-in presets."""
    folder = resources.files("traceview") / "presets"
    return sorted(
        p.name.removesuffix(".toml")
        for p in folder.iterdir()
        if p.name.endswith(".toml") and p.name not in NOT_PRESETS
    )


NOT_PRESETS = ("devices.toml",)  # the device peaks live beside the presets (analysis/devices)


def load_rules(preset: str = "default", rules_file: str | Path | None = None) -> Rules:
    """The classification rules: a built-in preset, optionally preceded by a user file.

    Raises:
        RulesError: unknown preset, unreadable or malformed rules file.
    """
    if preset not in presets():
        raise RulesError(f"unknown preset {preset!r} (built-in: {', '.join(presets())})")
    text = (resources.files("traceview") / "presets" / f"{preset}.toml").read_text()
    rules, roles = _parse(_read_toml(text, f"preset {preset}"), f"preset {preset}")
    name = preset
    if rules_file is not None:
        path = Path(rules_file)
        try:
            user_text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RulesError(f"{path}: cannot read rules file: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise RulesError(
                f"{path}: not a rules file: not UTF-8 text (byte {exc.start:,})"
            ) from None
        user_rules, user_roles = _parse(_read_toml(user_text, str(path)), str(path))
        rules = user_rules + rules
        roles = {**roles, **user_roles}
        name = f"{preset} + {path}"
    return Rules(
        name=name,
        rules=tuple(rules),
        step_marker=roles.get("step_marker", ("full_attention",)),
        decode_marker=roles.get("decode_marker", ()),
        full_attention_decode=roles.get("full_attention_decode", ()),
        prefill_family=roles.get("prefill_family", ()),
        prefill=roles.get("prefill", ()),
        step_edge=roles.get("step_edge", ()),
    )


# the families a name's own rule gives that the launching op's shapes may correct
SHAPE_DECIDES = ("sampling", OTHER)


def under(family: str, families: tuple[str, ...]) -> bool:
    """``family`` is one of ``families`` or below one of them (``a`` holds ``a.b``)."""
    return any(family == f or family.startswith(f + ".") for f in families)


@dataclass(frozen=True, slots=True)
class FamilyCodes:
    """Each kernel's family as a small integer: ``codes[i]`` indexes ``names`` (sorted).

    One byte per kernel where there are at most 256 families (always, with the built-in
    preset), so the analyses of a million kernels carry 1 MB of families, not a string each.
    ``pairs`` has one row per distinct (``name``, ``cat``) with its ``family`` (String), and
    ``pair_of[i]`` is kernel i's row there: per-name and per-family totals add the kernels
    up by pair, then the few pairs by name or family.
    """

    names: tuple[str, ...]
    codes: np.ndarray
    pairs: pl.DataFrame
    pair_of: np.ndarray

    @property
    def dtype(self) -> pl.Enum:
        return pl.Enum(list(self.names))

    def series(self, name: str = "family") -> pl.Series:
        """The families as an Enum Series (one byte per kernel)."""
        index = pl.Series(self.codes, dtype=pl.UInt32)
        return pl.Series(name, self.names, dtype=self.dtype).gather(index)

    def within(self, families: tuple[str, ...]) -> list[str]:
        """The families named in ``families`` or below one of them (:func:`under`)."""
        return [n for n in self.names if under(n, families)]

    def mask(self, families: tuple[str, ...]) -> np.ndarray:
        """Per kernel: its family is one of ``families`` or below one of them."""
        members = set(self.within(families))
        hit = np.array([n in members for n in self.names], dtype=bool)
        out: np.ndarray = hit[self.codes]
        return out

    def totals(self, dur: np.ndarray, keep: np.ndarray | None = None) -> pl.DataFrame:
        """Per (name, cat) pair: ``name`` (Categorical), ``cat``, ``family`` (String),
        ``count`` (Int64, kernels) and ``total_ns`` (Int64, the sum of ``dur``, ns); of the
        kernels ``keep`` marks only, where given (pairs with none of them left out)."""
        n = self.pairs.height
        pair_of = self.pair_of if keep is None else self.pair_of[keep]
        count = np.bincount(pair_of, minlength=n)
        total = np.zeros(n, dtype=np.int64)
        np.add.at(total, pair_of, dur if keep is None else dur[keep])  # exact integer sums
        out = self.pairs.with_columns(
            pl.Series("count", count, dtype=pl.Int64), pl.Series("total_ns", total)
        )
        return out if keep is None else out.filter(pl.col("count") > 0)


def _physical(values: pl.Series) -> np.ndarray:
    """A categorical's codes as a uint32 array; null is one code past the largest."""
    codes = values.to_physical()
    top = codes.max()
    null = 0 if top is None else int(cast(int, top)) + 1
    return codes.fill_null(null).to_numpy().astype(np.uint32, copy=False)


def family_codes(
    kernels: pl.DataFrame,
    rules: Rules,
    by_shape: dict[str, str] | None = None,
    *,
    by_position: bool = True,
) -> FamilyCodes:
    """Each kernel's family (see :class:`FamilyCodes`). Each distinct (name, category) is
    matched once, found by hashing one integer per kernel; the kernels then take their
    pair from a table indexed by the categoricals' codes, so no kernel's name becomes a
    string. ``by_shape`` (from ``shapes.shape_families``) overrides a name whose rule says
    sampling or other; ``by_position`` moves the expert GEMMs between an MoE router and
    its combine into ``moe`` (:func:`moe_by_position`; off: the name rules alone, as the
    ``kernel_families`` query)."""
    if kernels.height == 0:
        pairs = kernels.select("name", "cat").with_columns(pl.lit(OTHER).alias("family"))
        none = np.zeros(0, dtype=np.uint8)
        return FamilyCodes((OTHER,), none, pairs, none)
    name, cat = _physical(kernels["name"]), _physical(kernels["cat"])
    key = pl.Series((name.astype(np.uint64) << np.uint64(32)) | cat)
    first = key.arg_unique().to_numpy()  # hashes one integer per kernel, not the rows
    del key
    pairs = kernels.select(pl.col("name", "cat").gather(first))
    fams = []
    for n, c in pairs.iter_rows():
        family = rules.family_of(str(n), str(c or ""))
        if by_shape and family in SHAPE_DECIDES:
            family = by_shape.get(str(n), family)
        fams.append(family)
    pairs = pairs.with_columns(pl.Series("family", fams, dtype=pl.String))
    # each kernel's pair: by name code, and by (name, category) only where a name has two;
    # the codes are the process's (they grow with every trace it loads), so the tables span
    # only this frame's range of them
    index = np.uint16 if first.size <= 1 << 16 else np.uint32
    low = int(name.min())
    name = name - np.uint32(low)
    pair_name, pair_cat = name[first], cat[first]
    by_name = np.zeros(int(name.max()) + 1, dtype=index)
    by_name[pair_name] = np.arange(first.size, dtype=index)
    if np.unique(pair_name).size == first.size:
        pair_of = by_name[name]
    else:
        cats = np.unique(pair_cat)
        table = np.zeros((by_name.size, cats.size), dtype=index)
        table[pair_name, np.searchsorted(cats, pair_cat)] = np.arange(first.size, dtype=index)
        pair_of = table[name, np.searchsorted(cats, cat)]
    names = [str(n) for n in pairs["name"].to_list()]
    moe = moe_by_position(kernels, fams, names, pair_of) if by_position else set()
    if moe:
        fams = [MOE if i in moe else f for i, f in enumerate(fams)]
        pairs = pairs.with_columns(pl.Series("family", fams, dtype=pl.String))
    return _codes(fams, pairs, pair_of)


def _codes(fams: list[str], pairs: pl.DataFrame, pair_of: np.ndarray) -> FamilyCodes:
    names = tuple(sorted(set(fams)))
    code_of = {f: i for i, f in enumerate(names)}
    pair_code = np.array(
        [code_of[f] for f in fams], dtype=np.uint8 if len(names) <= 256 else np.uint16
    )
    return FamilyCodes(names, pair_code[pair_of], pairs, pair_of)


MOE = "moe"
# Inside an MoE layer the router (top-k / gating / routing / sorting) comes first and the
# combine (finalize / unpermute / moe_sum / scatter-reduce) last; the expert GEMMs run
# between them, whatever their names say (TensorRT-LLM's and FlashInfer's bmm_…_swiGlu_…).
MOE_ROUTER = re.compile(r"rout|topk|top_k|gating|sorting|align_block|permute", re.IGNORECASE)
MOE_COMBINE = re.compile(r"finaliz|combine|unpermute|moe_sum|scatter|reduce", re.IGNORECASE)
MOE_MAY_BE = ("gemm", "activation")  # the families an expert GEMM's own name may give
MOE_SHARE = 0.9  # a name is an expert GEMM when this share of its launches sit inside


def moe_by_position(
    kernels: pl.DataFrame, fams: list[str], names: list[str], pair_of: np.ndarray
) -> set[int]:
    """The (name, cat) pairs (indices into ``fams``) that are expert GEMMs by position: of
    the ``gemm`` or ``activation`` family, with at least :data:`MOE_SHARE` of their launches
    starting between an MoE router kernel and the next MoE combine kernel on the same
    device and stream. Empty without an MoE router (the usual case: nothing is sorted)."""
    router = np.array(
        [
            f == MOE and not MOE_COMBINE.search(n) and bool(MOE_ROUTER.search(n))
            for f, n in zip(fams, names, strict=True)
        ],
        dtype=bool,
    )
    if not router.any():
        return set()
    combine = np.array(
        [f == MOE and bool(MOE_COMBINE.search(n)) for f, n in zip(fams, names, strict=True)],
        dtype=bool,
    )
    maybe = np.array([under(f, MOE_MAY_BE) for f in fams], dtype=bool)
    if not combine.any() or not maybe.any():
        return set()
    device = kernels["device"].fill_null(-1).to_numpy()
    stream = kernels["stream"].fill_null(-1).to_numpy()
    order = np.lexsort((kernels["ts_ns"].to_numpy(), stream, device))
    pair = pair_of[order]
    lane = np.concatenate(
        (
            [True],
            (device[order][1:] != device[order][:-1]) | (stream[order][1:] != stream[order][:-1]),
        )
    )
    idx = np.arange(order.size)
    lane_start = np.maximum.accumulate(np.where(lane, idx, 0))
    last_router = np.maximum.accumulate(np.where(router[pair], idx, -1))
    last_combine = np.maximum.accumulate(np.where(combine[pair], idx, -1))
    inside = (last_router >= lane_start) & (last_router > last_combine)
    cand = maybe[pair]
    launches = np.bincount(pair[cand], minlength=len(fams))
    within = np.bincount(pair[cand & inside], minlength=len(fams))
    hit = (launches > 0) & (within >= MOE_SHARE * launches)
    return {int(i) for i in np.flatnonzero(hit)}


def classify(
    kernels: pl.DataFrame,
    rules: Rules,
    by_shape: dict[str, str] | None = None,
    *,
    by_position: bool = True,
) -> pl.DataFrame:
    """``kernels`` with a ``family`` column (String) added (see :func:`family_codes`; the
    other columns are not copied)."""
    fam = family_codes(kernels, rules, by_shape, by_position=by_position)
    return kernels.with_columns(fam.series().cast(pl.String))


def family_is(family: pl.Series, *families: str) -> pl.Series:
    """Per kernel: its family (String or Enum) is :func:`under` ``families``; the test runs
    on the distinct families only."""
    present = [str(f) for f in family.unique().drop_nulls().to_list()]
    return family.is_in([n for n in present if under(n, families)]).fill_null(False)


def distinct_names(frame: pl.DataFrame) -> list[str]:
    """The distinct kernel names of ``frame`` as strings (only the distinct ones are cast)."""
    return [str(n) for n in frame["name"].unique().drop_nulls().to_list()]


def family_table(classified: pl.DataFrame, *, roll_up: bool = False) -> pl.DataFrame:
    """:func:`families` of kernels that already carry a ``family`` column (String or Enum)."""
    return family_rows(
        classified.group_by("family").agg(
            pl.len().cast(pl.Int64).alias("count"), pl.col("dur_ns").sum().alias("total_ns")
        ),
        roll_up=roll_up,
    )


def family_rows(per: pl.DataFrame, *, roll_up: bool = False) -> pl.DataFrame:
    """:func:`families` from rows that already add kernels up (``family``, ``count``,
    ``total_ns``: per family, or per kernel name); rolling up sums the leaf families into
    their top-level family."""
    per = per.select(pl.col("family").cast(pl.String), "count", "total_ns")
    if roll_up:
        per = per.with_columns(pl.col("family").str.split(".").list.first())
    per = per.group_by("family").agg(pl.col("count").sum(), pl.col("total_ns").sum())
    total = per["total_ns"].sum() if per.height else 0
    return per.with_columns(
        (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
        (pl.col("total_ns") / total if total else pl.lit(0.0)).alias("share"),
    ).sort(["total_ns", "family"], descending=[True, False])


def kernel_rows(totals: pl.DataFrame) -> pl.DataFrame:
    """Kernel time per kernel name, from the per-(name, cat) ``totals``: ``name``,
    ``family`` (String), ``count``, ``total_ns``, ``mean_ns`` and ``share`` (of all kernel
    time), by total time, largest first."""
    per_name = totals.group_by("name", "family").agg(
        pl.col("count").sum(), pl.col("total_ns").sum()
    )
    all_ns = int(per_name["total_ns"].sum()) if per_name.height else 0
    return per_name.with_columns(
        pl.col("name").cast(pl.String),
        pl.col("family").cast(pl.String),
        (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
        (pl.col("total_ns") / all_ns if all_ns else pl.lit(0.0)).alias("share"),
    ).sort(["total_ns", "name"], descending=[True, False])
