"""``tooltrace compact``: move sealed audit segments into Parquet sorted by call id.

Writers do this in the background (``TOOLTRACE_AUDIT_COMPACT``); the command is for a trail they
left behind, a home where it is turned off, and ``--prune``. It waits for a compaction already
running, then takes what is left."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import OutputGuard, fail, home_option, json_option, print_json


@click.command()
@click.option("--prune", is_flag=True, help="Delete segments once they are in Parquet.")
@home_option
@json_option
def compact(prune: bool, home: Path | None, as_json: bool) -> None:
    """Compact sealed segments into Parquet and merge small Parquet files.

    Crashed writers' segments are sealed first. Audit writers compact in the background unless
    TOOLTRACE_AUDIT_COMPACT=off; this waits for a compaction already running, then takes the
    rest.
    """
    from .._settings import resolve_home
    from ..audit import compact as do_compact

    guard = OutputGuard(home)
    if not (resolve_home(home) / "audit").is_dir():
        fail(f"no audit trail under {guard(str(resolve_home(home)))} (set --home or"
             " TOOLTRACE_HOME)")
    res = do_compact(home, prune=prune)
    data = {"segments": res.segments, "calls": res.calls, "steps": res.steps,
            "files": list(res.files), "pruned": res.pruned, "merged": res.merged,
            "recovered": [r.segment for r in res.recovered]}
    if as_json:
        print_json(data, guard)
        return
    click.echo(f"compacted {res.segments} segments: {res.calls} calls, {res.steps} steps"
               f" into {len(res.files)} Parquet files" + (" (segments pruned)" if prune else ""))
    if res.merged:
        click.echo(f"merged {res.merged} small Parquet files into larger ones")
    for r in res.recovered:
        click.echo(f"sealed crashed writer's segment {r.segment} ({r.torn_bytes} torn bytes)")
