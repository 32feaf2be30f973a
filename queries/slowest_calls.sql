-- Question: Which calls took longest end to end, and where did the time go (the slowest step)?
-- @param limit INTEGER = 20 : how many calls
-- @param tool VARCHAR = NULL : only this tool
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- Columns: call_id, started_at, run_id, tool, status (what the call returned), outcome (its final outcome), elapsed_ms, slowest_step, slowest_step_ms, summary
SELECT c.call_id, c.started_at, c.run_id, c.tool, c.status, c.outcome, c.elapsed_ms,
       (SELECT arg_max(s.step, s.elapsed_ms) FROM tool_call_steps s WHERE s.call_id = c.call_id)
         AS slowest_step,
       (SELECT max(s.elapsed_ms) FROM tool_call_steps s WHERE s.call_id = c.call_id)
         AS slowest_step_ms,
       c.summary
FROM tool_calls c
WHERE ($tool IS NULL OR c.tool = $tool)
  AND ($since IS NULL OR c.started_at >= CAST($since AS TIMESTAMP))
ORDER BY c.elapsed_ms DESC, c.call_id
LIMIT CAST($limit AS INTEGER);
