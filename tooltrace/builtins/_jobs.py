"""Background jobs: ``run_command`` with ``ToolCall(background=True)``, and the tools that watch
and stop them (``job_status``, ``job_tail``, ``job_kill``).

Each registry has its own ``JobManager``. A background call starts the command, returns at once
with a ``job_id`` and a watcher thread drains the job's output (bounded like a foreground call).
The job lives until it exits, ``job_kill`` stops it, the starting call's deadline passes
(``ToolCall.timeout_s``, capped by the operator's maximum) or the registry shuts down. However it
ends, the end is recorded against the call that started it as a late ``job_ended`` step
(decision ``exited``, ``killed``, ``timeout`` or ``shutdown``). The watching tools are ordinary
registered tools, so every look and every kill is its own policed, traced and audited call.

A job is visible only to calls of the run that started it. At ``registry.shutdown()`` jobs are
killed (and recorded) unless they were started with ``keep_after_shutdown=true``: those are
detached (recorded as ``job_ended`` with decision ``detached``), lose their deadline and keep
running; their output is drained for as long as this process lives.
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

from ..model import Capability, Effect, Execution, FunctionTool, ToolResult, tool
from ..runtime import CallContext
from ._process import ProcessTree, report_output
from ._run_command import CommandConfig, build_run_command

if TYPE_CHECKING:
    from ..registry import ToolRegistry
    from ..runtime import Launch

__all__ = ["Job", "JobManager", "JobNotFoundError", "register_command_tools"]

_END_DECISION = {None: "exited", "kill": "killed", "deadline": "timeout", "shutdown": "shutdown"}


class JobNotFoundError(LookupError):
    """No job with this id is known to this registry for the calling run."""


class Job:
    """One background command and what is known about it."""

    __slots__ = ("ctx", "detached", "done", "job_id", "keep", "killed_by", "thread", "tree")

    def __init__(self, job_id: str, ctx: CallContext, tree: ProcessTree, keep: bool) -> None:
        self.job_id = job_id
        self.ctx = ctx
        self.tree = tree
        self.keep = keep
        self.done = threading.Event()
        self.killed_by: str | None = None
        self.detached = False
        self.thread: threading.Thread | None = None

    @property
    def state(self) -> str:
        """``running``, ``detached`` or how it ended (``exited|killed|timeout|shutdown``)."""
        if not self.done.is_set():
            return "detached" if self.detached else "running"
        return _END_DECISION.get(self.tree.stop_reason, "exited")

    def describe(self) -> dict[str, Any]:
        """A small, JSON-serialisable status."""
        t = self.tree
        return {
            "job_id": self.job_id,
            "state": self.state,
            "pid": t.pid,
            "exit_code": t.returncode if self.done.is_set() else None,
            "duration_s": round(t.duration_s, 4),
            "stdout_bytes": t.stdout.total,
            "stderr_bytes": t.stderr.total,
            "started_by": self.ctx.call_id,
            "keep_after_shutdown": self.keep,
            "progress": _progress(self.ctx),
        }


def _progress(ctx: CallContext) -> dict[str, Any] | None:
    """The latest progress the job reported (a command's: bytes and lines of output)."""
    m = ctx.last_progress
    if m is None:
        return None
    return {"done": m.done, "total": m.total, "message": m.message, "seq": m.seq,
            "at_us": m.at_us}


class JobManager:
    """The background jobs of one registry."""

    def __init__(self, config: CommandConfig, kill_grace_s: float, *, retain: int = 256) -> None:
        self.config = config
        self.kill_grace_s = kill_grace_s
        self._retain = retain
        self._jobs: collections.OrderedDict[str, Job] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    def running(self) -> list[Job]:
        """Jobs not yet ended (detached ones included)."""
        with self._lock:
            return [j for j in self._jobs.values() if not j.done.is_set()]

    def start(self, ctx: CallContext, launch: Launch, cwd: str, keep: bool) -> ToolResult:
        """Start ``launch`` as a job of ``ctx``'s call; return the call's result (the job id).
        The job owns the launch (closed when it ends, or at once if it cannot start)."""
        with self._lock:
            active = sum(1 for j in self._jobs.values() if not j.done.is_set())
            if self._closed or active >= self.config.max_jobs:
                launch.close()
                if self._closed:
                    raise RuntimeError("the registry is shutting down; no new jobs")
                raise RuntimeError(f"too many background jobs running ({active})")
            tree = ProcessTree(launch, cwd=cwd, config=self.config,
                               kill_grace_s=self.kill_grace_s)
            job = Job(f"job_{secrets.token_hex(8)}", ctx, tree, keep)
            self._jobs[job.job_id] = job
            self._trim()
        report_output(ctx, tree)
        job.thread = threading.Thread(target=self._watch, args=(job,), daemon=True,
                                      name=f"tooltrace-{job.job_id}")
        job.thread.start()
        ctx.set_detail("job_id", job.job_id)
        ctx.set_detail("pid", tree.pid)
        ctx.set_detail("keep_after_shutdown", keep)
        return ToolResult(
            {"job_id": job.job_id, "pid": tree.pid, "state": "running",
             "keep_after_shutdown": keep},
            summary=f"started background job {job.job_id}",
        )

    def _trim(self) -> None:
        while len(self._jobs) > self._retain:
            oldest = next((k for k, j in self._jobs.items() if j.done.is_set()), None)
            if oldest is None:
                return
            del self._jobs[oldest]

    def _watch(self, job: Job) -> None:
        tree = job.tree
        try:
            tree.run(job.ctx.deadline)
        finally:
            job.ctx.flush_progress()
            job.done.set()
            if not job.detached:
                detail: dict[str, Any] = {
                    "job_id": job.job_id,
                    "exit_code": tree.returncode,
                    "duration_s": round(tree.duration_s, 4),
                    "stdout_bytes": tree.stdout.total,
                    "stderr_bytes": tree.stderr.total,
                }
                if tree.stop_reason is not None:
                    detail["kill_confirmed"] = tree.confirmed
                if tree.stragglers_killed:
                    detail["stragglers_killed"] = True
                if job.killed_by is not None:
                    detail["killed_by"] = job.killed_by
                job.ctx.report_late("job_ended", _END_DECISION.get(tree.stop_reason, "exited"),
                                    detail)

    def get(self, job_id: str, run_id: str) -> Job:
        """The job ``job_id`` if the calling run may see it."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or job.ctx.run_id != run_id:
            raise JobNotFoundError("no such job in this run")
        return job

    def kill(self, job_id: str, ctx: CallContext) -> Job:
        """Stop a job's process group and wait (within ``ctx``'s deadline) until it ended."""
        job = self.get(job_id, ctx.run_id)
        if not job.done.is_set():
            if job.killed_by is None:
                job.killed_by = ctx.call_id
            job.tree.stop("kill")
            if not job.done.wait(ctx.remaining()):
                raise TimeoutError("the job did not end before this call's deadline")
        return job

    def shutdown(self, timeout_s: float) -> None:
        """Kill every job not kept after shutdown (recorded), detach the kept ones."""
        with self._lock:
            self._closed = True
            jobs = [j for j in self._jobs.values() if not j.done.is_set()]
        end = time.monotonic() + timeout_s
        for job in jobs:
            if job.keep:
                job.detached = True
                job.tree.deadline = None
                job.tree.wake()
                job.ctx.report_late("job_ended", "detached",
                                    {"job_id": job.job_id, "pid": job.tree.pid, "running": True})
            else:
                job.tree.stop("shutdown")
        for job in jobs:
            if not job.keep:
                job.done.wait(max(0.0, end - time.monotonic()))


def build_job_tools(manager: JobManager, source: str = "builtin") -> tuple[FunctionTool, ...]:
    """The ``job_status``, ``job_tail`` and ``job_kill`` tools bound to ``manager``."""

    @tool("job_status", capability=Capability.READ, effect=Effect.NONE, timeout_s=5.0,
          source=source, execution=Execution.INLINE, group="shell")
    def job_status(ctx: CallContext, job_id: Annotated[str, "Id returned by a background call"]
                   ) -> ToolResult:
        """State, exit code, duration and output sizes of a background job of this run."""
        job = manager.get(job_id, ctx.run_id)
        info = job.describe()
        ctx.set_detail("job_id", job.job_id)
        ctx.set_detail("state", info["state"])
        return ToolResult(info, summary=f"job {job.job_id} is {info['state']}")

    @tool("job_tail", capability=Capability.READ, effect=Effect.NONE, timeout_s=5.0,
          source=source, execution=Execution.INLINE, group="shell",
          parameters={
              "type": "object",
              "properties": {
                  "job_id": {"type": "string"},
                  "max_bytes": {"type": "integer", "minimum": 1, "maximum": 1048576,
                                "default": 4096},
                  "stream": {"enum": ["stdout", "stderr", "both"], "default": "both"},
              },
              "required": ["job_id"],
              "additionalProperties": False,
          })
    def job_tail(ctx: CallContext, job_id: str, max_bytes: int = 4096,
                 stream: Literal["stdout", "stderr", "both"] = "both") -> ToolResult:
        """The last output of a background job of this run."""
        job = manager.get(job_id, ctx.run_id)
        data: dict[str, Any] = {"job_id": job.job_id, "state": job.state}
        if stream in ("stdout", "both"):
            data["stdout"] = job.tree.stdout.last(max_bytes)
            data["stdout_bytes"] = job.tree.stdout.total
        if stream in ("stderr", "both"):
            data["stderr"] = job.tree.stderr.last(max_bytes)
            data["stderr_bytes"] = job.tree.stderr.total
        ctx.set_detail("job_id", job.job_id)
        return ToolResult(data, summary=f"tail of job {job.job_id} ({job.state})")

    @tool("job_kill", capability=Capability.EXECUTE, effect=Effect.LOCAL, timeout_s=15.0,
          source=source, group="shell")
    def job_kill(ctx: CallContext, job_id: Annotated[str, "Id returned by a background call"]
                 ) -> ToolResult:
        """Stop a background job of this run (SIGTERM, then SIGKILL) and wait until it ended."""
        job = manager.kill(job_id, ctx)
        info = job.describe()
        ctx.set_detail("job_id", job.job_id)
        ctx.set_detail("state", info["state"])
        if job.killed_by == ctx.call_id and job.tree.stop_reason == "kill":
            return ToolResult(info, summary=f"killed job {job.job_id}")
        return ToolResult(info, summary=f"job {job.job_id} had already ended ({info['state']})")

    return job_status, job_tail, job_kill


def register_command_tools(
    registry: ToolRegistry, config: CommandConfig | None = None, *, source: str = "builtin"
) -> JobManager:
    """Register ``run_command`` and the job tools in ``registry``; return its job manager.

    The kill grace is capped at half the registry's cancel grace, so a killed command is
    confirmed dead before the registry stops waiting for it.
    """
    config = config or CommandConfig()
    grace = min(config.kill_grace_s, registry.cancel_grace_s / 2)
    manager = JobManager(config, grace)
    registry.register(build_run_command(config, kill_grace_s=grace, start_job=manager.start,
                                        source=source))
    for t in build_job_tools(manager, source):
        registry.register(t)
    registry.on_shutdown(manager.shutdown)
    return manager
