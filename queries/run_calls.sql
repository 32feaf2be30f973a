-- Question: What did one run do, call by call, in order?
-- @param run_id VARCHAR : the run id (required)
-- Columns: n (position in the run), call_id, started_at, tool, status (what the call returned), outcome (its final outcome), reject_stage, elapsed_ms, hook_modified, artifact_path, summary, steps (step:decision in order)
SELECT row_number() OVER (ORDER BY c.started_at, c.call_id) AS n,
       c.call_id, c.started_at, c.tool, c.status, c.outcome, c.reject_stage, c.elapsed_ms,
       c.hook_modified, c.artifact_path, c.summary,
       (SELECT string_agg(s.step || ':' || s.decision, ' > ' ORDER BY s.started_at, s.seq)
          FROM tool_call_steps s WHERE s.call_id = c.call_id) AS steps
FROM tool_calls c
WHERE c.run_id = $run_id
ORDER BY c.started_at, c.call_id;
