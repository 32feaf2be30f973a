"""Call ids for people: the tables show each id as its shortest prefix unique in the trail
(``query``, ``approvals pending``), ``autopsy`` names its call whole, and every command that
takes an id takes any unique prefix and exits 2, naming the matches, for one that names several."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from tooltrace import ApprovalRequest, ToolCall, create_registry
from tooltrace.cli import main


def cli(*args: str, columns: int = 120) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def shortest(cid: str, every: list[str]) -> str:
    """``cid``'s shortest prefix, 13 characters at least, that no other id starts with."""
    return next(cid[:n] for n in range(13, len(cid) + 1)
                if not any(o.startswith(cid[:n]) for o in every if o != cid))


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Four writes made back to back (each keeps a snapshot): their ids share a prefix."""
    base = tmp_path_factory.mktemp("ids")
    (base / "ws").mkdir()
    reg = create_registry(base / "ws", home=base / "home", metrics=False, logging=False)
    try:
        envs = [reg.call(ToolCall("write_text", {"path": f"f{i}.txt", "text": "x"}))
                for i in range(4)]
    finally:
        reg.shutdown()
    assert all(e.ok for e in envs), [e.summary for e in envs]
    return base / "home", [e.call_id for e in envs]


def _several(ids: list[str]) -> str:
    """A prefix all the ids share (calls made a few ms apart share at least 9 characters)."""
    n = 0
    while all(len(i) > n and i[n] == ids[0][n] for i in ids):
        n += 1
    assert n >= 9, ids
    return ids[0][:n]


@pytest.mark.parametrize("command", [["autopsy"], ["report"], ["restore"],
                                     ["export", "--since"]])
def test_an_ambiguous_prefix_exits_2_and_names_the_matching_ids(
        trail: tuple[Path, list[str]], command: list[str]) -> None:
    home, ids = trail
    res = cli(*command, _several(ids), "--home", str(home))
    assert res.exit_code == 2, res.output
    assert "ambiguous" in res.output and "give more characters" in res.output
    if command[0] != "restore":  # the trail names the matches (the snapshot store counts them)
        assert sum(i in res.output for i in ids) >= 2, res.output


@pytest.mark.parametrize("command", [["autopsy"], ["report"], ["export", "--since"],
                                     ["restore", "--force"]])
def test_every_command_taking_a_call_id_takes_its_unique_prefix(
        trail: tuple[Path, list[str]], command: list[str], tmp_path: Path) -> None:
    home, ids = trail
    prefix = shortest(ids[-1], ids)
    out = ["-o", str(tmp_path / "out")] if command[0] in ("report", "export") else []
    res = cli(*command, prefix, "--home", str(home), *out)
    assert res.exit_code == 0, res.output
    if command[0] == "export":  # that call's start, the call included
        lines = (tmp_path / "out").read_text().splitlines()
        assert lines and any(ids[-1] in ln for ln in lines)


def test_autopsy_names_the_call_whole(trail: tuple[Path, list[str]]) -> None:
    home, ids = trail
    out = cli("autopsy", shortest(ids[1], ids), "--home", str(home)).output.splitlines()
    assert out[0].startswith(f"─── call {ids[1]} ─")
    assert out[1].split() == ["call", "id", ids[1]]


def test_query_shows_id_prefixes_unique_in_the_trail_and_wide_shows_them_whole(
        trail: tuple[Path, list[str]]) -> None:
    home, ids = trail
    every = [r["call_id"] for r in orjson.loads(cli(
        "query", "SELECT call_id FROM tool_calls", "--home", str(home), "--json").output)]
    sql = "SELECT call_id, tool FROM tool_calls WHERE tool = 'write_text' ORDER BY call_id"
    res = cli("query", sql, "--home", str(home))
    assert res.exit_code == 0, res.output
    cells = [ln.strip("│").split("│")[0].strip() for ln in res.output.splitlines()
             if ln.startswith("│")]
    assert cells == [shortest(i, every) for i in sorted(ids)]
    assert "shortest prefix unique in the trail" in res.output
    wide = cli("query", sql, "--home", str(home), "--wide")
    assert all(i in wide.output for i in ids) and "shortest prefix" not in wide.output
    js = orjson.loads(cli("query", sql, "--home", str(home), "--json").output)
    assert [r["call_id"] for r in js] == sorted(ids)


def test_approval_requests_are_listed_and_answered_by_unique_prefix(tmp_path: Path) -> None:
    from tooltrace.policy import ApprovalQueue

    home = tmp_path / "home"
    queue = ApprovalQueue(home, timeout=600)
    asked = [queue.submit(ApprovalRequest(call_id=f"c{i}", run_id="r", tool="deploy",
                                          arguments={"env": "prod"}, rule="ask", reason="why"))
             for i in range(3)]
    every = [p.approval_id for p in asked]
    listed = cli("approvals", "pending", "--home", str(home), columns=200)
    assert listed.exit_code == 0, listed.output
    cells = {ln.strip("│").split("│")[0].strip() for ln in listed.output.splitlines()
             if ln.startswith("│")}
    assert cells == {shortest(i, every) for i in every}
    several = cli("approvals", "answer", _several(every), "--approve", "--home", str(home))
    assert several.exit_code == 2 and "request id prefix" in several.output
    assert sum(i in several.output for i in every) >= 2
    one = cli("approvals", "answer", shortest(every[0], every), "--deny", "--home", str(home))
    assert one.exit_code == 0 and f"denied {every[0]}" in one.output, one.output
    _, answer = queue.get(every[0])
    assert answer is not None and not answer.approved
    unknown = cli("approvals", "answer", "0" * 13, "--approve", "--home", str(home))
    assert unknown.exit_code == 1, unknown.output


def test_a_live_view_tells_apart_the_ids_it_has_seen() -> None:
    from tooltrace.audit._idprefix import SeenIds

    # UUIDv7 ids of one millisecond from one process differ only near their end.
    a, b = "01a24ab8-b7c6-77ec-8d9d-196200000000", "01a24ab8-b7c6-77ec-8d9d-196300000000"
    seen = SeenIds()
    assert seen.prefix(a) == "01a24ab8-b7c6"  # alone so far
    seen.add(b)  # in flight, or in the same look at the trail
    assert seen.prefix(a) == "01a24ab8-b7c6-77ec-8d9d-1962"
    assert seen.prefix(b) == "01a24ab8-b7c6-77ec-8d9d-1963"
    assert seen.prefix("01a24ab8-b7c7-7000-8000-000000000000") == "01a24ab8-b7c7"


def test_an_ambiguous_prefix_names_each_call_s_tool_and_start(
        trail: tuple[Path, list[str]]) -> None:
    home, ids = trail
    res = cli("autopsy", _several(ids), "--home", str(home))
    assert res.exit_code == 2
    assert f"{ids[0]} (write_text, started " in res.output, res.output
