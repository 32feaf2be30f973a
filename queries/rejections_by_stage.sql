-- Question: Which tools have calls rejected, at which stage, and what share of their calls is that?
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- @param until TIMESTAMP = NULL : only calls started before this (UTC)
-- Columns: tool, reject_stage, rejections, calls (all calls of the tool in the window), share
WITH w AS (
    SELECT tool, status, reject_stage
    FROM tool_calls
    WHERE ($since IS NULL OR started_at >= CAST($since AS TIMESTAMP))
      AND ($until IS NULL OR started_at < CAST($until AS TIMESTAMP))
), per_tool AS (
    SELECT tool, count(*) AS calls FROM w GROUP BY tool
)
SELECT w.tool, w.reject_stage, count(*) AS rejections, any_value(p.calls) AS calls,
       round(count(*) / any_value(p.calls), 4) AS share
FROM w JOIN per_tool p ON p.tool = w.tool
WHERE w.status = 'rejected'
GROUP BY w.tool, w.reject_stage
ORDER BY rejections DESC, w.tool, w.reject_stage;
