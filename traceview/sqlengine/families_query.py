"""Render the classification preset as a PerfettoSQL query (queries/kernel_families.sql).

    python -m traceview.sqlengine.families_query > queries/kernel_families.sql

The query file is generated so it classifies exactly like ``traceview summarize``; a test
checks it is up to date. Patterns are matched with ``REGEXP`` on the lower-cased name
(std::regex in Perfetto has no case-insensitive flag).
"""

from __future__ import annotations

from traceview.analysis.classify.families import Rules, load_rules

HEADER = """\
-- Kernel time by layer family (traceview's built-in classification preset).
--
-- Answers: which layer families does the GPU spend its time on?
-- Columns:
-- - family: text.
-- - kernels: the count of kernels.
-- - total_ns: the kernel time, in ns.
-- - mean_ns: in ns.
-- - share: the fraction of all kernel time, 0..1.
-- The rows are sorted by total_ns, largest first.
-- Device activity is every slice whose category is kernel, gpu_memcpy or gpu_memset.
-- The category may be in any case: older Kineto writes Kernel, Memcpy and Memset.
-- A slice of category cuda_graph is device activity too.
-- It is a whole CUDA-graph replay, in an Nsight export traced at graph level.
-- Rules are tried in order, and the first match wins.
-- Unmatched kernels are "other".
-- These are the same name rules as `traceview summarize`.
-- This query reads names only, and summarize reads more (docs/metrics.md).
-- - Summarize reads record_shapes to move the softmax kernels of eager attention into
--   full_attention.
-- - It moves Inductor templates launched under FlexAttention or vLLM's attention op
--   there too.
-- - It moves a GEMM that runs between an MoE router and its combine into moe.
-- - It counts the analysed device's serving kernels only.
--   This query counts every device's kernels, CUDA-graph capture at start-up included.
-- Generated from traceview/presets/default.toml by
--   python -m traceview.sqlengine.families_query > queries/kernel_families.sql
-- Example:
--   traceview sql queries/kernel_families.sql trace.json.gz
"""

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_graph")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def families_sql(rules: Rules | None = None) -> str:
    rules = rules or load_rules()
    whens = []
    for rule in rules.rules:
        conditions = []
        if rule.categories:
            conditions.append(f"lower(category) IN ({', '.join(map(_quote, rule.categories))})")
        if rule.patterns:
            joined = "|".join(f"(?:{p.lower()})" for p in rule.patterns)
            conditions.append(f"lower(name) REGEXP {_quote(joined)}")
        whens.append(f"    WHEN {' OR '.join(conditions)} THEN {_quote(rule.family)}")
    cats = ", ".join(map(_quote, DEVICE_CATEGORIES))
    return (
        HEADER + "WITH k AS (\n  SELECT name, category, dur FROM slice\n"
        f"  WHERE lower(category) IN ({cats})\n),\nf AS (\n  SELECT dur, CASE\n"
        + "\n".join(whens)
        + "\n    ELSE 'other' END AS family\n  FROM k\n)\n"
        "SELECT family, COUNT(*) AS kernels, SUM(dur) AS total_ns,\n"
        "  1.0 * SUM(dur) / COUNT(*) AS mean_ns,\n"
        "  1.0 * SUM(dur) / (SELECT SUM(dur) FROM k) AS share\n"
        "FROM f GROUP BY family ORDER BY total_ns DESC, family;\n"
    )


if __name__ == "__main__":
    print(families_sql(), end="")
