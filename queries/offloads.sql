-- Question: Which results were too big to stay inline and went to an artifact, and how big were they?
-- @param tool VARCHAR = NULL : only this tool
-- @param since TIMESTAMP = NULL : only calls started at or after this (UTC)
-- @param limit INTEGER = 100 : at most this many rows, biggest first
-- Columns: call_id, started_at, run_id, tool, artifact_chars, artifact_bytes, artifact_sha256, artifact_path (relative to the tooltrace home), preview_chars (what stayed inline)
SELECT call_id, started_at, run_id, tool, artifact_chars, artifact_bytes, artifact_sha256,
       artifact_path, length(result_preview) AS preview_chars
FROM tool_calls
WHERE artifact_path IS NOT NULL
  AND ($tool IS NULL OR tool = $tool)
  AND ($since IS NULL OR started_at >= CAST($since AS TIMESTAMP))
ORDER BY artifact_bytes DESC, call_id
LIMIT CAST($limit AS INTEGER);
