-- Decode gaps: how long recurrent decode work waits between consecutive decode kernels.
--
-- Answers: the distribution of next.start - prev.end between consecutive decode-marker
-- kernels, per device.
-- The marker is the kernel that advances a linear-attention layer's recurrent state by a
-- token: fused recurrent gated-delta-rule, or Mamba's selective state update.
-- Where no kernel matches those names, the most launched linear-attention decode kernel
-- that is not a conv1d update stands in, as in `traceview summarize`.
-- On models without linear attention, summarize also falls back to full-attention decode
-- kernels.
-- Population: all gaps of the trace.
-- `traceview summarize` also splits them by decode and mixed phase.
-- Columns:
-- - device: the pid.
-- - n: the count of gaps.
-- - overlaps: gaps where the next kernel started before the previous ended.
--   Such a gap counts as 0.
-- - p50_ns, p90_ns, p99_ns: linear interpolation between closest ranks, as numpy.
-- - max_ns.
-- Example:
--   traceview sql queries/decode_gaps.sql trace.json.gz
WITH k AS MATERIALIZED (
  SELECT p.pid AS device, s.ts, s.dur, s.name, lower(s.name) AS lname
  FROM slice s
  JOIN thread_track tt ON s.track_id = tt.id
  JOIN thread t USING (utid)
  JOIN process p USING (upid)
  WHERE lower(s.category) = 'kernel'
),
role AS (
  SELECT device, ts, dur FROM k
  WHERE lname REGEXP '(?:fused_recurrent_(gated_delta_rule_|kda_)?fwd)|(?:fused_recurrent_gated_delta_rule_packed_decode)|(?:fused_sigmoid_gating_delta_rule_update)|(?:selective_(state|scan)_update)'
),
inferred AS (
  SELECT name FROM k
  WHERE lname REGEXP 'fused_recurrent_|packed_decode|fused_sigmoid_gating_delta_rule_update|selective_(state|scan)_update'
    AND NOT lname REGEXP 'conv1d|conv_update'
  GROUP BY name ORDER BY COUNT(*) DESC, SUM(dur) DESC, name LIMIT 1
),
m AS (
  SELECT device, ts, ts + dur AS end_ts FROM role
  UNION ALL
  SELECT device, ts, ts + dur FROM k
  WHERE name IN (SELECT name FROM inferred) AND NOT EXISTS (SELECT 1 FROM role)
),
raw AS (
  SELECT device, ts - LAG(end_ts) OVER (PARTITION BY device ORDER BY ts, end_ts) AS gap
  FROM m
),
g AS (
  SELECT device, MAX(gap, 0) AS v, gap < 0 AS overlap FROM raw WHERE gap IS NOT NULL
),
r AS (
  SELECT device, v, overlap,
    ROW_NUMBER() OVER (PARTITION BY device ORDER BY v) - 1 AS i,
    COUNT(*) OVER (PARTITION BY device) AS n
  FROM g
)
SELECT device, n, SUM(overlap) AS overlaps,
  MAX(CASE WHEN i = CAST((n - 1) * 0.50 AS INT) THEN v END)
    + ((n - 1) * 0.50 - CAST((n - 1) * 0.50 AS INT))
    * (MAX(CASE WHEN i = MIN(CAST((n - 1) * 0.50 AS INT) + 1, n - 1) THEN v END)
       - MAX(CASE WHEN i = CAST((n - 1) * 0.50 AS INT) THEN v END)) AS p50_ns,
  MAX(CASE WHEN i = CAST((n - 1) * 0.90 AS INT) THEN v END)
    + ((n - 1) * 0.90 - CAST((n - 1) * 0.90 AS INT))
    * (MAX(CASE WHEN i = MIN(CAST((n - 1) * 0.90 AS INT) + 1, n - 1) THEN v END)
       - MAX(CASE WHEN i = CAST((n - 1) * 0.90 AS INT) THEN v END)) AS p90_ns,
  MAX(CASE WHEN i = CAST((n - 1) * 0.99 AS INT) THEN v END)
    + ((n - 1) * 0.99 - CAST((n - 1) * 0.99 AS INT))
    * (MAX(CASE WHEN i = MIN(CAST((n - 1) * 0.99 AS INT) + 1, n - 1) THEN v END)
       - MAX(CASE WHEN i = CAST((n - 1) * 0.99 AS INT) THEN v END)) AS p99_ns,
  MAX(v) AS max_ns
FROM r GROUP BY device, n ORDER BY device;
