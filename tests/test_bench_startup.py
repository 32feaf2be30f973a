"""The startup section of the benchmarks runs and reports what it says: ``import tooltrace``,
the sinks' libraries, ``create_registry`` + ``shutdown`` and registering tools, each in fresh
processes, with the two startup targets judged from the same run.

Not a speed test (a tiny run's figures mean nothing): it keeps the section from rotting.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "figures.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TOOLTRACE_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sections", "startup", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout, json.loads(out.read_text())


def test_the_startup_section_measures_every_probe_and_judges_both_targets(
    tmp_path: Path,
) -> None:
    from bench.startup import CONFIGS

    text, figures = _run(tmp_path)
    st = figures["startup"]
    assert st["rounds"] == 1 and st["sizes"] == [10, 100]
    assert st["configs"] == list(CONFIGS)
    med, proc = st["median_ms"], st["process_median_ms"]
    keys = ["import", "register 10", "register 100", "first call 100", "second call 100"]
    for c in CONFIGS:
        keys += [f"libraries {c}", f"create {c}"]
    for key in keys:
        assert math.isfinite(med[key]) and med[key] > 0, key
    for key in proc:
        assert proc[key] > 0, key
    # A whole process that imports tooltrace and builds a registry outlasts the bare interpreter.
    for c in CONFIGS:
        assert proc[f"create {c}"] > proc["python"]
    # The floor is the third-party modules the default sinks bring: the metrics and log
    # libraries always, the span exporter only where an OTLP endpoint is set.
    plain, spans = (set(st["sink_modules"][c]) for c in CONFIGS)
    tops = {m.split(".")[0] for m in plain}
    assert {"prometheus_client", "structlog"} <= tops and "tooltrace" not in tops
    assert plain < spans
    assert any(m.startswith("opentelemetry.exporter.otlp") for m in spans - plain)
    assert "### Startup: import, create_registry, registering tools" in text
    targets = {t["target"]: t for t in figures["targets"]}
    names = ["registering 100 tools <= 1.5x import tooltrace"] + [
        f"create_registry + shutdown <= 1.5x importing its sinks' libraries ({c})"
        for c in CONFIGS]
    for name in names:
        assert targets[name]["verdict"] in ("met", "MISSED"), targets
