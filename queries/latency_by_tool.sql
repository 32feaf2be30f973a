-- Question: How long do calls of each tool take (p50, p95, max) in each time bucket?
-- @param bucket VARCHAR = 1 hour : bucket width, a DuckDB interval such as '5 minutes' or '1 day'
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- @param status VARCHAR = NULL : only calls that returned this status (default: all, as in the p50/p95 recording rules)
-- Columns: bucket (start, UTC), tool, calls, p50_ms, p95_ms, max_ms
SELECT time_bucket(CAST($bucket AS INTERVAL), started_at) AS bucket,
       tool,
       count(*) AS calls,
       round(quantile_cont(elapsed_ms, 0.5), 3) AS p50_ms,
       round(quantile_cont(elapsed_ms, 0.95), 3) AS p95_ms,
       round(max(elapsed_ms), 3) AS max_ms
FROM tool_calls
WHERE ($since IS NULL OR started_at >= CAST($since AS TIMESTAMP))
  AND ($status IS NULL OR status = $status)
GROUP BY ALL
ORDER BY bucket, tool;
