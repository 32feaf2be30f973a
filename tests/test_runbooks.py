"""Every alert's runbook page is usable at 3 a.m.: what to look at (dashboard panels that exist,
PromQL to paste) and the commands to run as copyable blocks."""

from __future__ import annotations

import json
import re

import pytest
from support.sre_kit import REPO, load_build

build = load_build()
RUNBOOKS = REPO / "docs" / "operations" / "runbooks"
ALERTS = [a for a in build.alert_names() + build.slo().slo_alert_names()
          if a != "TooltraceCompactionBacklog"]  # its page is written with the compaction work


def _names() -> set[str]:
    """Dashboard titles, row titles and panel titles of the shipped dashboards."""
    out: set[str] = set()
    for f in build.DASHBOARD_FILES:
        d = json.loads((REPO / "dashboards" / f).read_text())
        out.add(d["title"])
        out.update(p["title"] for p in d["panels"])
    return out


@pytest.mark.parametrize("alert", ALERTS)
def test_each_runbook_shows_where_to_look_and_what_to_run(alert: str) -> None:
    text = (RUNBOOKS / f"{alert.lower()}.md").read_text()
    look = text[text.index("**Look at:**") + len("**Look at:**"):]
    look = look[:look.index("```")]
    mentioned = {" ".join(m.split()) for m in re.findall(r"\*([^*]+)\*", look)}
    assert mentioned, alert
    assert mentioned <= _names(), mentioned - _names()
    assert re.search(r"```promql\n[^`]*(?:tooltrace_|tool:|tool_slo:)[^`]*```", text), alert
    commands = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert commands and all(c.strip() for c in commands), alert
