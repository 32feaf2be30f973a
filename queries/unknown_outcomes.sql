-- Question: Which calls returned `unknown` after execution had started (dispatched, end state not confirmed), and what became of them (their final outcome)?
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- Columns (what a narrow terminal keeps first): call_id, tool, outcome (its final outcome: differs from unknown once a late `resolved` step arrived), resolved_at, elapsed_ms, error_type, summary, resolution_summary, started_at, status (what the call returned: unknown), run_id, events (execute / deadline / cancel / resolved steps in order)
SELECT c.call_id, c.tool, c.outcome, c.resolved_at, c.elapsed_ms, c.error_type, c.summary,
       c.resolution_summary, c.started_at, c.status, c.run_id,
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
