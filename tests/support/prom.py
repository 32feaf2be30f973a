"""A real Prometheus server for tests, on a free 127.0.0.1 port.

``Prometheus`` writes a config with the given scrape targets (and optional rule files and an
Alertmanager target), starts ``/usr/bin/prometheus``, waits until it is ready and stops it on
exit. ``query()`` runs PromQL through the HTTP API. The first scrape lands ~6 s after start even
with ``scrape_interval: 1s`` (target discovery batches every 5 s): use ``wait_for_up()``.

    with Prometheus(["127.0.0.1:9101"]) as prom:
        prom.wait_for_up()
        value = prom.value('sum(tooltrace_tool_calls_total)')
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from support.components import require_binary
from support.otlp import free_port

__all__ = ["Prometheus", "prometheus_binary", "promtool_binary", "promtool_check_metrics"]

#: Debian's package brings both ``prometheus`` and ``promtool``.
INSTALL_PROMETHEUS = "apt-get install -y --no-install-recommends prometheus"


def prometheus_binary() -> str:
    """The ``prometheus`` executable (a test without it skips, or fails under ``CI=true``)."""
    return require_binary("prometheus", INSTALL_PROMETHEUS)


def promtool_binary() -> str:
    """The ``promtool`` executable (a test without it skips, or fails under ``CI=true``)."""
    return require_binary("promtool", INSTALL_PROMETHEUS)


def promtool_check_metrics(exposition: str | bytes) -> subprocess.CompletedProcess[str]:
    """Lint a text exposition with ``promtool check metrics`` (returns the finished process)."""
    data = exposition.decode() if isinstance(exposition, bytes) else exposition
    return subprocess.run(
        [promtool_binary(), "check", "metrics"], input=data, capture_output=True, text=True,
        timeout=30,
    )


class Prometheus:
    """A Prometheus process scraping ``targets`` (``host:port``) every ``scrape_interval``.

    Args:
        targets: scrape targets, ``host:port``; all in one job named ``job``.
        rule_files: recording/alerting rule files to load.
        alertmanager: ``host:port`` of an Alertmanager to send alerts to.
        scrape_interval, evaluation_interval: Prometheus durations such as ``"1s"``.
        metrics_path: the targets' metrics path.
        extra_args: more command-line flags (for example ``--enable-feature=exemplar-storage``).
    """

    def __init__(
        self,
        targets: Sequence[str],
        *,
        rule_files: Sequence[str | os.PathLike[str]] = (),
        alertmanager: str | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        metrics_path: str = "/metrics",
        job: str = "tooltrace",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.targets = list(targets)
        self.job = job
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = Path(tempfile.mkdtemp(prefix="tooltrace-prom-"))
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": scrape_interval,
                "evaluation_interval": evaluation_interval,
                "scrape_timeout": scrape_interval,
            },
            "scrape_configs": [
                {
                    "job_name": job,
                    "metrics_path": metrics_path,
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        if rule_files:
            config["rule_files"] = [str(Path(f).resolve()) for f in rule_files]
        if alertmanager:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]
            }
        # JSON is valid YAML, so no YAML library is needed to write the config.
        self.config_path = self._dir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config, indent=2))
        self._extra = list(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self._dir / "prometheus.log"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> Prometheus:
        """Start the server and wait until ``/-/ready`` answers."""
        log = open(self._log, "wb")  # noqa: SIM115 - handed to the child, closed in stop()
        self._logf = log
        self._proc = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self._dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *self._extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited early:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready in {timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server and delete its data."""
        p = self._proc
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if getattr(self, "_logf", None) is not None:
            self._logf.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log (for failure messages)."""
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- queries --------------------------------------------------------------------------------

    def api(self, path: str, **params: Any) -> Any:
        """GET ``/api/v1/<path>`` and return ``data`` (raises on an API error)."""
        qs = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{qs}", timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus API error: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the vector's samples (``metric`` and ``value``)."""
        data = self.api("query", query=expr, time=at)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single value of an instant query, or None when the result is empty."""
        res = self.query(expr, at)
        if not res:
            return None
        if len(res) > 1:
            raise AssertionError(f"{expr!r} returned {len(res)} series, expected one")
        return float(res[0]["value"][1])

    def wait_until(
        self,
        expr: str,
        predicate: Callable[[float | None], bool],
        timeout_s: float = 30.0,
    ) -> float | None:
        """Poll ``value(expr)`` until ``predicate`` holds; return the value."""
        deadline = time.monotonic() + timeout_s
        last: float | None = None
        while time.monotonic() < deadline:
            last = self.value(expr)
            if predicate(last):
                return last
            time.sleep(0.2)
        raise TimeoutError(f"{expr!r} never satisfied the condition (last {last}):\n"
                           f"{self.log_tail()}")

    def wait_for_up(self, timeout_s: float = 30.0) -> None:
        """Wait until every target has been scraped successfully at least once."""
        n = len(self.targets)
        self.wait_until(f'sum(up{{job="{self.job}"}})', lambda v: v == n, timeout_s)

    def targets_health(self) -> list[dict[str, Any]]:
        """The active targets as the API reports them."""
        return list(self.api("targets")["activeTargets"])
