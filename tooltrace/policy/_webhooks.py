"""Signed webhooks for the approval queue: tell people where they are that a call waits, and take
their answer back.

Outgoing: ``WebhookNotifier(url, secret)`` is a notifier of ``ApprovalQueue(notify=[...])``. On
each new request it POSTs a JSON payload (``style="json"``: the request, redacted, and where to
answer it) or a Slack-compatible incoming-webhook message (``style="slack"``: ``text`` and
``blocks``) to ``url``, signed: the header ``X-Tooltrace-Signature: t=<unix seconds>,v1=<hex>``
holds the HMAC-SHA256, under the shared secret, of ``<t>.`` followed by the body, and
``X-Tooltrace-Delivery`` a unique id. A receiver checks it with ``verify_signature``, which
refuses a signature older (or newer) than five minutes, so a captured request cannot be played
back later.

Incoming: the console's callback endpoint (``POST /api/callback`` of ``tooltrace serve
--callback-key NAME=FILE``) takes a JSON answer ``{"approval_id", "decision": "approve"|"deny",
"who", "reason", "ttl_s"}`` signed the same way with the key ``NAME`` (header
``X-Tooltrace-Key``). ``sign_callback`` builds one. The answer is recorded as ``<who>@webhook.
<NAME>``: the key authenticates the sender, the sender vouches for ``who``. A signature is
accepted once; the queue accepts only the first answer to a request anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import urllib.request
import uuid
from dataclasses import asdict
from typing import Any

import orjson

from ._queue import PendingApproval

__all__ = [
    "DELIVERY_HEADER",
    "KEY_HEADER",
    "SIGNATURE_HEADER",
    "TOLERANCE_S",
    "SignatureError",
    "WebhookNotifier",
    "request_payload",
    "sign",
    "sign_callback",
    "slack_message",
    "verify_signature",
]

SIGNATURE_HEADER = "X-Tooltrace-Signature"
DELIVERY_HEADER = "X-Tooltrace-Delivery"
KEY_HEADER = "X-Tooltrace-Key"
#: How far a signature's time may be from the receiver's clock, in seconds.
TOLERANCE_S = 300


class SignatureError(ValueError):
    """A webhook's signature is missing, malformed, stale or wrong: refuse the request."""


def _mac(secret: bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: bytes, body: bytes, timestamp: int | None = None) -> str:
    """The ``X-Tooltrace-Signature`` value for ``body`` (``t=<unix seconds>,v1=<hex>``)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_mac(secret, t, body)}"


def verify_signature(secret: bytes, body: bytes, header: str | None, *,
                     tolerance_s: int = TOLERANCE_S, now: float | None = None) -> int:
    """Check a signature header against ``body``; return its timestamp. Raises
    ``SignatureError`` when it is missing, malformed, outside the tolerance or wrong."""
    if not header:
        raise SignatureError("no signature")
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        raise SignatureError("malformed signature") from None
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        raise SignatureError("signature too old or from the future")
    if not hmac.compare_digest(_mac(secret, t, body), given):
        raise SignatureError("signature does not match")
    return t


def sign_callback(secret: bytes, approval_id: str, *, approve: bool, who: str,
                  reason: str = "", ttl_s: float | None = None,
                  timestamp: int | None = None) -> tuple[bytes, str]:
    """The body and signature header of an answer for the console's callback endpoint."""
    body = orjson.dumps({"approval_id": approval_id, "decision": "approve" if approve else "deny",
                         "who": who, "reason": reason, "ttl_s": ttl_s})
    return body, sign(secret, body, timestamp)


def request_payload(p: PendingApproval, console_url: str | None = None) -> dict[str, Any]:
    """The JSON payload announcing a request: the request (redacted) and where to answer."""
    out: dict[str, Any] = {"type": "approval.requested", "approval": asdict(p)}
    if console_url:
        out["answer_url"] = f"{console_url.rstrip('/')}/approvals#{p.approval_id}"
        out["callback_url"] = f"{console_url.rstrip('/')}/api/callback"
    return out


def _who(p: PendingApproval) -> str:
    pr = p.principal or {}
    parts = [f"{k} {pr[k]}" for k in ("user", "agent", "tenant") if pr.get(k)]
    return ", ".join(parts) or "no principal"


def slack_message(p: PendingApproval, console_url: str | None = None) -> dict[str, Any]:
    """A Slack incoming-webhook message (``text`` and ``blocks``) announcing a request."""
    args = orjson.dumps(p.arguments, option=orjson.OPT_SORT_KEYS).decode()[:500]
    text = (f"Approval needed: {p.tool} (rule {p.rule}) for {_who(p)}. "
            f"Request {p.approval_id}, expires in "
            f"{max(0, (p.expires_at_us - time.time_ns() // 1000) // 1_000_000)} s.")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Approval needed:* `{p.tool}`"
                                     f"\n{p.reason}"}},
        {"type": "section", "fields": [
            {"type": "mrkdwn", "text": f"*Rule*\n{p.rule}"},
            {"type": "mrkdwn", "text": f"*For*\n{_who(p)}"},
            {"type": "mrkdwn", "text": f"*Request*\n`{p.approval_id}`"},
            {"type": "mrkdwn", "text": f"*Arguments sha256*\n`{p.arguments_sha256[:16]}`"}]},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{args}```"}},
    ]
    if console_url:
        link = f"{console_url.rstrip('/')}/approvals#{p.approval_id}"
        blocks.append({"type": "section",
                       "text": {"type": "mrkdwn", "text": f"<{link}|Answer in the console>"}})
    return {"text": text, "blocks": blocks}


class WebhookNotifier:
    """Announce each new approval request to ``url`` with a signed POST.

    ``secret``: the shared HMAC key (bytes). ``style``: ``json`` (``request_payload``) or
    ``slack`` (``slack_message``). ``console_url``: where people answer (put in the payload).
    A delivery that fails is retried once; it never raises into the waiting call.
    """

    def __init__(self, url: str, secret: bytes, *, style: str = "json",
                 console_url: str | None = None, timeout_s: float = 5.0) -> None:
        if style not in ("json", "slack"):
            raise ValueError("style must be 'json' or 'slack'")
        if not url.startswith(("http://", "https://")):
            raise ValueError("a webhook URL starts with http:// or https://")
        if not secret:
            raise ValueError("a webhook needs a secret to sign with")
        self.url = url
        self._secret = secret
        self.style = style
        self.console_url = console_url
        self.timeout_s = timeout_s
        self.delivered = 0
        self.failed = 0

    def __repr__(self) -> str:
        return f"WebhookNotifier({self.url!r}, style={self.style!r})"

    def __call__(self, pending: PendingApproval) -> None:
        """Deliver the announcement of ``pending`` (errors counted, never raised)."""
        payload = (slack_message(pending, self.console_url) if self.style == "slack"
                   else request_payload(pending, self.console_url))
        body = orjson.dumps(payload)
        for _attempt in range(2):
            req = urllib.request.Request(self.url, data=body, method="POST", headers={
                "Content-Type": "application/json", SIGNATURE_HEADER: sign(self._secret, body),
                DELIVERY_HEADER: str(uuid.uuid4()), "User-Agent": "tooltrace-webhook"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    if 200 <= resp.status < 300:
                        self.delivered += 1
                        return
            except OSError:
                continue
        self.failed += 1
