"""The compose stack in docker/: valid for the real docker compose v2, and its parts agree with
each other (Prometheus config and rules as mounted in the container, Alertmanager, Grafana
provisioning, collector -> Tempo, the demo image). No Docker engine is needed."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.sre_kit import REPO, compose_binary, load_build
from support.sre_prom import promtool

DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
SERVICES = {"tooltrace-demo", "otel-collector", "tempo", "prometheus", "alertmanager", "grafana"}


def _compose(*args: str, file: Path = COMPOSE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(compose_binary()), "-f", str(file), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    proc = _compose("config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _binds(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts."""
    return {v["target"]: Path(v["source"]) for v in service["volumes"] if v["type"] == "bind"}


def _host_path(service: dict[str, Any], container_path: str) -> Path:
    for target, source in sorted(_binds(service).items(), key=lambda kv: -len(kv[0])):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return source / container_path[len(target) :].lstrip("/")
    raise AssertionError(f"{container_path} is not mounted from the host")


def test_compose_file_passes_docker_compose_config() -> None:
    proc = _compose("config", "-q")
    assert proc.returncode == 0, proc.stderr
    assert (
        "v2.40.3"
        in subprocess.run(
            [str(compose_binary()), "version"], capture_output=True, text=True, check=True
        ).stdout
    )


def test_compose_validation_bites(tmp_path: Path) -> None:
    # The same file with an unknown service key is rejected by the real parser.
    bad = tmp_path / "compose.yaml"
    text = COMPOSE.read_text().replace("    restart: unless-stopped\n", "    restrat: always\n", 1)
    bad.write_text(text.replace("context: ..", f"context: {REPO}"))
    proc = _compose("config", "-q", file=bad)
    assert proc.returncode != 0
    assert "restrat" in proc.stderr


def test_stack_has_every_service_published_on_loopback_only(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", (name, port)
        for target, source in _binds(svc).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) is missing"


def test_prometheus_config_and_mounted_rules_pass_promtool(
    config: dict[str, Any], tmp_path: Path
) -> None:
    prom = config["services"]["prometheus"]
    flag = next(a for a in prom["command"] if a.startswith("--config.file="))
    container_cfg = flag.split("=", 1)[1]
    host_cfg = _host_path(prom, container_cfg)
    assert host_cfg == DOCKER / "prometheus" / "prometheus.yml"
    cfg = yaml.safe_load(host_cfg.read_text())
    # Rewrite the in-container rule paths to where the mounts put them on the host.
    cfg["rule_files"] = [str(_host_path(prom, p)) for p in cfg["rule_files"]]
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(cfg))
    proc = promtool("check", "config", str(checked))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    n_rules = sum(len(g["rules"]) for g in load_build().build_rule_groups()["groups"])
    assert f"SUCCESS: {n_rules} rules found" in out
    assert str(REPO / "dashboards" / "prometheus" / "tooltrace-rules.yml") in out
    assert str(REPO / "dashboards" / "prometheus" / "tooltrace-slo-rules.yml") in out
    assert "--enable-feature=exemplar-storage" in prom["command"]

    # Every scrape and alerting target is a service of the stack on a port it listens on.
    targets = [
        t for sc in cfg["scrape_configs"] for s in sc["static_configs"] for t in s["targets"]
    ]
    targets += [
        t
        for am in cfg["alerting"]["alertmanagers"]
        for s in am["static_configs"]
        for t in s["targets"]
    ]
    hosts = {t.split(":")[0] for t in targets}
    assert hosts <= SERVICES | {"localhost"}
    assert "alertmanager:9093" in targets
    # The demo serves on 127.0.0.1 inside the network namespace it shares with Prometheus.
    demo = config["services"]["tooltrace-demo"]
    assert demo["network_mode"] == "service:prometheus"
    port = demo["command"][demo["command"].index("--metrics-port") + 1]
    assert f"localhost:{port}" in targets
    assert {p["target"] for p in prom["ports"]} >= {9090, int(port)}


def test_prometheus_check_config_bites(config: dict[str, Any], tmp_path: Path) -> None:
    # With the rule path left as it is inside the container, promtool finds no rule files.
    host_cfg = DOCKER / "prometheus" / "prometheus.yml"
    cfg = yaml.safe_load(host_cfg.read_text())
    cfg["rule_files"] = [str(tmp_path / "nowhere" / "*.yml")]
    cfg["scrape_configs"][0]["scrape_interval"] = "soon"
    bad = tmp_path / "prometheus.yml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = promtool("check", "config", str(bad))
    assert proc.returncode != 0


