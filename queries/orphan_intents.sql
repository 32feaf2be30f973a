-- Question: Which calls did strict audit record as about to execute, with no final record after (the process died mid-call)?
-- @param since TIMESTAMP = NULL : only intents recorded at or after this (UTC)
-- Columns: call_id, started_at, run_id, tool, args_redacted, segment (the writer's segment file), line
SELECT call_id, started_at, run_id, tool, args_redacted, segment, line
FROM tool_call_intents
WHERE orphaned
  AND ($since IS NULL OR started_at >= CAST($since AS TIMESTAMP))
ORDER BY call_id;
