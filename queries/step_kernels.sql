-- Kernels per engine step, using the engine's own per-step annotations.
--
-- Answers: how many kernels, and how much kernel time, each annotated step ran.
-- Steps are these annotations:
-- - vLLM's execute_context_N(...)_generation_M(...), and the older execute_new_N_cached_M;
-- - SGLang's step[...];
-- - ProfilerStep#N.
-- GPU-projected annotations (gpu_user_annotation) take the kernels of their process that
-- start inside them.
-- CPU annotations (user_annotation) take the kernels launched from inside them.
-- Launches are runtime or driver calls, cuLaunchKernel too, linked through args.correlation.
-- Columns:
-- - source: gpu or cpu.
-- - step: the annotation's name.
-- - ts, dur: the annotation's, in ns.
-- - kernels: the count of kernels.
-- - kernel_ns: the sum of kernel durations.
-- Example:
--   traceview sql queries/step_kernels.sql trace.json.gz --format csv -o steps.csv
WITH ann AS MATERIALIZED (
  SELECT s.id, s.ts, s.dur, s.name, s.category, s.track_id, t.utid, t.upid
  FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
  WHERE lower(s.category) IN ('user_annotation', 'gpu_user_annotation')
    AND (s.name GLOB 'execute_*context_*_generation_*' OR s.name GLOB 'step[[]*'
         OR s.name GLOB 'execute_new_*_cached_*' OR s.name GLOB 'ProfilerStep#*')
),
k AS MATERIALIZED (
  SELECT s.ts, s.dur, t.upid, EXTRACT_ARG(s.arg_set_id, 'args.correlation') AS corr
  FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
  WHERE lower(s.category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset', 'cuda_graph')
),
launch AS MATERIALIZED (
  SELECT s.ts, tt.utid, EXTRACT_ARG(s.arg_set_id, 'args.correlation') AS corr
  FROM slice s JOIN thread_track tt ON s.track_id = tt.id
  WHERE lower(s.category) IN ('cuda_runtime', 'runtime', 'cuda_driver', 'driver')
),
gpu AS (
  SELECT 'gpu' AS source, a.name AS step, a.ts, a.dur, COUNT(k.ts) AS kernels,
    COALESCE(SUM(k.dur), 0) AS kernel_ns
  FROM ann a LEFT JOIN k ON k.upid = a.upid AND k.ts >= a.ts AND k.ts < a.ts + a.dur
  WHERE lower(a.category) = 'gpu_user_annotation'
  GROUP BY a.id
),
cpu AS (
  SELECT 'cpu' AS source, a.name AS step, a.ts, a.dur, COUNT(k.ts) AS kernels,
    COALESCE(SUM(k.dur), 0) AS kernel_ns
  FROM ann a
  LEFT JOIN launch l ON l.utid = a.utid AND l.ts >= a.ts AND l.ts < a.ts + a.dur
  LEFT JOIN k ON k.corr = l.corr
  WHERE lower(a.category) = 'user_annotation'
  GROUP BY a.id
)
SELECT * FROM gpu UNION ALL SELECT * FROM cpu ORDER BY source, ts;
