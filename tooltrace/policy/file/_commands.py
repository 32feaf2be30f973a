"""The policy file's ``[commands]`` table: the sandbox ``run_command`` and background jobs run in,
and whether they may use the network.

    [commands]
    sandbox = "auto"    # auto (Landlock, else bubblewrap) | landlock | bwrap | off
    network = false     # outbound network from commands

They configure the built-in command tools when these are registered (``create_registry`` reads
them from the file first), so ``command_settings`` reads this table alone; the full check
(``check_policy``, ``load_policy``) reports its problems with the others, each at its place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...runtime import SANDBOX_MODES
from ._check import Checker
from ._source import Positions, parse_text

if TYPE_CHECKING:
    from ...builtins import CommandConfig

__all__ = ["CommandSettings", "check_commands", "command_settings"]

_KEYS = ("sandbox", "network")


@dataclass(frozen=True, slots=True)
class CommandSettings:
    """What a policy file's ``[commands]`` table sets (None: not set, the default holds)."""

    sandbox: str | None = None
    """``auto``, ``landlock``, ``bwrap`` or ``off``."""
    network: bool | None = None
    """Whether commands may use the network."""

    def config(self, base: CommandConfig | None = None) -> CommandConfig:
        """``base`` (default ``CommandConfig()``) with these settings applied."""
        from dataclasses import replace

        from ...builtins import CommandConfig

        given = {k: v for k in _KEYS if (v := getattr(self, k)) is not None}
        return replace(base if base is not None else CommandConfig(), **given)


def check_commands(ck: Checker, raw: Any) -> CommandSettings:
    """The ``[commands]`` table, checked (problems go to ``ck``)."""
    t = ck.table(("commands",), raw, _KEYS)
    sandbox = ck.choice(("commands", "sandbox"), t["sandbox"], SANDBOX_MODES) \
        if "sandbox" in t else None
    network = ck.boolean(("commands", "network"), t["network"]) if "network" in t else None
    return CommandSettings(sandbox, network)


def command_settings(path: str | os.PathLike[str]) -> CommandSettings | None:
    """The ``[commands]`` settings of the policy file at ``path``; None when it sets none or
    cannot be read or checked (``load_policy`` then says why)."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    doc, pos, problems = parse_text(text, name) if not name.endswith(".cedar") \
        else (None, Positions(""), [])
    if doc is None or problems or not isinstance(doc.get("commands"), Mapping):
        return None
    ck = Checker(name, pos)
    settings = check_commands(ck, doc["commands"])
    return None if ck.problems else settings
