"""The proxy's policy when a policy file is in play: the proxy's own rules, then the file's."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _settings
from ..policy import Policy, Rule
from ..sinks import Sink

__all__ = ["proxy_policy"]


def proxy_policy(own: Sequence[Rule], policy_file: str | None) -> tuple[Policy, Sink | None]:
    """The proxy's rules, then a policy file's (``policy.file``, ``--policy``,
    ``TOOLTRACE_POLICY`` or ``./tooltrace.toml``) with its modes; and the sink that frees the
    file's calls-at-once limits, when it sets any. The upstream tools are not known yet, so the
    file may name any tool. An invalid file raises ``PolicyFileError``."""
    path = _settings.policy_path(policy_file)
    if path is None:
        return Policy(own), None
    from ..policyfile import LimitRelease, load_policy

    compiled = load_policy(path, tools=None).compiled
    policy = Policy([*own, *compiled.policy.rules], modes=compiled.policy.modes.values())
    slots = any(x.max_concurrent is not None for x in compiled.limits)
    return policy, (LimitRelease(compiled.limits) if slots else None)
