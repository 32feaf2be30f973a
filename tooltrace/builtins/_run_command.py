"""``run_command``: run a program in the workspace under the call's deadline.

How a command runs:

- ``argv`` is executed directly (no shell). A shell is a separate, policy-visible opt-in: the
  ``shell`` argument exists only when the operator allows it (``CommandConfig.allow_shell``), and
  then ``argv`` must be one script string run by ``/bin/sh -c``.
- The child starts its own session (``start_new_session``), so it and everything it starts share
  one process group that is signalled as a whole.
- ``cwd`` is a workspace path checked by the same policy as every path argument, then opened by
  the policy's no-follow walk; the command starts in that open directory, never in whatever has
  its name by then, so a directory swapped for a symlink after the check cannot move it
  outside.
- The command runs in a kernel sandbox (``tooltrace.runtime.choose_sandbox``; Landlock or
  bubblewrap, ``CommandConfig.sandbox``): it may read and write the workspace and a private
  temporary directory (``TMPDIR``, fresh for each command and removed when it ends), read and
  execute the system's directories, and reach nothing else: not ``/tmp``, not ``$HOME``, not
  the tooltrace home. Outbound network is refused unless ``CommandConfig.network`` allows it.
  Where no sandbox can run, the command is refused (``SandboxUnavailableError``) unless the
  operator set ``sandbox="off"``. The execute step records the sandbox in force
  (``sandbox``: ``bwrap``, ``landlock-abi<N>`` or ``off``).
- The environment is the parent's, minus every variable whose name looks like a secret (KEY,
  TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH, COOKIE, SESSION, PRIVATE, ...) unless the operator
  allows it by name; ``TRACEPARENT`` carries the call's span context when tracing is on.
- stdout and stderr are drained by one selector loop (no deadlock on full pipes), each bounded in
  memory: past ``max_capture_bytes`` only the head and the tail are kept and the total is
  counted. The result goes back to the registry, which redacts it and offloads anything longer
  than its inline limit to a content-addressed artifact (sha256) with a preview inline.
- On deadline or cancel the process group gets SIGTERM, then SIGKILL after ``kill_grace_s``; the
  tool waits until no process of the group is left alive and then raises ``DeadlineExceeded`` /
  ``ToolCancelled``, which confirms the stop (status ``failed``/``timeout`` or ``cancelled``). If
  it cannot confirm within the registry's grace the call ends ``unknown`` and the later outcome is
  recorded as a ``resolved`` step.
- A process group never outlives its foreground call: when the program exits, group members
  still running (daemonised helpers, ``cmd &``) are killed after ``linger_s`` and the execute step
  says so (``stragglers_killed``). Use ``background=True`` to keep something running.
- A nonzero exit code is a result, not a tool failure: the status is ``ok`` and the exit code is
  in the data, the summary and the execute step (so the model sees the compiler errors).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigurationError, DeadlineExceeded, ToolCancelled
from ..model import Capability, Effect, FunctionTool, ToolResult, tool
from ..policy import ResolvedPath, Workspace
from ..redaction import default_redactor
from ..runtime import SANDBOX_MODES, CallContext
from ._process import _FD_DIR, OutputCapture, ProcessTree, report_output

if TYPE_CHECKING:
    # The sandbox (ctypes, Landlock) loads with the first command, not with the tools.
    from ..runtime import CommandSandbox, Grants, Launch

__all__ = [
    "SECRET_ENV_PATTERN",
    "CommandConfig",
    "OutputCapture",
    "PreparedCommand",
    "ProcessTree",
    "build_run_command",
    "scrub_env",
]

#: Environment variable names that look like they hold secrets (matched case-insensitively).
SECRET_ENV_PATTERN = (
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE"
    r"|SIGNATURE|_DSN$|DATABASE_URL|CONNECTION_STRING"
)


@dataclass(frozen=True, slots=True)
class CommandConfig:
    """Operator settings for ``run_command`` and background jobs (one per registry).

    ``env_allow`` names variables kept although they look secret; ``secret_env_pattern`` is
    the regular expression that marks a name secret. ``max_capture_bytes`` bounds what is kept of
    each stream (head and tail halves); ``kill_grace_s`` is the time between SIGTERM and SIGKILL
    (capped at half the registry's cancel grace so the kill is confirmed in time); ``linger_s``
    is how long group members may outlive the program before they are killed; ``max_jobs``
    bounds background jobs running at once.

    The sandbox (see the module doc): ``sandbox`` is ``auto`` (Landlock where it can enforce
    the grants, else bubblewrap), ``landlock``, ``bwrap`` or ``off`` (no sandbox: the command
    can reach anything its user can); ``network`` allows outbound network; ``read_paths``
    (read and execute) and ``write_paths`` (read and write) grant more absolute directories;
    ``bwrap_path`` names the bubblewrap executable; ``landlock_max_abi`` caps the Landlock ABI
    used (0: never Landlock).
    """

    env_allow: tuple[str, ...] = ()
    secret_env_pattern: str = SECRET_ENV_PATTERN
    allow_shell: bool = False
    shell_path: str = "/bin/sh"
    max_capture_bytes: int = 1024 * 1024
    kill_grace_s: float = 1.0
    linger_s: float = 0.2
    timeout_s: float = 60.0
    max_jobs: int = 16
    sandbox: str = "auto"
    network: bool = False
    read_paths: tuple[str, ...] = ()
    write_paths: tuple[str, ...] = ()
    bwrap_path: str = "bwrap"
    landlock_max_abi: int | None = None

    def __post_init__(self) -> None:
        if self.sandbox not in SANDBOX_MODES:
            raise ConfigurationError(
                f"sandbox must be one of {', '.join(SANDBOX_MODES)}, not {self.sandbox!r}")
        if not isinstance(self.network, bool):
            raise ConfigurationError("network must be true or false")
        for p in (*self.read_paths, *self.write_paths):
            if not isinstance(p, str) or not os.path.isabs(p):
                raise ConfigurationError("read_paths and write_paths must be absolute paths")
        if self.landlock_max_abi is not None and self.landlock_max_abi < 0:
            raise ConfigurationError("landlock_max_abi must be >= 0")
        if self.max_capture_bytes < 2:
            raise ValueError("max_capture_bytes must be at least 2")
        if self.kill_grace_s < 0 or self.linger_s < 0:
            raise ValueError("kill_grace_s and linger_s must be >= 0")
        if self.max_jobs < 0:
            raise ValueError("max_jobs must be >= 0")
        re.compile(self.secret_env_pattern)


def scrub_env(
    env: Mapping[str, str], allow: tuple[str, ...] = (), pattern: str = SECRET_ENV_PATTERN
) -> tuple[dict[str, str], list[str]]:
    """Drop secret-looking variables; return (kept environment, sorted names removed)."""
    rx = re.compile(pattern, re.IGNORECASE)
    allowed = set(allow)
    kept: dict[str, str] = {}
    removed: list[str] = []
    for k, v in env.items():
        if k not in allowed and rx.search(k):
            removed.append(k)
        else:
            kept[k] = v
    return kept, sorted(removed)

def command_grants(workspace: Workspace, config: CommandConfig) -> Grants:
    """What a command in ``workspace`` may reach: the workspace and ``write_paths`` read and
    write, its read-only roots and ``read_paths`` read; its protected roots (the home) never."""
    from ..runtime import Grants

    return Grants(
        write=(workspace.root, *(os.path.realpath(p) for p in config.write_paths)),
        read=(*workspace.read_only_roots, *(os.path.realpath(p) for p in config.read_paths)),
        hidden=workspace.protected_roots,
        network=config.network,
    )


@dataclass(frozen=True, slots=True)
class PreparedCommand:
    """A checked command, ready to start in its sandbox."""

    argv: list[str]
    """What to run (``/bin/sh -c SCRIPT`` for a shell command)."""
    cwd: ResolvedPath
    """The checked working directory."""
    env: dict[str, str]
    """The scrubbed environment."""
    sandbox: CommandSandbox
    """The sandbox it runs in."""
    grants: Grants
    """What the sandbox lets it reach."""

    def launch(self) -> Launch:
        """How to start it (makes its private temporary directory: start it, or close it)."""
        return self.sandbox.launch(self.argv, self.env, self.grants)


def _signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return str(-code)


def prepare(
    ctx: CallContext,
    config: CommandConfig,
    argv: list[str],
    cwd: str,
    env: Mapping[str, str] | None,
    shell: bool,
) -> PreparedCommand:
    """Check the arguments, build argv, cwd and environment, and choose the sandbox (raises
    ``SandboxUnavailableError`` where none the configuration allows can run)."""
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings")
    if any("\x00" in a for a in argv):
        raise ValueError("argv must not contain NUL bytes")
    if shell:
        if not config.allow_shell:
            raise PermissionError("shell commands are not allowed by this registry")
        if len(argv) != 1:
            raise ValueError("with shell=true, argv must be exactly one script string")
        argv = [config.shell_path, "-c", argv[0]]
    rp = ctx.workspace.resolve(cwd, must_exist=True)
    if not os.path.isdir(rp.absolute):
        raise NotADirectoryError("cwd is not a directory")
    child_env, removed = scrub_env(os.environ, config.env_allow, config.secret_env_pattern)
    if env:
        for k, v in env.items():
            if not isinstance(k, str) or not isinstance(v, str) or "=" in k or "\x00" in k + v:
                raise ValueError("env must map variable names to string values")
            child_env[k] = v
    if ctx.traceparent:
        child_env["TRACEPARENT"] = ctx.traceparent
    from ..runtime import choose_sandbox

    grants = command_grants(ctx.workspace, config)
    sandbox = choose_sandbox(config.sandbox, grants, bwrap=config.bwrap_path,
                             landlock_max_abi=config.landlock_max_abi)
    ctx.set_detail("cwd", rp.relative or ".")
    ctx.set_detail("env_removed", len(removed))
    ctx.set_detail("sandbox", sandbox.name)
    if config.network and sandbox.name != "off":
        ctx.set_detail("sandbox_network", True)
    return PreparedCommand(argv, rp, child_env, sandbox, grants)


@contextlib.contextmanager
def held_cwd(workspace: Workspace, rp: ResolvedPath) -> Iterator[str]:
    """Hold the checked directory ``rp`` open; give the ``cwd`` that names it (see ProcessTree).

    A process must be started inside the block: the name is valid only while it is open.
    """
    fd = workspace.open_dir(rp)
    try:
        yield f"{_FD_DIR}{fd}"
    finally:
        os.close(fd)


def result_data(tree: ProcessTree) -> dict[str, Any]:
    """The data a finished command returns (small facts first, so previews show them)."""
    rc = tree.returncode
    return {
        "exit_code": rc,
        "signal": _signal_name(rc),
        "duration_s": round(tree.duration_s, 4),
        "stdout_bytes": tree.stdout.total,
        "stderr_bytes": tree.stderr.total,
        "truncated": bool(tree.stdout.omitted or tree.stderr.omitted),
        "stragglers_killed": tree.stragglers_killed,
        "stdout": tree.stdout.text(),
        "stderr": tree.stderr.text(),
    }


# Starts the process before it returns (the cwd it gets is valid only during the call) or
# closes the launch.
StartJob = Callable[[CallContext, "Launch", str, bool], ToolResult]


def _parameters(config: CommandConfig) -> dict[str, Any]:
    """The schema of ``run_command``'s arguments (``shell`` only when the operator allows it)."""
    props: dict[str, Any] = {
        "argv": {
            "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4096,
            "description": "Program and its arguments (no shell)",
        },
        "cwd": {"type": "string", "default": ".",
                "description": "Workspace-relative working directory"},
        "env": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "Extra environment variables for the command"},
        "keep_after_shutdown": {
            "type": "boolean", "default": False,
            "description": "Background jobs only: keep running when the registry shuts down",
        },
    }
    if config.allow_shell:
        props["shell"] = {
            "type": "boolean", "default": False,
            "description": "Run argv[0] as a /bin/sh script (argv must have one element)",
        }
    return {"type": "object", "properties": props, "required": ["argv"],
            "additionalProperties": False}


