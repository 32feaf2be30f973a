-- Question: Which policy rules and which approvers denied calls, how often, and for which tools?
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- Columns: stage (policy / approval), rule, approver (who denied an approval; NULL for a policy rule), denials, tools (distinct tools denied), first_at, last_at
WITH d AS (
    SELECT s.step AS stage,
           CASE WHEN s.step = 'policy' THEN substr(s.decider, 8)
                ELSE coalesce(s.detail ->> 'rule', '') END AS rule,
           CASE WHEN s.step = 'approval' AND s.decider LIKE 'user:%' THEN substr(s.decider, 6)
                END AS approver,
           c.tool, s.started_at
    FROM tool_call_steps s
    JOIN tool_calls c ON c.call_id = s.call_id
    WHERE s.step IN ('policy', 'approval')
      AND s.decision = 'deny'
      AND ($since IS NULL OR c.started_at >= CAST($since AS TIMESTAMP))
)
SELECT stage, rule, approver, count(*) AS denials,
       list_sort(list(DISTINCT tool)) AS tools,
       min(started_at) AS first_at, max(started_at) AS last_at
FROM d
GROUP BY stage, rule, approver
ORDER BY denials DESC, stage, rule, approver;
