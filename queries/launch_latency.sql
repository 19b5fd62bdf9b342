-- CPU launch to GPU kernel start, per runtime call.
--
-- Answers: how far ahead of the GPU is the CPU?
-- A small or negative margin means the GPU waits for launches.
-- A large one means deep queues.
-- Each kernel is linked to the runtime call that launched it through args.correlation.
-- Under CUDA graphs, every replayed kernel shares the graph launch's correlation id.
-- So one cudaGraphLaunch has many kernels.
-- Columns:
-- - launch: the runtime call's name.
-- - kernels: the count of kernels.
-- - p50_ns, p90_ns, p99_ns, max_ns of kernel.ts - launch.ts.
--   The percentiles interpolate linearly between closest ranks.
-- Example:
--   traceview sql queries/launch_latency.sql trace.json.gz
WITH launch AS MATERIALIZED (
  SELECT name, ts, EXTRACT_ARG(arg_set_id, 'args.correlation') AS corr
  FROM slice WHERE lower(category) IN ('cuda_runtime', 'runtime')
),
k AS MATERIALIZED (
  SELECT ts, EXTRACT_ARG(arg_set_id, 'args.correlation') AS corr
  FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset', 'cuda_graph')
),
lat AS MATERIALIZED (
  SELECT l.name, k.ts - l.ts AS v FROM k JOIN launch l ON k.corr = l.corr
  WHERE k.corr IS NOT NULL
),
r AS (
  SELECT name, v, ROW_NUMBER() OVER (PARTITION BY name ORDER BY v) - 1 AS i,
    COUNT(*) OVER (PARTITION BY name) AS n
  FROM lat
)
SELECT name AS launch, n AS kernels,
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
FROM r GROUP BY name, n ORDER BY kernels DESC, launch;
