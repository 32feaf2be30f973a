"""An agent process whose calls of ``send`` wait in the home's approval queue.

``python approval_agent.py HOME WORKSPACE TIMEOUT_S [TO ...]``: one call of ``send`` per TO (in
order), each asking the queue; prints one JSON line per envelope (status, call id, summary).
Webhooks: ``TT_WEBHOOK_URL`` and ``TT_WEBHOOK_SECRET`` (and ``TT_WEBHOOK_STYLE``) add a notifier.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson

from tooltrace import Policy, Principal, RequireApproval, ToolCall, create_registry, tool
from tooltrace.policy import ApprovalQueue, WebhookNotifier

#: A planted secret: no page of the console and no queue file may show it.
CANARY = "ghp_" + "Zq8Wn3Rt6Yu1Io4Pa7Sd0Fg2Hj5Kl9Xc3Vb"


@tool(capability="network", effect="external")
def send(to: str, token: str = "") -> dict[str, Any]:
    """Pretend to send a message."""
    return {"sent": to}


def main() -> None:
    home, ws, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    notify = []
    if os.environ.get("TT_WEBHOOK_URL"):
        notify.append(WebhookNotifier(os.environ["TT_WEBHOOK_URL"],
                                      os.environ["TT_WEBHOOK_SECRET"].encode(),
                                      style=os.environ.get("TT_WEBHOOK_STYLE", "json"),
                                      console_url=os.environ.get("TT_CONSOLE_URL")))
    reg = create_registry(
        ws, home=home, tracing=False, metrics=False, logging=False, builtins=False,
        approver=ApprovalQueue(home, timeout=timeout, notify=notify), tools=[send],
        policy=Policy([RequireApproval(tools=frozenset({"send"}), name="sends_need_approval")]),
    )
    try:
        for to in sys.argv[4:]:
            env = reg.call(ToolCall("send", {"to": to, "token": CANARY},
                                    principal=Principal(user="dana", agent="mailer")))
            print(orjson.dumps({"to": to, "status": env.status.value, "call_id": env.call_id,
                                "summary": env.summary}).decode(), flush=True)
    finally:
        reg.shutdown()


if __name__ == "__main__":
    main()
