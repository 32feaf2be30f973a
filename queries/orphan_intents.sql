-- Question: Which calls did strict audit record as about to execute, with no final record after (the process died mid-call)?
-- @param since TIMESTAMP = NULL : only intents recorded at or after this (UTC)
-- Columns: call_id, started_at, run_id, tool, args_redacted, segment (the writer's segment file), line
SELECT i.call_id, i.started_at, i.run_id, i.tool, i.args_redacted, i.segment, i.line
FROM tool_call_intents i
WHERE NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.call_id = i.call_id)
  AND ($since IS NULL OR i.started_at >= CAST($since AS TIMESTAMP))
ORDER BY i.call_id;
