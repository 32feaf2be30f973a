"""The README's framework example runs as printed: its LangChain block, executed with a registry
from ``create_registry`` and a scripted fake chat model, builds an agent whose tool calls go
through the registry (policy included) and into the audit trail."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from support.components import extra, require_module

require_module("langchain", extra("langchain"))

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402

import tooltrace  # noqa: E402
from tooltrace.telemetry.audit import AuditStore  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


class _Model(GenericFakeChatModel):
    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> _Model:  # type: ignore[override]
        return self


def _langchain_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    hits = [b for b in blocks if "tooltrace.integrations.langchain" in b]
    assert len(hits) == 1, "the README shows one LangChain example"
    lines = [ln.strip() for ln in hits[0].strip().splitlines()]
    assert len(lines) == 3, lines
    return "\n".join(lines)


def test_the_readme_langchain_example_polices_and_records_every_tool_call(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "todo.txt").write_text("water the plants\n")
    home = tmp_path / "home"
    registry = tooltrace.create_registry(workspace=workspace, home=home, metrics=False,
                                         logging=False)
    model = _Model(messages=iter([
        AIMessage("", tool_calls=[
            {"name": "read_text", "args": {"path": "notes/todo.txt"}, "id": "c1"},
            {"name": "read_text", "args": {"path": "../outside.txt"}, "id": "c2"},
        ]),
        AIMessage("done"),
    ]))
    namespace: dict[str, Any] = {"registry": registry, "model": model}
    try:
        exec(compile(_langchain_block(), "README.md", "exec"), namespace)
        out = namespace["agent"].invoke({"messages": [("user", "read my notes")]})
    finally:
        registry.shutdown()
    replies = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert "water the plants" in str(replies["c1"].content)
    assert replies["c2"].status == "error"  # the path escape was refused by policy
    with AuditStore(home) as store:
        rows = store.sql("SELECT tool, status, reject_stage FROM tool_calls ORDER BY call_id").rows
    assert [(t, s, r or None) for t, s, r in rows] == [("read_text", "ok", None),
                                                      ("read_text", "rejected", "policy")]
