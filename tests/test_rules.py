"""The Prometheus recording and alerting rules: valid, unit-tested with promtool, documented,
and end to end a surge of rejected calls makes a real Prometheus fire an alert that a real
Alertmanager delivers to a webhook."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.sre_kit import REPO, load_build
from support.sre_prom import AlertmanagerServer, PrometheusServer, WebhookReceiver, promtool
from support.sre_workload import running_workload

from tooltrace.audit import AuditStore
from tooltrace.telemetry.metrics import DURATION_BUCKETS

build = load_build()
RULES = REPO / "dashboards" / build.RULES_FILE
UNIT_TESTS = sorted((REPO / "tests" / "rules").glob("*.test.yml"))


def _groups() -> list[dict[str, Any]]:
    data: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return list(data["groups"])


def test_rule_file_passes_promtool_check() -> None:
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_check_rejects_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(RULES.read_text().replace("sum by (tool) (rate(", "sum by (tool) (rate((", 1))
    proc = promtool("check", "rules", str(broken))
    assert proc.returncode != 0


def test_recording_rules_define_the_saturation_signals() -> None:
    rec = {r["record"]: r["expr"] for r in _groups()[0]["rules"]}
    param = rec["tool:tooltrace_tool_param_reject_ratio:rate5m"]
    assert 'tooltrace_tool_rejections_total{stage="params"}[5m]' in param
    assert "/ (sum by (tool) (rate(tooltrace_tool_calls_total[5m])) > 0)" in param
    policy = rec["tool:tooltrace_tool_policy_reject_ratio:rate5m"]
    assert 'tooltrace_tool_rejections_total{stage=~"policy|approval"}[5m]' in policy
    offload = rec["tool:tooltrace_tool_offload_ratio:rate5m"]
    assert "rate(tooltrace_tool_offloads_total[5m])" in offload
    assert '/ (sum by (tool) (rate(tooltrace_tool_calls_total{status="ok"}[5m])) > 0)' in offload
    for q in ("0.5", "0.95"):
        name = f"tool:tooltrace_tool_call_duration_seconds:p{q[2:].ljust(2, '0')}_rate5m"
        assert rec[name] == (
            f"histogram_quantile({q}, sum by (tool, le) "
            "(rate(tooltrace_tool_call_duration_seconds_bucket[5m]))) >= 0"
        )


def test_every_alert_is_labelled_annotated_and_links_its_runbook_page() -> None:
    alerts = _groups()[1]["rules"]
    assert [a["alert"] for a in alerts] == build.alert_names()
    assert len(alerts) == 11
    for a in alerts:
        assert a["labels"]["severity"] in {"info", "warning", "critical"}, a["alert"]
        ann = a["annotations"]
        assert ann["summary"] and ann["description"], a["alert"]
        # Every link is an absolute URL under the one configured base, one page per alert.
        url = ann["runbook_url"]
        assert url == build.runbook_url(a["alert"]), url
        assert url.startswith(build.RUNBOOK_BASE) and url.startswith("https://"), url
        slug = url.removeprefix(build.RUNBOOK_BASE).strip("/")
        page = REPO / "docs" / "operations" / "runbooks" / f"{slug}.md"
        assert page.is_file(), f"no runbook page {page.relative_to(REPO)} for {a['alert']}"
        assert re.search(rf"^# {a['alert']}$", page.read_text(), flags=re.M), page


def test_the_runbook_base_is_the_docs_site_runbook_section() -> None:
    # The base lives in dashboards/build.py only; it must be where the docs site publishes
    # docs/operations/runbooks/ (mkdocs.yml's site_url, directory URLs).
    site_url = yaml.safe_load((REPO / "mkdocs.yml").read_text())["site_url"]
    assert site_url.rstrip("/") + "/operations/runbooks/" == build.RUNBOOK_BASE
    pages = {p.stem for p in (REPO / "docs" / "operations" / "runbooks").glob("*.md")}
    alerts = build.alert_names() + build.slo().slo_alert_names()
    assert pages - {"index"} == {a.lower() for a in alerts}


@pytest.mark.parametrize("test_file", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file: Path) -> None:
    proc = promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_unit_tests_cover_every_alert_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for f in UNIT_TESTS:
        for t in yaml.safe_load(f.read_text())["tests"]:
            for case in t.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = set(build.alert_names()) | set(build.slo().slo_alert_names())
    assert firing == alerts
    assert quiet == alerts


def test_unit_tests_fail_against_weaker_rules(tmp_path: Path) -> None:
    # The unit tests bite: without the traffic guard the low-traffic tool fires too, and
    # ratios.test.yml fails.
    weak = tmp_path / "dashboards" / "prometheus" / "tooltrace-rules.yml"
    weak.parent.mkdir(parents=True)
    weak.write_text(build.render_rules(options=build.AlertOptions(min_calls=1)))
    tests_dir = tmp_path / "tests" / "rules"
    tests_dir.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "rules" / "ratios.test.yml", tests_dir)
    proc = promtool("test", "rules", "ratios.test.yml", cwd=tests_dir)
    assert proc.returncode != 0
    assert 'tool="c"' in proc.stdout + proc.stderr


def test_the_compaction_backlog_test_bites(tmp_path: Path) -> None:
    # compaction.test.yml fails against rules that let the oldest call wait an hour.
    weak = tmp_path / "dashboards" / "prometheus" / "tooltrace-rules.yml"
    weak.parent.mkdir(parents=True)
    weak.write_text(build.render_rules(options=build.AlertOptions(compaction_backlog_age_s=3600)))
    tests_dir = tmp_path / "tests" / "rules"
    tests_dir.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "rules" / "compaction.test.yml", tests_dir)
    proc = promtool("test", "rules", "compaction.test.yml", cwd=tests_dir)
    assert proc.returncode != 0
    assert 'instance="i2"' in proc.stdout + proc.stderr


def test_a_fresh_prometheus_would_fire_without_the_history_guard(tmp_path: Path) -> None:
    # fresh_start.test.yml bites: without the guard the steady ratios "surge" from a baseline of
    # 0 minutes after the start, and the test fails.
    weak = tmp_path / "dashboards" / "prometheus" / "tooltrace-rules.yml"
    weak.parent.mkdir(parents=True)
    weak.write_text(build.render_rules(options=build.AlertOptions(surge_needs_history=False)))
    tests_dir = tmp_path / "tests" / "rules"
    tests_dir.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "rules" / "fresh_start.test.yml", tests_dir)
    proc = promtool("test", "rules", "fresh_start.test.yml", cwd=tests_dir)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "ToolOffloadRatioSurge, time: 10m" in out and 'tool="o"' in out, out


def test_generator_options_reach_the_rule_file(tmp_path: Path) -> None:
    args = ["--out", str(tmp_path), "--runbook-base", "https://wiki.example/tt/"]
    assert build.main([*args, "--latency-slo", "2.5", "--audit-backlog", "900"]) == 0
    groups = yaml.safe_load((tmp_path / build.RULES_FILE).read_text())["groups"]
    alerts = {a["alert"]: a for a in groups[1]["rules"]}
    assert alerts["ToolCallOutcomeUnknown"]["annotations"]["runbook_url"] == (
        "https://wiki.example/tt/toolcalloutcomeunknown/"
    )
    assert alerts["ToolLatencyP95OverSLO"]["expr"].startswith(
        "tool:tooltrace_tool_call_duration_seconds:p95_rate5m > 2.5\n"
    )
    assert "> 900" in alerts["TooltraceAuditBacklog"]["expr"]
    with pytest.raises(SystemExit):
        build.main(["--out", str(tmp_path), "--latency-slo", "0"])


def test_recording_rule_expressions_agree_with_tooltrace_stats(tmp_path: Path) -> None:
    # The same calls seen two ways: the rules' PromQL over scraped metrics, and `tooltrace
    # stats` over the audit trail. Every series starts at 0 in a scrape before the first call
    # and all share scrape times, so rate() extrapolation cancels out and the ratios are exact.
    from click.testing import CliRunner

    from tooltrace.cli import main

    mix = {"ok": 30, "params": 9, "offload": 6, "inline": 10, "policy": 3, "approval": 5}
    mix |= {"hook": 4, "fetch_ok": 8, "failed": 3, "unknown": 2}
    with running_workload(tmp_path / "workload") as w, PrometheusServer([w.target]) as prom:
        # Zero-valued series for every registered tool are scraped before any call.
        prom.wait_for('count(tooltrace_tool_calls_total{tool="commit"} == 0) == 5', 30)
        w.burst(mix)
        w.registry.flush(10.0)
        total = sum(mix.values())
        prom.wait_for(f'sum(tooltrace_tool_calls_total{{tool!="_unregistered"}}) == {total}')
        promql = {
            s.key: {
                r["metric"]["tool"]: float(r["value"][1])
                for r in prom.query(build.ratio_expr(s, "5m"))
            }
            for s in build.SIGNALS
        }
        p95 = {
            r["metric"]["tool"]: float(r["value"][1])
            for r in prom.query(build.latency_expr(0.95, "5m"))
        }
    # After the registry's shutdown: every record, late resolutions included, is durable.
    home = tmp_path / "workload" / "tt"
    res = CliRunner().invoke(main, ["stats", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    stats = {row["tool"]: row for row in json.loads(res.output)}
    assert set(stats) == {"lookup", "render", "deploy", "fetch", "explode", "commit"}
    for tool, row in stats.items():
        assert row["param_reject_ratio"] == pytest.approx(promql["param_reject"][tool], abs=1e-4)
        assert row["policy_reject_ratio"] == pytest.approx(promql["policy_reject"][tool], abs=1e-4)
        if tool == "commit":
            # Its calls ended unknown and resolved ok later: stats counts the status a call
            # ended with, as the metrics do, so they are not successes on either side.
            assert row["ok"] == 0 and mix["unknown"] > 0
        if row["ok"]:
            assert row["offload_ratio"] == pytest.approx(promql["offload"][tool], abs=1e-4)
        else:
            assert tool not in promql["offload"]  # no successes: no ratio, not NaN
    assert stats["lookup"]["param_reject_ratio"] > 0 and stats["render"]["offload_ratio"] > 0
    assert stats["deploy"]["policy_reject_ratio"] == 1
    # Latency, from the same durations both ways (each record's elapsed time): stats' p95 is
    # the interpolated quantile of them, and histogram_quantile lands inside the bucket that
    # holds the observation of rank ceil(0.95 n) (it interpolates within that bucket).
    with AuditStore(home) as store:
        rows = store.sql("SELECT tool, elapsed_ms FROM tool_calls").rows
    elapsed: dict[str, list[float]] = {}
    for tool, ms in rows:
        elapsed.setdefault(tool, []).append(float(ms))
    buckets = [0.0, *DURATION_BUCKETS]
    for tool, row in stats.items():
        ms = sorted(elapsed[tool])
        pos = 0.95 * (len(ms) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        assert row["p95_ms"] == pytest.approx(ms[lo] + (ms[hi] - ms[lo]) * (pos - lo), abs=1e-3)
        ranked = ms[math.ceil(0.95 * len(ms)) - 1] / 1000
        i = next((k for k, b in enumerate(buckets) if ranked <= b), len(buckets))
        lower, upper = (buckets[i - 1], buckets[i]) if i < len(buckets) else (buckets[-1],) * 2
        assert lower * (1 - 1e-9) <= p95[tool] <= upper * (1 + 1e-9), (tool, ranked, p95[tool])


# -- end to end: workload -> Prometheus -> Alertmanager -> webhook ------------------------------

# The shipped expressions with windows of seconds, so the whole chain runs in well under a minute.
FAST = dict(
    rate="10s",
    baseline="30s",
    baseline_offset="5s",
    surge_for="0s",
    latency_for="0s",
    backlog_for="0s",
    interval="1s",
)


def test_rejection_surge_fires_an_alert_delivered_by_alertmanager(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        build.render_rules(build.RuleWindows(**FAST), build.AlertOptions(min_calls=10))
    )
    check = promtool("check", "rules", str(rules))
    assert check.returncode == 0, check.stdout + check.stderr

    with (
        WebhookReceiver() as hook,
        running_workload(tmp_path / "workload") as w,
        AlertmanagerServer(tmp_path / "am", webhook_url=hook.url) as am,
    ):
        w.burst({"ok": 20, "inline": 20})
        prom = PrometheusServer(
            [w.target],
            rule_files=[rules],
            alertmanager=f"127.0.0.1:{am.port}",
        )
        with prom:
            # Healthy traffic first: both tools are scraped and evaluated, nothing fires.
            w.run_in_background({"ok": 6, "inline": 6}, period_s=0.1)
            prom.wait_for(
                'tool:tooltrace_tool_param_reject_ratio:rate10s{tool=~"lookup|render"} == 0',
                timeout_s=30,
            )
            prom.wait_for("count(tool:tooltrace_tool_param_reject_ratio:rate10s) >= 2", 10)
            assert prom.query('ALERTS{alertname="ToolParamRejectRatioSurge"}') == []
            # A surge is judged against history: wait until Prometheus has watched both tools
            # for a whole baseline window (30s ending 5s ago).
            prom.wait_for("count(tool:tooltrace_tool_calls:rate10s offset 35s) >= 2", 90)

            # The surge: most lookups now come with a wrong argument type.
            w.run_in_background({"params": 12, "ok": 2}, period_s=0.1)
            # The alert arrives (~10-20 s here); the bound only keeps a broken chain from
            # hanging the run, it is not a latency target.
            alert = hook.wait_for(
                lambda a: a["labels"].get("alertname") == "ToolParamRejectRatioSurge", 150
            )

    labels, ann = alert["labels"], alert["annotations"]
    assert alert["status"] == "firing"
    assert labels["tool"] == "lookup"
    assert labels["severity"] == "warning" and labels["service"] == "tooltrace"
    assert ann["runbook_url"] == build.runbook_url("ToolParamRejectRatioSurge")
    assert ann["summary"].startswith("lookup: parameter-reject ratio jumped to ")
    # The healthy tool never alerted.
    assert all(a["labels"].get("tool") != "render" for a in hook.alerts())


def test_the_unresolved_outcome_test_bites(tmp_path: Path) -> None:
    # unresolved.test.yml fails against rules that page without a grace period (at 15m the
    # unresolved calls are only 5 minutes old, and must not page yet).
    weak = tmp_path / "dashboards" / "prometheus" / "tooltrace-rules.yml"
    weak.parent.mkdir(parents=True)
    weak.write_text(build.render_rules(build.RuleWindows(unresolved_for="0m")))
    tests_dir = tmp_path / "tests" / "rules"
    tests_dir.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "rules" / "unresolved.test.yml", tests_dir)
    proc = promtool("test", "rules", "unresolved.test.yml", cwd=tests_dir)
    assert proc.returncode != 0
    assert "ToolCallOutcomeUnknown, time: 15m" in proc.stdout + proc.stderr
