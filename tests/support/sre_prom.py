"""Real Prometheus, Alertmanager and a webhook receiver on 127.0.0.1, for the SRE kit's tests.

Each server runs the Debian binary as a subprocess on a free high port with its data in a
temporary directory; ``start()`` polls until it answers (never a blind sleep) and ``stop()``
terminates it. Use them as context managers::

    with PrometheusServer(["127.0.0.1:9464"]) as prom:
        prom.wait_for("up == 1")
        rows = prom.query("sum(rate(tooltrace_tool_calls_total[1m]))")
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from support.components import require_binary
from support.otlp import free_port
from support.prom import Prometheus, promtool_binary

__all__ = [
    "AlertmanagerServer",
    "PrometheusServer",
    "WebhookReceiver",
    "free_port",
    "poll",
    "promtool",
]



def alertmanager_binary() -> str:
    """The ``prometheus-alertmanager`` executable (skip, or fail under ``CI=true``, without)."""
    return require_binary("prometheus-alertmanager",
                          "apt-get install -y --no-install-recommends prometheus-alertmanager")


def poll(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.2) -> Any:
    """Call ``check`` until it returns something truthy; raise with ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (OSError, ValueError, KeyError) as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}") from last_exc
        time.sleep(every_s)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool and return the finished process (the caller checks ``returncode``)."""
    return subprocess.run(
        [promtool_binary(), *args], capture_output=True, text=True, timeout=120, cwd=cwd,
        check=False,
    )


class _Process:
    """A server subprocess with its log file, stopped on ``stop()`` or context exit."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout_s: float = 20.0) -> None:
        """Start the server and wait until ``/-/ready`` answers 200."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        try:
            self._proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

        def ready() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log()}")
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)

        try:
            poll(ready, timeout_s, f"{self.name} to be ready")
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        """The server's output so far (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the server (kill it if it does not stop within 10 s)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> _Process:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PrometheusServer(Prometheus):
    """The shared test Prometheus (``tests/prom.py``) with exemplar storage on (scrapes
    negotiate OpenMetrics, so exemplars are kept), plus ``wait_for``."""

    def __init__(self, targets: Sequence[str], **kwargs: Any) -> None:
        super().__init__(
            targets, extra_args=["--enable-feature=exemplar-storage", "--log.level=warn"], **kwargs
        )

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def wait_for(self, expr: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Poll until ``expr`` returns at least one sample; return the samples."""
        return list(poll(lambda: self.query(expr), timeout_s, f"PromQL {expr!r} to return data"))


class AlertmanagerServer(_Process):
    """Alertmanager (cluster mode off) delivering every alert to ``webhook_url``."""

    name = "alertmanager"

    def __init__(self, workdir: Path, *, webhook_url: str) -> None:
        super().__init__(workdir)
        self.config_path = workdir / "alertmanager.yml"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "route:\n"
            "  receiver: webhook\n"
            "  group_by: [alertname, tool]\n"
            "  group_wait: 1s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n"
            "  - name: webhook\n"
            "    webhook_configs:\n"
            f"      - url: {json.dumps(webhook_url)}\n"
            "        send_resolved: false\n"
        )

    def _argv(self) -> list[str]:
        return [
            alertmanager_binary(),
            f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]


class WebhookReceiver:
    """An ``http.server`` that keeps every JSON body POSTed to it (Alertmanager's webhook)."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with outer._cond:
                    outer.payloads.append(json.loads(body))
                    outer._cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert received so far (flattened out of the webhook payloads)."""
        with self._cond:
            return [a for p in self.payloads for a in p.get("alerts", [])]

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        """Block until an alert matching ``match`` arrives; return it."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for p in self.payloads:
                    for a in p.get("alerts", []):
                        if match(a):
                            return dict(a)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no matching alert within {timeout_s:g} s: {self.payloads}")
                self._cond.wait(left)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
