"""The Grafana dashboards: generated from code, valid for Grafana 11.6, and every query they
run returns data from a real Prometheus scraping a real tooltrace workload."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.sre_kit import REPO, dashboard_targets, grafana_schema, load_build, substitute
from support.sre_prom import PrometheusServer, free_port, poll
from support.sre_workload import Workload, running_workload

build = load_build()
DASHBOARDS = {
    name: json.loads((REPO / "dashboards" / name).read_text()) for name in build.DASHBOARD_FILES
}
# The drill-down dashboard is checked for one concrete tool, the overview for all tools.
TOOL_VALUE = {"tooltrace-pipelines.json": ".*", "tooltrace-tool.json": "lookup"}


def test_committed_files_are_exactly_what_the_generator_writes(tmp_path: Path) -> None:
    for rel, text in build.rendered_files().items():
        committed = (REPO / "dashboards" / rel).read_text(encoding="utf-8")
        assert committed == text, f"dashboards/{rel} is stale: run python dashboards/build.py"
    # The --check mode agrees, and reports a stale file.
    assert build.main(["--check"]) == 0
    (tmp_path / "prometheus").mkdir()
    for rel, text in build.rendered_files().items():
        (tmp_path / rel).write_text(text)
    (tmp_path / "tooltrace-tool.json").write_text("{}\n")
    assert build.main(["--check", "--out", str(tmp_path)]) == 1


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = grafana_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.mark.parametrize("name", build.DASHBOARD_FILES)
def test_dashboard_validates_against_the_grafana_11_6_schema(
    name: str, validator: jsonschema.Draft7Validator
) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(DASHBOARDS[name])]
    assert errors == []


def test_schema_validation_rejects_what_grafana_would_not_accept(
    validator: jsonschema.Draft7Validator,
) -> None:
    # The check bites: an unknown panel property, a wrong type and a bad variable type fail.
    bad = copy.deepcopy(DASHBOARDS["tooltrace-pipelines.json"])
    bad["panels"][1]["bogus"] = True
    bad["panels"][2]["gridPos"] = "top left"
    bad["templating"]["list"][0]["type"] = "nonsense"
    paths = [e.json_path for e in validator.iter_errors(bad)]
    for where in ("$.panels[1]", "$.panels[2]", "$.templating.list[0]"):
        assert any(p.startswith(where) for p in paths), (where, paths)
    # ... and the untouched dashboard has none of those errors.
    assert not list(validator.iter_errors(DASHBOARDS["tooltrace-pipelines.json"]))


@pytest.mark.parametrize("name", build.DASHBOARD_FILES)
def test_dashboard_structure(name: str) -> None:
    d = DASHBOARDS[name]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["tempo"]["query"] == "tempo"
    assert variables["tool"]["type"] == "query"
    assert "label_values(tooltrace_tool_calls_total, tool)" in json.dumps(variables["tool"])
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    n_targets = 0
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)) and all(refs), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip(), p["title"]
            n_targets += 1
    assert n_targets >= 10
    # Latency panels show exemplars and link them to the Tempo datasource variable.
    latency = [
        p for p in d["panels"] if p.get("fieldConfig", {}).get("defaults", {}).get("unit") == "s"
    ]
    exemplar_panels = [p for p in latency if any(t.get("exemplar") for t in p["targets"])]
    assert exemplar_panels
    for p in exemplar_panels:
        links = p["fieldConfig"]["defaults"]["links"]
        assert any("${tempo}" in link["url"] and "trace_id" in link["url"] for link in links)


@pytest.mark.parametrize("name", build.DASHBOARD_FILES)
def test_the_grid_never_overflows_and_panels_never_overlap(name: str) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in DASHBOARDS[name]["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] >= 1 and g["x"] + g["w"] <= 24, (p["title"], g)
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (p["title"], "overlaps", cells[(x, y)])
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize("name", build.DASHBOARD_FILES)
def test_panels_link_their_runbooks_and_queries_follow_the_instance(name: str) -> None:
    d = DASHBOARDS[name]
    instance = next(v for v in d["templating"]["list"] if v["name"] == "instance")
    assert "label_values(tooltrace_tool_calls_total, instance)" in json.dumps(instance)
    alerts = set(build.alert_names()) | set(build.slo().slo_alert_names())
    linked = set()
    for p in d["panels"]:
        for link in p.get("links", []):
            alert = link["title"].removeprefix("Runbook: ")
            assert alert in alerts and link["url"] == build.runbook_url(alert), link
            linked.add(alert)
        for t in p.get("targets", []):
            # Every query but the SLO records (aggregated over instances) follows $instance.
            assert "$instance" in t["expr"] or "tool_slo:" in t["expr"], (p["title"], t["expr"])
    if name == "tooltrace-pipelines.json":
        assert alerts - linked == {"TooltraceCompactionBacklog", "ToolCallOutcomeUnknown"} - linked
        budget = next(p for p in d["panels"] if p["title"].startswith("Error budget left"))
        assert "min" not in budget["fieldConfig"]["defaults"]  # an overspent budget shows
    links = [link for p in d["panels"] for link in p.get("fieldConfig", {}).get(
        "defaults", {}).get("links", [])]
    assert any(link["url"] == build.AUTOPSY_DOC for link in links)


def test_overview_covers_every_signal() -> None:
    exprs = "\n".join(
        t["expr"] for _, t in dashboard_targets(DASHBOARDS["tooltrace-pipelines.json"])
    )
    for needle in (
        "sum by (status) (rate(tooltrace_tool_calls_total",
        'tooltrace_tool_rejections_total{stage="params"',
        'tooltrace_tool_rejections_total{stage=~"policy|approval"',
        'tooltrace_tool_rejections_total{stage="hook"',
        "tooltrace_tool_offloads_total",
        "histogram_quantile(0.5,",
        "histogram_quantile(0.95,",
        "histogram_quantile(0.99,",
        "tooltrace_tool_inflight",
        "tooltrace_tool_concurrency_limit",
        "tooltrace_concurrency_limit",
        "tooltrace_tool_admission_wait_seconds_bucket",
        "tooltrace_tool_admission_queue_depth",
        "tooltrace_telemetry_dropped_total",
        'tooltrace_telemetry_queue_depth{sink="audit", instance=~"$instance"}',
        "tooltrace_telemetry_export_errors_total",
        "topk(10,",
    ):
        assert needle in exprs, needle


# -- live: every panel query returns data from a real Prometheus --------------------------------

# One background burst: every outcome the dashboards chart, several times a second.
MIX = {
    "ok": 10,
    "params": 2,
    "offload": 2,
    "inline": 2,
    "policy": 1,
    "approval": 1,
    "hook": 1,
    "fetch_ok": 2,
    "failed": 1,
    "resolve": 1,
    "unknown": 1,
}


@pytest.fixture(scope="module")
def scraped(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Workload, PrometheusServer]]:
    tmp = tmp_path_factory.mktemp("sre-dash")
    with running_workload(tmp / "workload") as w:
        w.burst(MIX)
        prom = PrometheusServer([w.target])
        with prom:
            w.run_in_background(MIX)
            prom.wait_for('up{job="tooltrace"} == 1', timeout_s=30)
            # rate() needs two scrapes of moving counters inside the window.
            prom.wait_for(
                'count_over_time(tooltrace_tool_calls_total{tool="lookup",status="ok"}[1m]) >= 3',
                timeout_s=30,
            )
            yield w, prom


def _finite_rows(prom: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    rows = prom.query(expr)
    return [r for r in rows if math.isfinite(float(r["value"][1]))]


def _all_queries() -> list[tuple[str, str, str, str]]:
    out = []
    for name, d in DASHBOARDS.items():
        for title, t in dashboard_targets(d):
            out.append((name, title, t["refId"], substitute(t["expr"], TOOL_VALUE[name])))
    return out


def test_every_panel_query_returns_data(scraped: tuple[Workload, PrometheusServer]) -> None:
    _w, prom = scraped
    # The SLO panels read the SLO recording rules, for the tools in slos.yml: their values are
    # checked by tests/rules/slo.test.yml (test_the_slo_row_reads_the_unit_tested_records).
    queries = [q for q in _all_queries() if "tool_slo:" not in q[3]]
    assert len(queries) >= 30

    def empty() -> list[str]:
        return [
            f"{name} / {title} / {ref}: {expr}"
            for name, title, ref, expr in queries
            if not _finite_rows(prom, expr)
        ]

    # Poll briefly: the slowest signals (an unknown outcome, a hook block) need a scrape or two.
    missing: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        missing = empty()
        if not missing:
            break
        time.sleep(1)
    assert missing == [], "queries without data:\n" + "\n".join(missing)


def test_a_misspelled_metric_returns_no_data(scraped: tuple[Workload, PrometheusServer]) -> None:
    # The check above bites: the same first panel query with one typo in a metric name is empty.
    _w, prom = scraped
    name, title, _ref, expr = _all_queries()[0]
    assert _finite_rows(prom, expr), f"{name} / {title} should have data"
    typo = expr.replace("tooltrace_tool_calls_total", "tooltrace_tool_call_total")
    assert typo != expr
    assert _finite_rows(prom, typo) == []


def test_signal_panels_show_the_workload(scraped: tuple[Workload, PrometheusServer]) -> None:
    # Not just "some data": the ratio panels see the rejections the workload made, per tool.
    _w, prom = scraped
    overview = DASHBOARDS["tooltrace-pipelines.json"]
    by_title = {title: t["expr"] for title, t in dashboard_targets(overview)}

    def by_tool(title: str) -> dict[str, float]:
        rows = _finite_rows(prom, substitute(by_title[title], ".*"))
        return {r["metric"]["tool"]: float(r["value"][1]) for r in rows}

    params = by_tool("Parameter-reject ratio by tool")
    assert 0 < params["lookup"] < 1 and params["render"] == 0
    policy = by_tool("Policy-reject ratio by tool")
    # Every deploy was denied (policy or approval); rate() extrapolates each series on its
    # own, so the ratio of sums is 1 only to within a few percent.
    assert policy["deploy"] == pytest.approx(1.0, abs=0.1)
    assert policy["lookup"] == 0
    assert by_tool("Hook-block ratio by tool")["fetch"] > 0
    offload = by_tool("Offload ratio by tool")
    assert 0 < offload["render"] < 1 and offload["lookup"] == 0
    p99 = by_tool("p99 latency by tool")
    assert p99["commit"] > p99["render"]  # the unknown-outcome tool outlives its deadline


def test_latency_exemplars_link_to_real_traces(scraped: tuple[Workload, PrometheusServer]) -> None:
    w, prom = scraped
    panel_expr = next(
        t["expr"]
        for title, t in dashboard_targets(DASHBOARDS["tooltrace-tool.json"])
        if t.get("exemplar")
    )
    expr = substitute(panel_expr, "lookup")
    now = time.time()

    def exemplars() -> list[str]:
        data = prom.api(
            "query_exemplars", query=expr, start=f"{now - 300:.0f}", end=f"{time.time():.0f}"
        )
        return [e["labels"]["trace_id"] for s in data for e in s["exemplars"]]

    ids = poll(exemplars, 20, "latency exemplars")
    traced = w.trace_ids()
    assert set(ids) & traced, "exemplar trace ids should be ids of exported spans"


def test_the_demo_of_the_compose_stack_fills_every_panel(tmp_path: Path) -> None:
    # What docker/compose.yaml runs: `tooltrace demo --metrics-port ...`, scraped by Prometheus.
    port = free_port()
    cli = Path(sys.executable).with_name("tooltrace")
    # With the SLO rules, as the compose stack mounts them: the demo's tools have objectives.
    prom = PrometheusServer(
        [f"127.0.0.1:{port}"], rule_files=[REPO / "dashboards" / build.SLO_RULES_FILE]
    )
    with prom:
        log = (tmp_path / "demo.log").open("wb")
        demo = subprocess.Popen(
            [
                str(cli),
                "demo",
                "--home",
                str(tmp_path / "home"),
                "--metrics-port",
                str(port),
                "--calls",
                "400",
                "--linger",
                "60",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            prom.wait_for('up{job="tooltrace"} == 1', timeout_s=30)
            # The drill-down is checked for the demo's busiest tool, the overview for all.
            top = prom.wait_for("topk(1, sum by (tool) (tooltrace_tool_calls_total))", 30)
            value = {
                "tooltrace-pipelines.json": ".*",
                "tooltrace-tool.json": top[0]["metric"]["tool"],
            }
            panels = [
                (name, title, [substitute(t["expr"], value[name]) for t in p_targets])
                for name, d in DASHBOARDS.items()
                for title, p_targets in _panels(d)
            ]

            def empty() -> list[str]:
                return [
                    f"{name} / {title}"
                    for name, title, exprs in panels
                    if not any(_finite_rows(prom, e) for e in exprs)
                ]

            missing = poll_until_empty(empty, 40)
            assert missing == [], "panels without data from the demo:\n" + "\n".join(missing)
        finally:
            demo.terminate()
            demo.wait(15)
            log.close()


def _panels(d: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(p["title"], p["targets"]) for p in d["panels"] if p.get("targets")]


def poll_until_empty(check: Any, timeout_s: float) -> list[str]:
    """Call ``check`` (returning a list of problems) until it returns none or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        problems: list[str] = check()
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(1)


def test_the_slo_row_reads_the_unit_tested_records() -> None:
    # The error budget and burn-rate panels query the very records slo.test.yml pins values of.
    slo = build.slo()
    by_title = dict(dashboard_targets(DASHBOARDS["tooltrace-pipelines.json"]))
    budget = by_title["Error budget left by tool and SLO"]["expr"]
    assert budget == f'{slo.BUDGET_RECORD}{{tool=~"$tool"}}'
    burn = by_title["Burn rate (1h) by tool and SLO"]["expr"]
    assert burn.startswith(f'{slo.sli_record("1h")}{{tool=~"$tool"}}')
    assert f"(1 - {slo.OBJECTIVE_RECORD})" in burn
    unit_tests = (REPO / "tests" / "rules" / "slo.test.yml").read_text()
    assert f"expr: {slo.BUDGET_RECORD}" in unit_tests
    assert f"expr: {slo.sli_record('1h')}" in unit_tests