def build_run_command(
    config: CommandConfig,
    *,
    kill_grace_s: float,
    start_job: StartJob | None = None,
    source: str = "builtin",
) -> FunctionTool:
    """Make the ``run_command`` tool for one registry (``start_job`` runs background calls)."""

    def run_command(
        ctx: CallContext,
        argv: list[str],
        cwd: str = ".",
        env: dict[str, str] | None = None,
        keep_after_shutdown: bool = False,
        shell: bool = False,
    ) -> ToolResult:
        """Run a command (argv, no shell) in the workspace; returns exit code and output."""
        command = prepare(ctx, config, argv, cwd, env, shell)
        full_argv = command.argv
        with held_cwd(ctx.workspace, command.cwd) as host_cwd:
            if ctx.background and start_job is not None:
                return start_job(ctx, command.launch(), host_cwd, keep_after_shutdown)
            tree = ProcessTree(command.launch(), cwd=host_cwd, config=config,
                               kill_grace_s=kill_grace_s)
        ctx.set_detail("pid", tree.pid)
        report_output(ctx, tree)
        ctx.on_cancel(tree.stop)
        # The registry signals the deadline; the tool's own check covers inline use and makes
        # the signal (and so the recorded reason) the same either way.
        tree.run(ctx.deadline, lambda: ctx.signal("deadline"))
        ctx.set_detail("exit_code", tree.returncode)
        ctx.set_detail("stdout_bytes", tree.stdout.total)
        ctx.set_detail("stderr_bytes", tree.stderr.total)
        if tree.stragglers_killed:
            ctx.set_detail("stragglers_killed", True)
        if tree.stop_reason is not None:
            ctx.set_detail("killed", tree.stop_reason)
            ctx.set_detail("kill_confirmed", tree.confirmed)
            if not tree.confirmed:
                raise RuntimeError("the command's processes could not be confirmed dead")
            if tree.stop_reason == "deadline":
                raise DeadlineExceeded("the command was killed at its deadline")
            raise ToolCancelled("the command was killed on cancel")
        data = result_data(tree)
        prog = default_redactor().bounded(os.path.basename(full_argv[0]), 64) or "command"
        total = tree.stdout.total + tree.stderr.total
        summary = (f"{prog} exited with code {tree.returncode} in {tree.duration_s:.2f} s "
                   f"({total} bytes of output)")
        if data["signal"]:
            summary = f"{prog} was killed by {data['signal']} after {tree.duration_s:.2f} s"
        return ToolResult(data, summary=summary)

    return tool(
        "run_command",
        capability=Capability.EXECUTE,
        effect=Effect.EXTERNAL,
        cancellable=True,
        timeout_s=config.timeout_s,
        source=source,
        path_params=("cwd",),
        background=True,
        parameters=_parameters(config),
        group="shell",
    )(run_command)
