-- Question: Per tool (with the definitions of the Prometheus recording rules): how many calls by status and final outcome, what share was rejected for bad parameters, by policy/approval or by a hook, what share of successes was offloaded, and what are the p50/p95 latencies?
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- @param tool VARCHAR = NULL : only this tool
-- `ok` and `unknown` count what calls returned (status), as the metrics do; `outcome_ok` and
-- `outcome_unknown` count final outcomes (a call that returned unknown and was resolved later
-- as ok counts in `unknown` and in `outcome_ok`; `outcome_unknown` is what is still unresolved).
-- Columns: tool, calls, ok (returned ok), rejected, failed, cancelled, unknown (returned unknown), outcome_ok (final outcome ok), outcome_unknown (still unknown), param_reject_ratio (reject_stage params / calls), policy_reject_ratio (reject_stage policy or approval / calls), hook_block_ratio (reject_stage hook / calls), offload_ratio (offloaded / ok calls), p50_ms, p95_ms
SELECT tool,
       count(*) AS calls,
       count(*) FILTER (WHERE status = 'ok') AS ok,
       count(*) FILTER (WHERE status = 'rejected') AS rejected,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE status = 'unknown') AS unknown,
       count(*) FILTER (WHERE outcome = 'ok') AS outcome_ok,
       count(*) FILTER (WHERE outcome = 'unknown') AS outcome_unknown,
       round(count(*) FILTER (WHERE reject_stage = 'params') / count(*), 4) AS param_reject_ratio,
       round(count(*) FILTER (WHERE reject_stage IN ('policy', 'approval')) / count(*), 4)
         AS policy_reject_ratio,
       round(count(*) FILTER (WHERE reject_stage = 'hook') / count(*), 4) AS hook_block_ratio,
       round(coalesce(count(*) FILTER (WHERE status = 'ok' AND artifact_path IS NOT NULL)
                      / nullif(count(*) FILTER (WHERE status = 'ok'), 0), 0), 4) AS offload_ratio,
       round(quantile_cont(elapsed_ms, 0.5), 3) AS p50_ms,
       round(quantile_cont(elapsed_ms, 0.95), 3) AS p95_ms
FROM tool_calls
WHERE ($since IS NULL OR started_at >= CAST($since AS TIMESTAMP))
  AND ($tool IS NULL OR tool = $tool)
GROUP BY tool
ORDER BY calls DESC, tool;
