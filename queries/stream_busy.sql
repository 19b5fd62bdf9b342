-- Busy time per GPU stream: the union of its kernels' intervals.
--
-- Answers: how busy is each stream, counting overlapping kernels once?
-- Columns:
-- - device: the pid.
-- - stream: the tid.
-- - kernels: the count of kernels.
-- - kernel_ns: the sum of durations.
-- - busy_ns: the length of the union of [ts, ts + dur).
-- - first_ts, last_end: in ns.
-- - busy_fraction: busy_ns / (last_end - first_ts).
-- Method: gaps and islands.
-- A kernel that starts after every earlier kernel on its stream has ended opens a new island.
-- Busy time is the sum of island lengths.
-- Example:
--   traceview sql queries/stream_busy.sql trace.json.gz
WITH k AS (
  SELECT p.pid AS device, t.tid AS stream, s.ts, s.ts + s.dur AS end_ts, s.dur
  FROM slice s
  JOIN thread_track tt ON s.track_id = tt.id
  JOIN thread t USING (utid)
  JOIN process p USING (upid)
  WHERE lower(s.category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset', 'cuda_graph')
),
o AS (
  SELECT *, MAX(end_ts) OVER (PARTITION BY device, stream ORDER BY ts, end_ts
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM k
),
g AS (
  SELECT *, SUM(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END)
            OVER (PARTITION BY device, stream ORDER BY ts, end_ts ROWS UNBOUNDED PRECEDING)
            AS island
  FROM o
),
i AS (
  SELECT device, stream, island, MIN(ts) AS a, MAX(end_ts) AS b, COUNT(*) AS n,
    SUM(dur) AS d
  FROM g GROUP BY device, stream, island
)
SELECT device, stream, SUM(n) AS kernels, SUM(d) AS kernel_ns, SUM(b - a) AS busy_ns,
  MIN(a) AS first_ts, MAX(b) AS last_end,
  1.0 * SUM(b - a) / MAX(MAX(b) - MIN(a), 1) AS busy_fraction
FROM i GROUP BY device, stream ORDER BY device, stream;
