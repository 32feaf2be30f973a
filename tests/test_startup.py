"""What a process that only builds the default registry leaves unloaded: ``jsonschema`` (the
built-in tools' schemas pass the registration walk) and OpenTelemetry (no OTLP endpoint is
set, so there is no span sink); with an endpoint set, the span sink and its SDK are there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CODE = """
import json, sys, tooltrace
r = tooltrace.create_registry(workspace=sys.argv[1], home=sys.argv[2],
                              log_stream=open("/dev/null", "w"))
r.shutdown()
print(json.dumps({"tools": sorted(r.tool_names()),
                  "jsonschema": "jsonschema" in sys.modules,
                  "opentelemetry": any(m.startswith("opentelemetry") for m in sys.modules),
                  "sdk": "opentelemetry.sdk.trace" in sys.modules}))
"""


def _start(tmp_path: Path, **env: str) -> dict[str, object]:
    (tmp_path / "ws").mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items()
            if k != "TOOLTRACE_HOME" and not k.startswith("OTEL_")}
    p = subprocess.run(
        [sys.executable, "-c", _CODE, str(tmp_path / "ws"), str(tmp_path / "home")],
        capture_output=True, text=True, timeout=120, env={**base, **env},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def test_create_registry_without_an_otlp_endpoint_loads_neither_jsonschema_nor_opentelemetry(
    tmp_path: Path,
) -> None:
    out = _start(tmp_path)
    tools = out["tools"]
    assert isinstance(tools, list) and {"read_text", "write_text", "run_command"} <= set(tools)
    assert out["jsonschema"] is False
    assert out["opentelemetry"] is False


def test_create_registry_with_an_otlp_endpoint_loads_the_span_sink(tmp_path: Path) -> None:
    # A closed loopback port: a registry that makes no call exports nothing.
    out = _start(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert out["sdk"] is True and out["jsonschema"] is False
