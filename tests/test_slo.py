"""Per-tool SLOs: the configuration is checked, the generated multiwindow multi-burn-rate rules
pass promtool, their unit tests (tests/rules/slo.test.yml: a fast and a slow burn) pass and
depend on the objectives, and the generator's options reach the file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.sre_kit import REPO, load_build
from support.sre_prom import promtool

build = load_build()
slo = build.slo()
SLO_RULES = REPO / "dashboards" / build.SLO_RULES_FILE


def test_slo_rule_file_passes_promtool_check() -> None:
    proc = promtool("check", "rules", str(SLO_RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_rules_follow_the_workbooks_windows_and_burn_rates() -> None:
    groups = yaml.safe_load(SLO_RULES.read_text())["groups"]
    # One group: records first, then the alerts that read them in the same evaluation.
    assert len(groups) == 1
    rules = groups[0]["rules"]
    kinds = ["record" if "record" in r else "alert" for r in rules]
    assert kinds == sorted(kinds, reverse=True)
    records = {r["record"] for r in rules if "record" in r}
    for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d", "30d"):
        assert slo.sli_record(w) in records
    alerts = {a["alert"]: a for a in rules if "alert" in a}
    fast, slow = alerts["ToolErrorBudgetBurnFast"], alerts["ToolErrorBudgetBurnSlow"]
    for expr, pairs in ((fast["expr"], (("1h", "5m", "14.4"), ("6h", "30m", "6"))),
                        (slow["expr"], (("1d", "2h", "3"), ("3d", "6h", "1")))):
        for long, short, factor in pairs:
            bar = f"> on (tool, slo) ({factor} * (1 - tool_slo:objective:ratio))"
            assert f"{slo.sli_record(long)} {bar}\n  and\n  {slo.sli_record(short)} {bar}" in expr
    assert fast["labels"]["severity"] == "critical" and slow["labels"]["severity"] == "warning"
    for a in (fast, slow):
        assert a["annotations"]["runbook_url"] == build.runbook_url(a["alert"])


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slos.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("objectives: {}", "a list under 'objectives'"),
        ("objectives: [{availability: 0.99}]", "needs a 'tool'"),
        ("objectives: [{tool: t, availability: 1.5}]", "between 0 and 1"),
        ("objectives: [{tool: t, availability: true}]", "between 0 and 1"),
        ("objectives: [{tool: t, latency: {threshold_s: 0.3, target: 0.9}}]", "bucket bound"),
        ("objectives: [{tool: t, latency: {target: 0.9}}]", "threshold_s and target"),
        ("objectives: [{tool: t, latency: {threshold_s: 0.3, target: 0.9, buckets: [0.2, 0.4]}}]",
         "bucket bound"),
        ("objectives: [{tool: t, latency: {threshold_s: 0.3, target: 0.9, buckets: [0, 0.3]}}]",
         "positive bucket bounds"),
        ("objectives: [{tool: t, latency: {threshold_s: 0.3, target: 0.9, le: [0.3]}}]",
         "threshold_s and target"),
        ("objectives: [{tool: t, avail: 0.9}]", "unknown keys ['avail']"),
        ("objectives: [{tool: t}]", "give 'availability' and/or 'latency'"),
        ("objectives: [{tool: t, availability: 0.9}, {tool: t, availability: 0.8}]",
         "more than one objective"),
        ("period: 30 days\nobjectives: []", "period"),
        ("objectives: [", "not YAML"),
    ],
)
def test_a_bad_slo_file_gets_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(slo.SloConfigError, match=None) as info:
        slo.load_slos(_config(tmp_path, text))
    assert message in str(info.value)


def test_the_generator_takes_another_slo_file(tmp_path: Path, capsys: Any) -> None:
    cfg = _config(tmp_path, "period: 28d\nobjectives:\n  - tool: fetch\n"
                            "    latency: {threshold_s: 2.5, target: 0.9}\n")
    out = tmp_path / "out"
    assert build.main(["--out", str(out), "--slos", str(cfg)]) == 0
    rules = yaml.safe_load((out / build.SLO_RULES_FILE).read_text())["groups"][0]["rules"]
    assert {"record": "tool_slo:objective:ratio", "expr": "vector(0.9)",
            "labels": {"tool": "fetch", "slo": "latency"}} in rules
    lat = next(r for r in rules if r["record"] == slo.sli_record("28d"))
    assert 'le="2.5"' in lat["expr"] and 'status!="rejected"' in lat["expr"]
    with pytest.raises(SystemExit):
        build.main(["--out", str(out), "--slos", str(_config(tmp_path, "objectives: 3"))])
    assert "a list under 'objectives'" in capsys.readouterr().err


def test_the_unit_tests_depend_on_the_objectives(tmp_path: Path) -> None:
    # With a 90% availability objective for read_text (a 10% budget), its 10% error ratio
    # burns at 1x: no page, and slo.test.yml fails.
    before = "  - tool: read_text\n    availability: 0.999"
    after = "  - tool: read_text\n    availability: 0.9"
    cfg = (REPO / "dashboards" / "slos.yml").read_text().replace(before, after)
    assert "availability: 0.9\n" in cfg
    weak = tmp_path / "dashboards" / "prometheus" / "tooltrace-slo-rules.yml"
    weak.parent.mkdir(parents=True)
    weak.write_text(build.render_slo_rules(_config(tmp_path, cfg)))
    tests_dir = tmp_path / "tests" / "rules"
    tests_dir.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "rules" / "slo.test.yml", tests_dir)
    proc = promtool("test", "rules", "slo.test.yml", cwd=tests_dir)
    assert proc.returncode != 0
    assert "ToolErrorBudgetBurnFast, time: 2h" in proc.stdout + proc.stderr


def test_a_tool_with_its_own_buckets_takes_a_threshold_among_them(tmp_path: Path) -> None:
    cfg = slo.load_slos(_config(tmp_path, (
        "objectives:\n  - tool: deploy_service\n    latency:\n      threshold_s: 1.3\n"
        "      target: 0.95\n      buckets: [0.5, 1.0, 1.2, 1.3, 1.4, 2.0]\n")))
    (o,) = cfg.objectives
    assert (o.tool, o.kind, o.threshold_s) == ("deploy_service", "latency", 1.3)
    # 1.3 s is no default bound: without its own buckets the tool cannot have this threshold.
    with pytest.raises(slo.SloConfigError, match="bucket bound"):
        slo.load_slos(_config(tmp_path, (
            "objectives:\n  - tool: deploy_service\n"
            "    latency: {threshold_s: 1.3, target: 0.95}\n")))
