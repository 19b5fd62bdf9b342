-- Memory copies and fills on the device.
--
-- Answers: how much time and how many bytes go to host<->device copies and memsets?
-- Columns:
-- - name: such as "Memcpy HtoD (Pinned -> Device)".
-- - count, total_ns, mean_ns (ns).
-- - bytes: the sum of args.bytes; NULL when the trace does not record it.
-- - gb_per_s: bytes / total_ns, i.e. GB/s; NULL without bytes.
-- Example:
--   traceview sql queries/memcpy_summary.sql trace.json.gz
SELECT name, COUNT(*) AS count, SUM(dur) AS total_ns, 1.0 * SUM(dur) / COUNT(*) AS mean_ns,
  SUM(EXTRACT_ARG(arg_set_id, 'args.bytes')) AS bytes,
  1.0 * SUM(EXTRACT_ARG(arg_set_id, 'args.bytes')) / MAX(SUM(dur), 1) AS gb_per_s
FROM slice
WHERE lower(category) IN ('gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
GROUP BY name ORDER BY total_ns DESC, name;
