"""Redaction keeps a result valid for its output schema: the server ``tests/mcp_servers/rich.py``
(the SDK's ``MCPServer``) returns structured content whose secret-naming fields are a number
(``pin``), an object (``credentials``) and an array (``secrets``); through the proxy, the
official SDK client (which validates structured content against the tool's output schema)
accepts the result, the secrets are gone from it (its JSON text block too) and from the audit
trail. A secret-naming field whose schema allows no marker (an enum) gets the result withheld
as an ``isError`` result instead of an invalid one.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import jsonschema
import pytest
from test_mcp_proxy import REPO, audit_rows, proxy_session, write_config

RICH = str(REPO / "tests" / "mcp_servers" / "rich.py")
_HEX = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,}")
SECRETS = ("4821", "ada-admin", "hunter2-hunter2", "s3cr3t-one", "s3cr3t-two")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("schemasafe")
    config = write_config(tmp, f"""
[proxy]
home = "home"
[servers.rich]
command = {json.dumps(sys.executable)}
args = [{json.dumps(RICH)}]
""")

    async def scenario() -> dict[str, Any]:
        res: dict[str, Any] = {}
        async with proxy_session(config) as s:
            res["tools"] = {t.name: t for t in (await s.list_tools()).tools}
            # call_tool validates structured content against the listed output schema.
            res["account"] = await s.call_tool("account", {})
            res["auth_mode"] = await s.call_tool("auth_mode", {})
        return res

    res = asyncio.run(scenario())
    res["rows"] = list(audit_rows(tmp / "home").values())
    return res


def test_type_preserving_redaction_keeps_the_result_valid(out: dict[str, Any]) -> None:
    res = out["account"]
    assert not res.is_error
    assert res.structured_content == {
        "user": "ada", "pin": 0, "enabled": True,
        "credentials": {"username": "[REDACTED:secret_field]",
                        "password": "[REDACTED:secret_field]"},
        "secrets": ["[REDACTED:secret_field]", "[REDACTED:secret_field]"]}
    jsonschema.validate(res.structured_content, out["tools"]["account"].output_schema)
    # The JSON text block says the same as the structured content, secrets gone.
    [block] = res.content
    assert json.loads(block.text) == res.structured_content


def test_secrets_leak_neither_to_the_client_nor_to_the_audit_trail(out: dict[str, Any]
                                                                    ) -> None:
    # Ids and digests are random hex: "4821" may turn up in one by chance.
    wire = _HEX.sub("-", out["account"].model_dump_json())
    rows = _HEX.sub("-", json.dumps([r for r in out["rows"] if r["tool"] == "account"],
                                    default=str))
    for secret in SECRETS:
        assert secret not in wire, secret
        assert secret not in rows, secret


def test_a_schema_with_no_room_for_a_marker_gets_the_result_withheld(out: dict[str, Any]
                                                                     ) -> None:
    res = out["auth_mode"]
    assert res.is_error
    assert "withheld" in res.content[0].text
    assert res.meta["tooltrace/error_type"] == "redacted_invalid"
    assert res.meta["tooltrace/changed"] == ["withheld"]
    assert res.structured_content is None
