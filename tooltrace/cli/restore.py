"""``tooltrace restore <callId>``: undo a call's writes from the snapshots kept before it ran.

Each file is put back by a call of the built-in ``restore`` tool through the registry (policed,
audited like ``tooltrace call``), one call per file the earlier call wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from ._common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, OutputGuard, fail, home_option, json_option

__all__ = ["restore"]


@click.command()
@click.argument("call_id")
@click.option("--force", is_flag=True,
              help="Restore even if a file changed since the call (what is there is lost, "
                   "but kept as this restore's own snapshot).")
@click.option("--workspace", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="Workspace (default: the one the call wrote in).")
@click.option("--mode", default="default", show_default=True, help="Mode of the restore calls.")
@home_option
@json_option
def restore(call_id: str, force: bool, workspace: Path | None, mode: str, home: Path | None,
            as_json: bool) -> None:
    """Put back the files call CALL_ID (or a unique prefix) wrote, as they were before it.

    A file the call created is deleted. A file that changed since the call is left alone
    unless --force. Exit 0 when every file was restored, 1 otherwise.
    """
    from .. import create_registry
    from .._settings import resolve_home
    from ..model import ToolCall
    from ..snapshots import SnapshotNotFound, SnapshotStore

    guard = OutputGuard(home)
    root = resolve_home(home)
    try:
        store = SnapshotStore(root, 0)
        full = store.find(call_id)
        rec = store.load(full)
    except SnapshotNotFound as exc:
        # The store says "<n> calls with snapshots match <prefix>" for a prefix of several.
        several = " calls with" in str(exc)
        fail(guard(f"call id prefix {call_id[:40]!r} is ambiguous: {exc} -- give more characters"
                   if several else str(exc)), EXIT_USAGE if several else EXIT_FAIL)
    log_dir = root / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "cli.jsonl").open("a", encoding="utf-8") as log_stream:
        reg = create_registry(workspace or rec.workspace, home=home, metrics=False,
                              log_stream=log_stream)
        try:
            envs = [reg.call(ToolCall("restore", {"call_id": full, "path": f.path,
                                                  "force": force}, mode=mode))
                    for f in rec.files]
        finally:
            reg.shutdown()
    if as_json:
        click.echo(guard(orjson.dumps({"call_id": full, "restores": [e.to_dict() for e in envs]},
                                      default=str, option=orjson.OPT_INDENT_2).decode()))
    else:
        for e in envs:
            click.echo(guard(f"{e.status.value}: {e.summary}"))
            click.echo(guard(f"call_id: {e.call_id}"), err=True)
    sys.exit(EXIT_OK if envs and all(e.ok for e in envs) else EXIT_FAIL)
