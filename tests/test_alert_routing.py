"""The shipped Alertmanager configuration (docker/alertmanager/alertmanager.yml), run by a real
Alertmanager: a fast error-budget burn silences the slow burn of the same tool and objective,
and an outcome still unknown silences the warning that the call returned unknown."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from support.sre_kit import REPO
from support.sre_prom import AlertmanagerServer, poll

SHIPPED = REPO / "docker" / "alertmanager" / "alertmanager.yml"


class ShippedAlertmanager(AlertmanagerServer):
    """Alertmanager on the shipped configuration (its receivers have no integrations)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, webhook_url="http://127.0.0.1:9/unused")
        self.config_path.write_text(SHIPPED.read_text())


def _post(am: AlertmanagerServer, alerts: list[dict[str, Any]]) -> None:
    body = json.dumps([{"labels": a, "annotations": {}} for a in alerts]).encode()
    req = urllib.request.Request(am.url + "/api/v2/alerts", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def _states(am: AlertmanagerServer) -> dict[tuple[str, str, str], dict[str, Any]]:
    with urllib.request.urlopen(am.url + "/api/v2/alerts", timeout=5) as resp:
        alerts = json.loads(resp.read())
    return {(a["labels"]["alertname"], a["labels"]["tool"], a["labels"].get("slo", "")):
            a["status"] for a in alerts}


def _alert(name: str, severity: str, tool: str, **extra: str) -> dict[str, str]:
    return {"alertname": name, "severity": severity, "service": "tooltrace", "tool": tool,
            **extra}


def test_the_fast_burn_inhibits_the_slow_burn_of_the_same_objective(tmp_path: Path) -> None:
    with ShippedAlertmanager(tmp_path / "am") as am:
        _post(am, [
            _alert("ToolErrorBudgetBurnFast", "critical", "read_text", slo="availability"),
            _alert("ToolErrorBudgetBurnSlow", "warning", "read_text", slo="availability"),
            # Another objective of the same tool, and another tool: not the same incident.
            _alert("ToolErrorBudgetBurnSlow", "warning", "read_text", slo="latency"),
            _alert("ToolErrorBudgetBurnSlow", "warning", "run_command", slo="availability"),
            _alert("ToolCallOutcomeUnknown", "critical", "deploy", instance="i1", job="agent"),
            _alert("ToolCallReturnedUnknown", "warning", "deploy"),
            _alert("ToolCallReturnedUnknown", "warning", "fetch"),
        ])

        def settled() -> dict[tuple[str, str, str], dict[str, Any]] | None:
            states = _states(am)
            slow = states.get(("ToolErrorBudgetBurnSlow", "read_text", "availability"))
            return states if len(states) == 7 and slow and slow["state"] == "suppressed" else None

        states = poll(settled, 30, "the slow burn to be inhibited")
    assert states[("ToolErrorBudgetBurnSlow", "read_text", "availability")]["inhibitedBy"]
    for key in [("ToolErrorBudgetBurnFast", "read_text", "availability"),
                ("ToolErrorBudgetBurnSlow", "read_text", "latency"),
                ("ToolErrorBudgetBurnSlow", "run_command", "availability"),
                ("ToolCallOutcomeUnknown", "deploy", ""),
                ("ToolCallReturnedUnknown", "fetch", "")]:
        assert states[key]["state"] == "active" and not states[key]["inhibitedBy"], key
    assert states[("ToolCallReturnedUnknown", "deploy", "")]["state"] == "suppressed"
