"""May this call run? Rules and their decisions, approvals bound to the arguments and the
durable approval queue with its webhooks, the workspace path policy, and the policy file
(TOML and Cedar) in ``tooltrace.policy.file``.

The names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._approvals import ApprovalCache as ApprovalCache
    from ._approvals import Reusable as Reusable
    from ._approvals import ttl_seconds as ttl_seconds
    from ._paths import PathPolicyError as PathPolicyError
    from ._paths import ResolvedPath as ResolvedPath
    from ._paths import Workspace as Workspace
    from ._paths import canonical_form as canonical_form
    from ._paths import reads_only as reads_only
    from ._queue import AlreadyAnswered as AlreadyAnswered
    from ._queue import ApprovalExpired as ApprovalExpired
    from ._queue import ApprovalNotFound as ApprovalNotFound
    from ._queue import ApprovalQueue as ApprovalQueue
    from ._queue import PendingApproval as PendingApproval
    from ._queue import QueueAnswer as QueueAnswer
    from ._queue import QueueError as QueueError
    from ._queue import answerer as answerer
    from ._queue import queue_dir as queue_dir
    from ._rules import DEFAULT_MODES as DEFAULT_MODES
    from ._rules import ApprovalDecision as ApprovalDecision
    from ._rules import ApprovalRequest as ApprovalRequest
    from ._rules import DenyCommandPatterns as DenyCommandPatterns
    from ._rules import DenyNested as DenyNested
    from ._rules import DenyPrivateNetwork as DenyPrivateNetwork
    from ._rules import Mode as Mode
    from ._rules import Policy as Policy
    from ._rules import PolicyDecision as PolicyDecision
    from ._rules import PolicyRequest as PolicyRequest
    from ._rules import RequireApproval as RequireApproval
    from ._rules import Rule as Rule
    from ._rules import Verdict as Verdict
    from ._rules import arguments_sha256 as arguments_sha256
    from ._webhooks import DELIVERY_HEADER as DELIVERY_HEADER
    from ._webhooks import KEY_HEADER as KEY_HEADER
    from ._webhooks import SIGNATURE_HEADER as SIGNATURE_HEADER
    from ._webhooks import TOLERANCE_S as TOLERANCE_S
    from ._webhooks import SignatureError as SignatureError
    from ._webhooks import WebhookNotifier as WebhookNotifier
    from ._webhooks import request_payload as request_payload
    from ._webhooks import sign as sign
    from ._webhooks import sign_callback as sign_callback
    from ._webhooks import slack_message as slack_message
    from ._webhooks import verify_signature as verify_signature

_PUBLIC: dict[str, str] = {
    "ApprovalCache": "._approvals",
    "DEFAULT_MODES": "._rules",
    "Reusable": "._approvals",
    "ttl_seconds": "._approvals",
    "PathPolicyError": "._paths",
    "ResolvedPath": "._paths",
    "Workspace": "._paths",
    "canonical_form": "._paths",
    "reads_only": "._paths",
    "AlreadyAnswered": "._queue",
    "ApprovalExpired": "._queue",
    "ApprovalNotFound": "._queue",
    "ApprovalQueue": "._queue",
    "PendingApproval": "._queue",
    "QueueAnswer": "._queue",
    "QueueError": "._queue",
    "answerer": "._queue",
    "queue_dir": "._queue",
    "ApprovalDecision": "._rules",
    "ApprovalRequest": "._rules",
    "DenyCommandPatterns": "._rules",
    "DenyNested": "._rules",
    "DenyPrivateNetwork": "._rules",
    "Mode": "._rules",
    "Policy": "._rules",
    "PolicyDecision": "._rules",
    "PolicyRequest": "._rules",
    "RequireApproval": "._rules",
    "Rule": "._rules",
    "Verdict": "._rules",
    "arguments_sha256": "._rules",
    "DELIVERY_HEADER": "._webhooks",
    "KEY_HEADER": "._webhooks",
    "SIGNATURE_HEADER": "._webhooks",
    "SignatureError": "._webhooks",
    "TOLERANCE_S": "._webhooks",
    "WebhookNotifier": "._webhooks",
    "request_payload": "._webhooks",
    "sign": "._webhooks",
    "sign_callback": "._webhooks",
    "slack_message": "._webhooks",
    "verify_signature": "._webhooks",
}

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())

__all__ = sorted(_PUBLIC)