def test_alertmanager_config_passes_amtool(config: dict[str, Any]) -> None:
    am = config["services"]["alertmanager"]
    assert "--cluster.listen-address=" in am["command"]
    flag = next(a for a in am["command"] if a.startswith("--config.file="))
    host_cfg = _host_path(am, flag.split("=", 1)[1])
    proc = subprocess.run(
        ["amtool", "check-config", str(host_cfg)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    routed = yaml.safe_load(host_cfg.read_text())["route"]
    assert set(routed["group_by"]) == {"alertname", "tool"}


def test_grafana_provisions_datasources_with_exemplar_links_and_the_dashboards(
    config: dict[str, Any],
) -> None:
    graf = config["services"]["grafana"]
    ds_dir = _host_path(graf, "/etc/grafana/provisioning/datasources")
    datasources = [
        d
        for f in sorted(ds_dir.glob("*.yaml"))
        for d in yaml.safe_load(f.read_text())["datasources"]
    ]
    by_type = {d["type"]: d for d in datasources}
    prom, tempo = by_type["prometheus"], by_type["tempo"]
    assert prom["url"] == "http://prometheus:9090" and prom["isDefault"] is True
    assert tempo["url"] == "http://tempo:3200"
    dest = prom["jsonData"]["exemplarTraceIdDestinations"]
    # The metrics sink's exemplar label is trace_id; it must open the Tempo datasource.
    assert dest == [{"name": "trace_id", "datasourceUid": tempo["uid"]}]

    dash_dir = _host_path(graf, "/etc/grafana/provisioning/dashboards")
    providers = [
        p
        for f in sorted(dash_dir.glob("*.yaml"))
        for p in yaml.safe_load(f.read_text())["providers"]
    ]
    assert len(providers) == 1
    served = _host_path(graf, providers[0]["options"]["path"])
    assert served == REPO / "dashboards"
    files = {p.name for p in served.glob("*.json")}
    assert files == set(load_build().DASHBOARD_FILES)
    home = graf["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert _host_path(graf, home).is_file()


def test_collector_exports_traces_to_tempo(config: dict[str, Any]) -> None:
    col = config["services"]["otel-collector"]
    flag = next(a for a in col["command"] if a.startswith("--config="))
    cfg = yaml.safe_load(_host_path(col, flag.split("=", 1)[1]).read_text())
    pipeline = cfg["service"]["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        for name in pipeline[kind]:
            assert name in cfg[kind], f"{kind}: {name} is used but not defined"
    exporter = cfg["exporters"][pipeline["exporters"][0]]
    host, port = exporter["endpoint"].split(":")

    tempo = config["services"]["tempo"]
    assert host == "tempo"
    tflag = next(a for a in tempo["command"] if a.startswith("-config.file="))
    tcfg = yaml.safe_load(_host_path(tempo, tflag.split("=", 1)[1]).read_text())
    grpc = tcfg["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert grpc.endswith(":" + port)

    # The demo sends its spans to the collector's OTLP/HTTP receiver.
    demo_env = config["services"]["tooltrace-demo"]["environment"]
    http = cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert demo_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:" + http.split(":")[1]


def test_demo_image_installs_this_project_and_runs_its_cli(config: dict[str, Any]) -> None:
    demo = config["services"]["tooltrace-demo"]
    assert Path(demo["build"]["context"]) == REPO
    dockerfile = REPO / demo["build"]["dockerfile"]
    text = dockerfile.read_text()
    assert re.search(r"^RUN pip install '\.\[otlp\]'", text, flags=re.M)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert 'ENTRYPOINT ["tooltrace"]' in text and "tooltrace" in scripts
    # Every file the Dockerfile copies is let through its ignore file.
    ignore = Path(str(dockerfile) + ".dockerignore").read_text().split()
    for src in re.findall(r"^COPY (.+) \S+$", text, flags=re.M):
        for item in src.split():
            assert f"!{item}" in ignore or f"!{item}/" in ignore, item
    # The image's default command is the one the stack runs.
    cmd = json.loads(re.findall(r"^CMD (.+)$", text, flags=re.M)[-1])
    assert cmd == demo["command"] and cmd[0] == "demo"


def test_demo_command_uses_options_the_cli_accepts(config: dict[str, Any]) -> None:
    from click.testing import CliRunner

    from tooltrace.cli import main

    argv = config["services"]["tooltrace-demo"]["command"]
    result = CliRunner().invoke(main, [argv[0], "--help"])
    assert result.exit_code == 0, result.output
    for opt in (a for a in argv if a.startswith("--")):
        assert opt in result.output, f"`tooltrace demo` has no {opt} option"
