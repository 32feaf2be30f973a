"""What-if decides alike calls once and still counts them one by one: calls alike in every fact
a rule reads but their run, id and times; a rule over an argument value; limits per run and per
principal; alike calls the recorded run decided differently; and two groups sharing a hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from tooltrace import Principal, create_registry
from tooltrace.cli import main
from tooltrace.model import ToolCall
from tooltrace.policy.file import _whatif

ANN = Principal(user="ann")
READS = '[[limits]]\nid = "reads"\ntools = ["read_text"]\nmax_calls = {n}\nper = "{per}"\n'
NO_B = '[[rules]]\nid = "no-b"\ntools = ["read_text"]\nargs = { path = "^b" }\n'


def _record(tmp_path: Path, policy: str, calls: list[tuple[str, str]]) -> tuple[Path, list[str]]:
    """Record ``calls`` (run, path read) through a registry with ``policy``: (home, call ids)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("a.txt", "b.txt"):
        (ws / name).write_text("x\n")
    f = tmp_path / "recorded.toml"
    f.write_text(policy)
    home = tmp_path / "home"
    reg = create_registry(ws, home=home, policy_file=f, metrics=False, logging=False)
    try:
        ids = [reg.call(ToolCall("read_text", {"path": path}, run_id=run, principal=ANN)
                        ).call_id for run, path in calls]
    finally:
        reg.shutdown()
    return home, ids


def _test(home: Path, tmp_path: Path, text: str, *since: str) -> dict[str, Any]:
    f = tmp_path / "candidate.toml"
    f.write_text(text)
    res = CliRunner().invoke(main, ["policy", "test", str(f), "--home", str(home), "--json",
                                    *since])
    assert res.exit_code in (0, 1), res.output
    d: dict[str, Any] = orjson.loads(res.stdout)
    return d


def _changes(d: dict[str, Any]) -> list[tuple[str, str, str, int, list[str]]]:
    return [(c["rule"], c["before"], c["after"], c["count"], c["examples"])
            for c in d["changes"]]


def test_calls_alike_in_every_fact_a_rule_reads_are_counted_per_run_and_per_principal(
    tmp_path: Path,
) -> None:
    # Six reads alike in tool, arguments, mode, principal and recorded decision; only their
    # runs, ids and times differ.
    home, ids = _record(tmp_path, "", [(run, "a.txt") for run in ("r1", "r2") for _ in range(3)])
    d = _test(home, tmp_path, READS.format(n=2, per="run"))
    assert (d["calls"], d["replayed"]) == (6, 6)
    assert _changes(d) == [("reads", "allow", "deny", 2, [ids[2], ids[5]])]
    assert _test(home, tmp_path, READS.format(n=2, per="run"), "--since", "7d") == d
    # The same principal in both runs: past its fourth call.
    d = _test(home, tmp_path, READS.format(n=4, per="principal"))
    assert _changes(d) == [("reads", "allow", "deny", 2, [ids[4], ids[5]])]


def test_a_rule_over_an_argument_value_changes_only_the_calls_with_that_value(
    tmp_path: Path,
) -> None:
    home, ids = _record(tmp_path, "", [("r1", p) for p in ("a.txt", "b.txt", "a.txt",
                                                          "b.txt", "a.txt")])
    d = _test(home, tmp_path, NO_B + READS.format(n=2, per="run"))
    # The rule denies the reads of b.txt, which the limit then does not count: only the third
    # read of a.txt is past it.
    assert _changes(d) == [("no-b", "allow", "deny", 2, [ids[1], ids[3]]),
                           ("reads", "allow", "deny", 1, [ids[4]])]
    # A limit that counts none of these calls: the rule's changes are the same, examples too.
    d = _test(home, tmp_path, NO_B + READS.replace("read_text", "write_text").format(
        n=1, per="run"))
    assert _changes(d) == [("no-b", "allow", "deny", 2, [ids[1], ids[3]])]


def test_alike_calls_the_recorded_run_decided_differently_are_told_apart(
    tmp_path: Path,
) -> None:
    # Recorded with a limit of 2: the last two of four alike reads were denied by it.
    home, ids = _record(tmp_path, READS.format(n=2, per="run"), [("r1", "a.txt")] * 4)
    d = _test(home, tmp_path, READS.format(n=3, per="run"))
    assert _changes(d) == [("reads", "deny", "allow", 1, [ids[2]])]
    d = _test(home, tmp_path, READS.format(n=1, per="run"))
    assert _changes(d) == [("reads", "allow", "deny", 1, [ids[1]])]
    d = _test(home, tmp_path, READS.format(n=2, per="run"))
    assert (d["changed"], d["changes"]) == (0, [])


@pytest.mark.parametrize("shared", [(False, True), (False, False)],
                         ids=["own-facts-hash", "every-hash"])
def test_groups_sharing_a_hash_are_told_apart_by_their_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: tuple[bool, bool],
) -> None:
    # A hash collision cannot be made on purpose here: the groups are said to share one, so
    # the calls are matched by a wider hash, or by the facts themselves.
    calls = [("r1", "a.txt"), ("r1", "b.txt"), ("r2", "a.txt")] * 3
    # Recorded with a limit of 5 per principal: the last four calls were denied by it.
    home, ids = _record(tmp_path, READS.format(n=5, per="principal"), calls)
    candidate = NO_B + READS.format(n=2, per="run")
    expected = _test(home, tmp_path, candidate)
    assert _changes(expected) == [("no-b", "allow", "deny", 2, [ids[1], ids[4]]),
                                  ("reads", "deny", "allow", 1, [ids[5]])]
    monkeypatch.setattr(_whatif, "_distinct_hashes", lambda con: shared)
    assert _test(home, tmp_path, candidate) == expected
