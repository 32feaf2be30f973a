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
    from bench.startup import SINK_LIBRARIES

    text, figures = _run(tmp_path)
    st = figures["startup"]
    assert st["rounds"] == 1 and st["sizes"] == [10, 100]
    med = st["median_ms"]
    for key in ("import", "libraries", "create", "register 10", "register 100",
                "first call 100", "second call 100"):
        assert math.isfinite(med[key]) and med[key] > 0, key
    for key in ("import", "libraries", "create", "python"):
        assert st["process_median_ms"][key] > 0, key
    # A whole process that imports tooltrace and builds a registry outlasts the bare interpreter.
    assert st["process_median_ms"]["create"] > st["process_median_ms"]["python"]
    # The floor is exactly the sinks' libraries that create_registry loaded.
    modules = st["sink_modules"]
    assert modules and all(m.split(".")[0] in SINK_LIBRARIES for m in modules)
    assert {"prometheus_client", "structlog"} <= {m.split(".")[0] for m in modules}
    assert "### Startup: import, create_registry, registering tools" in text
    targets = {t["target"]: t for t in figures["targets"]}
    for name in ("registering 100 tools <= 1.5x import tooltrace",
                 "create_registry + shutdown <= 1.5x importing the sinks' libraries "
                 "(whole processes)"):
        assert targets[name]["verdict"] in ("met", "MISSED"), targets
