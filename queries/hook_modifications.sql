-- Question: Which hooks changed a call's arguments, and what exactly did each change (the redacted argument diff)?
-- @param hook VARCHAR = NULL : only this hook (its name, without the `hook:` prefix)
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- Columns: call_id, started_at (of the hook step), run_id, tool, phase (pre_hook / post_hook), hook, reason, diff (JSON: argument -> {old, new}, redacted), status (what the call returned), outcome (its final outcome)
SELECT s.call_id, s.started_at, c.run_id, c.tool, s.step AS phase,
       substr(s.decider, 6) AS hook,
       s.detail ->> 'reason' AS reason,
       s.detail -> 'diff' AS diff,
       c.status, c.outcome
FROM tool_call_steps s
JOIN tool_calls c ON c.call_id = s.call_id
WHERE s.decision = 'modify'
  AND s.decider LIKE 'hook:%'
  AND ($hook IS NULL OR s.decider = 'hook:' || $hook)
  AND ($since IS NULL OR c.started_at >= CAST($since AS TIMESTAMP))
ORDER BY s.call_id, s.seq;
