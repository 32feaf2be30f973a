"""``AuditStore.sql``'s parameters: written into the query as literals where they can be, with
the same answers binding gives, and nothing a value holds read as SQL."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pytest
from support.audit import make_record

from tooltrace.audit import AuditStore
from tooltrace.telemetry import AuditSink

ODD = ["it's", "a'); DROP TABLE x; --", "$tool", "-- not a comment", "/* nor this */", "\\'",
       "é ☃", "{calls}", "a{b"]


@pytest.fixture()
def store(tmp_path: Path) -> AuditStore:
    sink = AuditSink(home=tmp_path)
    rng = random.Random(7)
    for tool in ("read_text", *ODD):
        sink.emit(make_record(rng, kind="ok", tool=tool))
    sink.shutdown(10)
    return AuditStore(tmp_path)


def _bound(q: str, value: object) -> list[tuple[object, ...]]:
    return duckdb.connect().execute(q.replace("$x", "$1"), [value]).fetchall()


@pytest.mark.parametrize("value", [-5, -0.5, -0.0, 3, 2.5, 10**18, -(10**18)])
def test_a_number_after_a_minus_is_still_a_number(store: AuditStore, value: object) -> None:
    # Written out as it stands, a negative one would turn "3-$x" into "3--5": a comment.
    q = "SELECT 3-$x AS a, $x AS b"
    with store:
        got = store.sql(q, {"x": value}).rows
    assert got == _bound(q, value)


@pytest.mark.parametrize("value", [True, False, None])
def test_a_truth_value_or_none(store: AuditStore, value: object) -> None:
    q = "SELECT $x AS b, $x IS NULL AS c, coalesce($x, true) AS d"
    with store:
        got = store.sql(q, {"x": value}).rows
    assert got == _bound(q, value)


@pytest.mark.parametrize("tool", ODD)
def test_a_text_is_a_value_never_sql(store: AuditStore, tool: str) -> None:
    with store:
        rows = store.sql("SELECT tool FROM tool_calls WHERE tool = $t", {"t": tool}).rows
        assert rows == [(tool,)]
        # Each odd tool is one call: a text that escaped its quotes would match more or none.
        assert store.sql("SELECT count(*) FROM tool_calls").rows == [(len(ODD) + 1,)]


@pytest.mark.parametrize("tool", ODD)
def test_calls_filters_by_any_text(store: AuditStore, tool: str) -> None:
    with store:
        rows = store.calls(tool=tool, limit=5).rows
    assert [r[3] for r in rows] == [tool]


def test_placeholders_in_strings_and_comments_are_left_alone(store: AuditStore) -> None:
    with store:
        rows = store.sql("SELECT '$t' AS a, $t AS b -- $t\n", {"t": "x"}).rows
    assert rows == [("$t", "x")]


def test_values_with_no_literal_are_bound(store: AuditStore) -> None:
    with store:
        assert store.sql("SELECT $t AS a", {"t": "a\x00b"}).rows == [("a\x00b",)]
        assert store.sql("SELECT $f AS a", {"f": float("inf")}).rows == [(float("inf"),)]


def test_no_progress_bar_is_drawn_into_a_commands_output(store: AuditStore) -> None:
    # DuckDB draws one on standard output for a query that runs over two seconds.
    with store:
        assert store.sql("SELECT current_setting('enable_progress_bar')").rows == [(False,)]
