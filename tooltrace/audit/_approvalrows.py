"""The ``approvals`` view: each approver's answer, with the calls it covered.

An approval record (line kind ``a``) says who decided, why, when, about which tool, principal
and argument digest, and until when it may be reused. The calls it covered are the calls whose
``approval`` step approved on it: the call it was asked about (decider ``user:<who>``) and every
later call that reused it within its time to live (decider ``approval:<id>``); both steps name
the approval in their detail (``approval_id``). A call counts only if it ran with the approved
digest: when a pre-hook later changed its arguments, the policy (or approval) step that judged
the new arguments records their ``args_sha256``, and a different one there means the approval
did not cover the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._store import AuditStore
    from ._storerecords import QueryResult

__all__ = ["APPROVALS_VIEW", "list_approvals"]

#: The SQL that defines the ``approvals`` view over ``_all_approvals`` and ``_all_steps``.
APPROVALS_VIEW = """
CREATE OR REPLACE VIEW approvals AS
  SELECT a.approval_id, a.approved_at, a.decision, a.approver, a.reason, a.tool, a.rule,
         a.args_sha256, a.args_redacted::JSON AS args_redacted, a.expires_at, a.call_id,
         a.run_id, a.principal_user,
         a.principal_agent, a.principal_tenant, a.principal_roles::JSON AS principal_roles,
         coalesce(u.covered_calls, []::VARCHAR[]) AS covered_calls,
         coalesce(u.uses, 0) AS uses, a.writer, a.segment, a.line
  FROM _all_approvals a LEFT JOIN (
    SELECT s.approval_id, list(DISTINCT s.call_id ORDER BY s.call_id) AS covered_calls,
           count(*) AS uses
    FROM (
      SELECT call_id, seq, json_extract_string(detail, '$.approval_id') AS approval_id,
             json_extract_string(detail, '$.args_sha256') AS digest
      FROM _all_steps
      WHERE step = 'approval' AND decision = 'approve' AND detail LIKE '%"approval_id"%'
    ) s JOIN _all_approvals g ON g.approval_id = s.approval_id
    WHERE coalesce(s.digest, g.args_sha256) = g.args_sha256
      AND NOT EXISTS (
        SELECT 1 FROM _all_steps l
        WHERE l.call_id = s.call_id AND l.seq > s.seq AND l.step IN ('policy', 'approval')
          AND l.detail LIKE '%"args_sha256"%'
          AND json_extract_string(l.detail, '$.args_sha256') <> g.args_sha256)
    GROUP BY 1
  ) u ON u.approval_id = a.approval_id;
"""


def list_approvals(
    store: AuditStore,
    *,
    tool: str | None = None,
    since: str | None = None,
    limit: int = 50,
) -> QueryResult:
    """Approvers' answers, newest first: ``tool`` only, ``since`` (a timestamp) on."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": int(limit)}
    if tool is not None:
        where.append("tool = $tool")
        params["tool"] = tool
    if since is not None:
        where.append("approved_at >= CAST($since AS TIMESTAMP)")
        params["since"] = since
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    return store.sql(
        "SELECT approval_id, approved_at, decision, approver, tool, args_sha256, args_redacted,"
        " reason,"
        " expires_at, rule, call_id, run_id, principal_user, principal_agent,"
        " principal_tenant, covered_calls, uses"
        f" FROM approvals {clause} ORDER BY approved_at DESC, approval_id DESC LIMIT $limit",
        params)
