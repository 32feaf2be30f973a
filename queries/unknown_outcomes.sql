-- Question: Which calls returned `unknown` after execution had started (dispatched, end state not confirmed), and what became of them (their final outcome)?
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- Columns: call_id, started_at, run_id, tool, elapsed_ms, error_type, summary, status (what the call returned: unknown), outcome (its final outcome: differs from unknown once a late `resolved` step arrived), resolved_at, resolution_summary, events (execute / deadline / cancel / resolved steps in order)
SELECT c.call_id, c.started_at, c.run_id, c.tool, c.elapsed_ms, c.error_type, c.summary,
       c.status, c.outcome, c.resolved_at, c.resolution_summary,
       (SELECT string_agg(s.step || ':' || s.decision, ' > ' ORDER BY s.started_at, s.seq)
          FROM tool_call_steps s
         WHERE s.call_id = c.call_id
           AND s.step IN ('execute', 'deadline', 'cancel_requested', 'cancelled', 'stopped',
                          'resolved'))
         AS events
FROM tool_calls c
WHERE c.status = 'unknown'
  AND c.execution_started
  AND ($since IS NULL OR c.started_at >= CAST($since AS TIMESTAMP))
ORDER BY c.call_id;
