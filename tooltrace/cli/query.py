"""``tooltrace query <file-or-sql>``: run a shipped query, a SQL file or SQL text."""

from __future__ import annotations

from pathlib import Path

import click

from ..audit import unique_prefixes
from ._common import (
    EXIT_FAIL,
    EXIT_USAGE,
    OutputGuard,
    fail,
    open_store,
    print_json,
    trail_options,
)
from ._common import table as print_table
from ._table import note

#: Result columns that hold call ids: shown as their shortest prefix unique in the trail.
_ID_COLUMNS = frozenset({"call_id", "parent_call_id"})


def _params(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        name, sep, val = v.partition("=")
        if not sep or not name.strip().isidentifier():
            raise click.BadParameter(f"{v!r}: use NAME=VALUE", param_hint="--param")
        out[name.strip()] = val
    return out


@click.command()
@click.argument("source", required=False)
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE",
              help="Value of a $NAME parameter (repeatable).")
@click.option("--list", "list_", is_flag=True, help="List shipped queries and their parameters.")
@trail_options
def query(source: str | None, params: tuple[str, ...], list_: bool, home: Path | None,
          as_json: bool, wide: bool, archive: str | None) -> None:
    """Run SQL over tool_calls, tool_call_steps and tool_call_intents.

    SOURCE is one of three things, told apart by its shape: a single word is a shipped query's
    name (see --list), text ending in .sql is a file, anything else is SQL text. Parameters are
    $NAME placeholders; documented defaults apply when not given (those in a PREPARE belong to
    its EXECUTE: `EXECUTE q(limit := 5)`). The query reads the trail and nothing else: it
    cannot write files, attach databases or load extensions. Exit 1 when the query fails, 2
    for a missing or unknown parameter.
    """
    from ..audit import MissingParameter, find_sql, load_sql, shipped_sql

    guard = OutputGuard(home)
    if list_:
        files = shipped_sql()
        if as_json:
            print_json([{"name": f.name, "question": f.question,
                         "params": [{"name": p.name, "type": p.type, "default": p.default,
                                     "required": p.required, "help": p.help} for p in f.params]}
                        for f in files], guard)
            return
        for f in files:
            click.echo(f"{f.name}: {f.question}")
            for p in f.params:
                dflt = "required" if p.required else f"default {p.default or 'none'}"
                click.echo(f"    ${p.name} ({p.type}, {dflt}): {p.help}")
        return
    if not source:
        fail("give a query name, a .sql file or SQL text (or --list)", EXIT_USAGE)
    sql = find_sql(source)
    if sql is None:
        if source.endswith(".sql"):
            path = Path(source)
            try:
                sql = load_sql(path.read_text(), path.stem)
            except (OSError, UnicodeDecodeError):
                fail(f"cannot read SQL file {source!r}", EXIT_USAGE, guard)
        elif source.replace("-", "_").isidentifier():
            # One bare word is a name, never a file nor SQL: a typo gets a clear answer.
            fail(f"no shipped query named {source!r} (tooltrace query --list names them; "
                 "a SQL file ends in .sql)", EXIT_USAGE, guard)
        else:
            sql = load_sql(source)
    try:
        bound = sql.bind(_params(params))
    except MissingParameter as exc:
        fail(str(exc), EXIT_USAGE)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    import duckdb

    with open_store(home, guard, archive) as store:
        try:
            # A remote or DuckLake archive cannot be locked down (it needs its network access).
            store.lock_down(sql.text)
            res = store.sql(sql.text, bound)
        except (duckdb.Error, ValueError) as exc:
            fail(f"query failed: {(str(exc).splitlines() or [''])[0][:300]}", EXIT_FAIL, guard)
        id_cols = [] if as_json or wide else [
            i for i, c in enumerate(res.columns) if c in _ID_COLUMNS]
        short = unique_prefixes(store, [r[i] for r in res.rows for i in id_cols
                                        if isinstance(r[i], str)]) if id_cols else {}
    if as_json:
        print_json(res.dicts(), guard)
        return
    if not res.rows:
        click.echo("no rows")
        return
    rows = [[short.get(v, v) if i in id_cols and isinstance(v, str) else v
             for i, v in enumerate(r)] for r in res.rows]
    print_table(None, res.columns, rows, guard, wide=wide)
    if any(short.get(v) != v for v in short):
        note("(call ids cut to their shortest prefix unique in the trail, which autopsy takes;"
             " --wide or --json shows them whole)")
