-- Question: What happened inside one call, step by step (the SQL behind `tooltrace autopsy`)?
-- @param call_id VARCHAR : the full call id (required)
-- Columns: seq, step, started_at, offset_ms (since the call started), elapsed_ms, decider, decision, detail
SELECT s.seq, s.step, s.started_at,
       round(epoch_us(s.started_at) / 1000.0 - epoch_us(c.started_at) / 1000.0, 3) AS offset_ms,
       s.elapsed_ms, s.decider, s.decision, s.detail
FROM tool_call_steps s
JOIN tool_calls c ON c.call_id = s.call_id
WHERE s.call_id = $call_id
ORDER BY s.started_at, s.seq;
