-- The kernels that take the most GPU time.
--
-- Answers: which individual kernels dominate?
-- That is the first place to look for a regression.
-- Columns:
-- - name: text.
-- - kernels: the count of kernels.
-- - total_ns, mean_ns, max_ns: in ns.
-- - share: the fraction of all device time, 0..1.
-- The rows are the top 25 by total_ns.
-- Example:
--   traceview sql queries/top_kernels.sql trace.json.gz --format csv
WITH k AS (
  SELECT name, dur FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset', 'cuda_graph')
)
SELECT name, COUNT(*) AS kernels, SUM(dur) AS total_ns, 1.0 * SUM(dur) / COUNT(*) AS mean_ns,
  MAX(dur) AS max_ns, 1.0 * SUM(dur) / (SELECT SUM(dur) FROM k) AS share
FROM k GROUP BY name ORDER BY total_ns DESC, name LIMIT 25;
