"""The CLI in any terminal: tables fit 80 and 120 columns with ids on one line and a note for
what was left out (``--wide`` shows all), ``calls``/``stats`` answer both outcome questions,
autopsy explains late steps and prints no empty field, and ``tooltrace query`` reads the trail
only."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result
from support.audit import run_real_workload

from tooltrace.cli import main


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("term")
    (base / "ws").mkdir()
    return base / "home", run_real_workload(base / "home", base / "ws")


def cli(*args: str, columns: int | None = None) -> Result:
    env = {"COLUMNS": str(columns)} if columns else {"COLUMNS": ""}
    return CliRunner().invoke(main, list(args), env=env)


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("command", [["calls"], ["stats"], ["query", "run_calls", "-p",
                                                            "run_id=run-real"], ["autopsy"]])
def test_tables_fit_the_terminal_with_ids_on_one_line(trail: tuple[Path, dict[str, str]],
                                                 columns: int, command: list[str]) -> None:
    home, ids = trail
    args = [*command, ids["unknown"]] if command == ["autopsy"] else command
    res = cli(*args, "--home", str(home), columns=columns)
    assert res.exit_code == 0, res.output
    table_lines = [ln for ln in res.output.splitlines() if ln[:1] in "┏┃┡│└"]
    assert table_lines and max(map(len, table_lines)) <= columns
    if command[0] in ("calls", "query"):  # each id as a prefix unique in the trail, one line
        cells = {c.strip() for ln in table_lines for c in ln.strip("│").split("│")}
        assert all(any(len(c) >= 13 and i.startswith(c) for c in cells) for i in ids.values())
    wide = cli(*args, "--home", str(home), "--wide", columns=columns)
    assert wide.exit_code == 0 and "left out" not in wide.output
    header = next(ln for ln in wide.output.splitlines() if ln.startswith("┃"))
    narrow_header = next(ln for ln in res.output.splitlines() if ln.startswith("┃"))
    if "left out" in res.output:  # what was left out is named, and --wide shows it
        note = res.output[res.output.index("left out"):].replace("\n", " ")
        dropped = note.split(":", 1)[1].split(";")[0].split(",")
        for col in dropped:
            col = " ".join(col.split())
            assert col not in narrow_header and col in header
        assert len(header) > columns  # the wide table did not fit, that is why


def test_at_80_columns_calls_keeps_id_tool_status_outcome_and_time(
        trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    res = cli("calls", "--home", str(home), "--status", "unknown", columns=80)
    head = next(ln for ln in res.output.splitlines() if ln.startswith("┃"))
    assert [h.strip() for h in head.strip("┃").split("┃")][:5] == [
        "call_id", "started_at", "tool", "status", "outcome"]
    row = next(ln for ln in res.output.splitlines() if ids["unknown"][:13] in ln)
    assert "unknown" in row and " ok " in row
    assert "--wide" in res.output and "run_id" in res.output  # the note names what is left out


def test_calls_answers_both_questions(trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail

    def listed(*flags: str) -> set[str]:
        res = cli("calls", "--home", str(home), "--json", *flags)
        assert res.exit_code == 0, res.output
        return {r["call_id"] for r in orjson.loads(res.output)}

    # The unknown call was resolved later as ok: it returned unknown, its outcome is ok.
    assert listed("--status", "unknown") == {ids["unknown"]}
    assert listed("--outcome", "unknown") == set()  # nothing is still unresolved
    assert ids["unknown"] in listed("--outcome", "ok")
    assert ids["unknown"] not in listed("--status", "ok")
    assert listed("--status", "unknown", "--outcome", "ok") == {ids["unknown"]}
    rows = orjson.loads(cli("calls", "--home", str(home), "--json", "--status",
                            "unknown").output)
    assert (rows[0]["status"], rows[0]["outcome"]) == ("unknown", "ok")


def test_stats_counts_status_and_outcome(trail: tuple[Path, dict[str, str]]) -> None:
    home, _ = trail
    rows = {r["tool"]: r for r in orjson.loads(cli("stats", "--home", str(home),
                                                    "--json").output)}
    sw = rows["slow_write"]
    assert (sw["ok"], sw["unknown"], sw["outcome_ok"], sw["outcome_unknown"]) == (0, 1, 1, 0)
    rt = rows["read_text"]
    assert rt["ok"] == rt["outcome_ok"] == 1 and rt["unknown"] == 0
    for r in rows.values():  # every call is counted under exactly one status
        assert r["calls"] == sum(r[k] for k in ("ok", "rejected", "failed", "cancelled",
                                                "unknown"))
        assert 0 <= r["hook_block_ratio"] <= 1


def test_stats_at_80_columns_keeps_what_needs_attention_and_every_ratio(
        trail: tuple[Path, dict[str, str]]) -> None:
    home, _ = trail
    out = cli("stats", "--home", str(home), columns=80).output
    heads = [[h.strip() for h in ln.strip("┃").split("┃")] for ln in out.splitlines()
             if ln.startswith("┃")]
    counts, ratios = heads
    assert counts[:6] == ["tool", "calls", "failed", "unknown", "outcome_unknown", "rejected"]
    assert ratios == ["tool", "p50_ms", "p95_ms", "params%", "policy%", "hook%", "offload%"]
    assert max(len(ln) for ln in out.splitlines() if ln[:1] in "┏┃┡│└") <= 80


def test_autopsy_explains_late_steps_and_prints_no_empty_field(
        trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    res = cli("autopsy", ids["unknown"], "--home", str(home), columns=80)
    out = res.output
    assert "Late steps (numbered from 1000: recorded after the call had returned)" in out
    late = out[out.index("Late steps"):]
    assert "1000 resolved ok" in late and "recorded later by runtime" in late
    assert "final outcome is ok" in late
    for line in out.splitlines():
        if line[:20].strip() and not line.startswith(("─", "┏", "┃", "┡", "│", "└", " ")):
            assert line[21:].strip(), f"empty field: {line!r}"
            assert not line.rstrip().endswith("->"), line
    data = orjson.loads(cli("autopsy", ids["unknown"], "--home", str(home), "--json").output)
    assert [s["seq"] for s in data["late"]] == [1000]
    from tooltrace.audit._autopsy import FIRST_LATE_SEQ
    from tooltrace.sinks import FIRST_LATE_SEQ as REGISTRY_FIRST_LATE_SEQ

    assert FIRST_LATE_SEQ == REGISTRY_FIRST_LATE_SEQ


def test_summaries_name_commands_that_exist(trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    data = orjson.loads(cli("autopsy", ids["unknown"], "--home", str(home), "--json").output)
    summary = data["result"]["summary"]
    assert "status(" not in summary
    assert f"tooltrace autopsy {ids['unknown']}" in summary
    suggested = summary.split("tooltrace ", 1)[1].rstrip(")").split()
    again = cli(*suggested, "--home", str(home))
    assert again.exit_code == 0 and ids["unknown"] in again.output


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1) TO '{tmp}/out.csv'",
    "COPY tool_calls TO '{tmp}/out.parquet' (FORMAT parquet)",
    "EXPORT DATABASE '{tmp}/exported'",
    "ATTACH '{tmp}/other.duckdb' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SELECT * FROM read_text('/etc/hostname')",
])
def test_query_reads_the_trail_only(trail: tuple[Path, dict[str, str]], tmp_path: Path,
                                    sql: str) -> None:
    res = cli("query", sql.format(tmp=tmp_path), "--home", str(trail[0]))
    assert res.exit_code == 1 and "query failed" in res.output, res.output
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_query_edge_statements(trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    nul = cli("query", "\x00", "--home", str(home))
    assert nul.exit_code == 1 and "no SQL statement" in nul.output
    assert nul.exception is None or isinstance(nul.exception, SystemExit)
    # The views still work under the lock, and so do prepared statements with named
    # parameters whose names are keywords.
    views = orjson.loads(cli("query", "SELECT (SELECT count(*) FROM tool_calls) AS c, "
                             "(SELECT count(*) FROM tool_call_intents) AS i", "--home",
                             str(home), "--json").output)
    assert views == [{"c": len(ids), "i": 0}]
    prepared = cli("query", "PREPARE q AS SELECT call_id FROM tool_calls ORDER BY call_id "
                   "LIMIT $limit; EXECUTE q(limit := 2)", "--home", str(home), "--json")
    assert prepared.exit_code == 0, prepared.output
    assert [r["call_id"] for r in orjson.loads(prepared.output)] == sorted(ids.values())[:2]
    shipped = cli("query", "offloads", "-p", "limit=1", "--home", str(home), "--json")
    assert shipped.exit_code == 0 and len(orjson.loads(shipped.output)) == 1


def test_query_tells_a_name_a_file_and_a_statement_apart(
        trail: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    home, ids = trail
    # A statement longer than any file name is SQL, never tried as a file.
    long_sql = "SELECT count(*) AS c FROM tool_calls WHERE " + " OR ".join(
        f"call_id = '{i}'" for i in ids.values()) + " OR " + " OR ".join(
        f"tool = 'no_such_tool_{n}'" for n in range(8))
    assert len(long_sql) > 300
    res = cli("query", long_sql, "--home", str(home), "--json")
    assert res.exit_code == 0 and res.exception is None, res.output
    assert orjson.loads(res.output) == [{"c": len(ids)}]
    # A single word is a shipped query's name; an unknown one is a usage error, not SQL.
    typo = cli("query", "unknown_outcome", "--home", str(home))
    assert typo.exit_code == 2 and "no shipped query named 'unknown_outcome'" in typo.output
    assert cli("query", "unknown_outcomes", "--home", str(home)).exit_code == 0
    # A path ending in .sql is a file, even one named like a shipped query.
    own = tmp_path / "offloads.sql"
    own.write_text("-- question: how many calls\nSELECT count(*) AS n FROM tool_calls\n")
    mine = cli("query", str(own), "--home", str(home), "--json")
    assert mine.exit_code == 0 and orjson.loads(mine.output) == [{"n": len(ids)}]
    missing = cli("query", str(tmp_path / "nope.sql"), "--home", str(home))
    assert missing.exit_code == 2 and "cannot read SQL file" in missing.output


def test_calls_shows_id_prefixes_unique_in_the_trail_that_autopsy_takes(
        trail: tuple[Path, dict[str, str]]) -> None:
    home, ids = trail
    res = cli("calls", "--home", str(home), columns=120)
    every = [r["call_id"] for r in orjson.loads(cli("calls", "--home", str(home),
                                                    "--json").output)]
    rows = [ln for ln in res.output.splitlines() if ln.startswith("│")]
    prefixes = [ln.strip("│").split("│")[0].strip() for ln in rows]
    prefixes = [p for p in prefixes if p]
    assert len(prefixes) == len(every)
    for p in prefixes:
        matches = [i for i in every if i.startswith(p)]
        assert len(matches) == 1 and len(p) >= 13, p  # unique, never shorter than the ms
        # one character less would not be unique, unless the prefix is the 13-character floor
        assert len(p) == 13 or sum(i.startswith(p[:-1]) for i in every) > 1, p
    again = cli("autopsy", prefixes[0], "--home", str(home), "--json")
    assert again.exit_code == 0, again.output
    assert orjson.loads(again.output)["call_id"] in every
    assert "shortest prefix unique in the trail" in res.output
    whole = cli("calls", "--home", str(home), "--wide", columns=120).output
    assert all(i in whole for i in ids.values())


@pytest.mark.parametrize("columns", [80, 120])
def test_autopsy_wraps_to_the_width_and_keeps_step_details(
        trail: tuple[Path, dict[str, str]], columns: int) -> None:
    home, ids = trail
    out = cli("autopsy", ids["unknown"], "--home", str(home), columns=columns).output
    lines = out.splitlines()
    assert max(map(len, lines)) <= columns, [ln for ln in lines if len(ln) > columns]
    head = next(ln for ln in lines if ln.startswith("┃"))
    assert "detail" in head and "decision" in head
    # The late resolution's detail is in its row, and the summary's id is whole on a line.
    assert any(ln.startswith("│ 1000") and "outcome=ok" in ln for ln in lines)
    assert any(ids["unknown"] in ln for ln in lines if ln.startswith(" " * 21))
