"""``tooltrace where``: where tooltrace keeps things for a workspace (never a secret)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson
from click.core import ParameterSource

from ._common import EXIT_USAGE, fail, home_option, json_option


def _located(home: Path | None, workspace: Path | None, source: ParameterSource | None
             ) -> dict[str, Any]:
    """What ``where`` reports, as JSON-ready values."""
    from .._settings import policy_path, resolve_home
    from ..audit import anchors_path, audit_dir, load_public_key, signing_key_path
    from ..exceptions import ConfigurationError

    ws = (workspace or Path.cwd()).absolute()
    h = resolve_home(home, workspace=ws).absolute()
    try:
        pub = load_public_key(h)
    except (ConfigurationError, OSError) as exc:
        fail(str(exc), EXIT_USAGE)
    policy = policy_path()
    return {
        "home": str(h),
        "home_from": ("--home" if source is ParameterSource.COMMANDLINE
                      else "TOOLTRACE_HOME" if source is ParameterSource.ENVIRONMENT
                      else "default for the workspace"),
        "workspace": str(ws),
        "audit_dir": str(audit_dir(h)),
        "audit_dir_exists": audit_dir(h).is_dir(),
        "anchors_file": str(anchors_path(h)),
        "signing_key_file": str(signing_key_path(h).absolute()),
        "public_key": None if pub is None else pub.hex,
        "key_id": None if pub is None else pub.kid,
        "public_key_file": None if pub is None or pub.path is None else str(pub.path.absolute()),
        "policy_file": None if policy is None else str(policy.absolute()),
    }


@click.command()
@click.option("--workspace", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The workspace whose home to show (default: the current directory).")
@home_option
@json_option
def where(workspace: Path | None, home: Path | None, as_json: bool) -> None:
    """Print the home in force and what lies in it: the audit directory, the anchors file, the
    public key (hex) and its file, and the policy file.

    The home is --home, else TOOLTRACE_HOME, else the workspace's own home in the user's state
    directory. Nothing secret is printed (the private and audit keys stay in their files).
    """
    ctx = click.get_current_context()
    info = _located(home, workspace, ctx.get_parameter_source("home"))
    if as_json:
        # Unguarded: the paths are what was asked for (and none of them is a secret).
        click.echo(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        return
    missing = "" if info["audit_dir_exists"] else " (no trail yet)"
    pub = (f"{info['public_key']} (key id {info['key_id']})" if info["public_key"]
           else "none yet (made when the first record is written)")
    rows = [
        ("home", f"{info['home']} ({info['home_from']})"),
        ("workspace", info["workspace"]),
        ("audit", info["audit_dir"] + missing),
        ("anchors", info["anchors_file"]),
        ("public key", pub),
        ("key file", info["public_key_file"] or "-"),
        ("signing key", info["signing_key_file"]),
        ("policy", info["policy_file"] or "none (the built-in default policy)"),
    ]
    for name, value in rows:
        click.echo(f"{name:<12} {value}")
