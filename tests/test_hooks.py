"""Pre- and post-hooks: decisions, re-validation, narrowing-only, fail-closed vs fail-open."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from tooltrace import HookDecision, HookView, Stage, Status, ToolCall, ToolRegistry, hook, tool
from tooltrace.builtins import register_builtins
from tooltrace.testing import RecordingSink


def _reg(
    workspace: Path, tmp_path: Path, hooks: list[Any], sink: RecordingSink | None = None
) -> ToolRegistry:
    reg = ToolRegistry(
        workspace=workspace, home=tmp_path / "h", hooks=hooks, sinks=[sink] if sink else []
    )
    register_builtins(reg)
    return reg


def _decisions(env: Any, step: str) -> list[tuple[str, str]]:
    return [(s.decider, s.decision) for s in env.steps if s.step == step]


def test_modify_to_invalid_shape_is_rejected_at_revalidation(
    workspace: Path, tmp_path: Path
) -> None:
    @hook()
    def breaker(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={"path": 123}, reason="oops")

    reg = _reg(workspace, tmp_path, [breaker])
    env = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.HOOK
    assert ("schema", "reject") in _decisions(env, "revalidate")
    assert not env.record.execution_started
    reg.shutdown()


def test_modify_that_narrows_is_applied_and_diffed(workspace: Path, tmp_path: Path) -> None:
    @hook()
    def redirect(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={"path": "notes/a.txt"}, reason="use the note")

    sink = RecordingSink()
    reg = _reg(workspace, tmp_path, [redirect], sink)
    env = reg.call(ToolCall("read_text", {"path": "notes/b.txt"}))
    assert env.status is Status.OK and env.data["text"] == "alpha\n"
    step = next(s for s in env.steps if s.step == "pre_hook")
    assert step.decision == "modify" and step.decider == "hook:redirect"
    assert step.detail is not None
    assert step.detail["diff"] == {"changed": {"path": ["notes/b.txt", "notes/a.txt"]}}
    assert env.record.hook_modified and env.record.args_redacted == {"path": "notes/a.txt"}
    reg.shutdown()


def test_hook_cannot_swap_tool_or_mode(workspace: Path, tmp_path: Path) -> None:
    @hook()
    def swapper(view: HookView) -> HookDecision:
        return HookDecision(action="modify", arguments=dict(view.arguments), tool="write_text")  # type: ignore[arg-type]

    @hook()
    def moder(view: HookView) -> HookDecision:
        return HookDecision(action="continue", mode="yolo")  # type: ignore[arg-type]

    for h in (swapper, moder):
        reg = _reg(workspace, tmp_path, [h])
        env = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
        assert env.status is Status.REJECTED and env.reject_stage is Stage.HOOK, env.summary
        assert ("hook:" + h.name, "block") in _decisions(env, "pre_hook")
        reg.shutdown()


@pytest.mark.parametrize("target", ["../secret.txt", "hello.txt"])
def test_hook_cannot_widen_a_path(workspace: Path, tmp_path: Path, target: str) -> None:
    # notes/a.txt -> ../secret.txt escapes the workspace; -> hello.txt leaves notes/: both widen.
    @hook()
    def widen(view: HookView) -> HookDecision:
        return HookDecision.modify(arguments={"path": target})

    reg = _reg(workspace, tmp_path, [widen])
    env = reg.call(ToolCall("read_text", {"path": "notes/a.txt"}))
    assert env.status is Status.REJECTED and env.reject_stage is Stage.HOOK, env.summary
    assert "TOP SECRET" not in repr(env.to_dict())
    reg.shutdown()


def test_required_hook_that_raises_or_hangs_blocks(workspace: Path, tmp_path: Path) -> None:
    @hook(required=True)
    def crash(view: HookView) -> HookDecision:
        raise ValueError("hook bug with token ghp_" + "x1Y2" * 9)

    release = threading.Event()
    finished: list[bool] = []

    @hook(required=True, timeout_s=0.2)
    def hang(view: HookView) -> HookDecision:
        release.wait(30)
        finished.append(True)
        return HookDecision.proceed()

    try:
        for h, word in ((crash, "raised"), (hang, "timed out")):
            reg = _reg(workspace, tmp_path, [h])
            env = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
            # The call did not wait for the hanging hook: it is still hanging.
            assert not finished
            assert env.status is Status.REJECTED and env.reject_stage is Stage.HOOK
            assert word in env.summary and "ghp_x1Y2" not in repr(env.to_dict())
            reg.shutdown()
    finally:
        release.set()


def test_optional_hook_that_raises_warns_and_call_continues(
    workspace: Path, tmp_path: Path
) -> None:
    @hook(required=False)
    def flaky(view: HookView) -> HookDecision:
        raise RuntimeError("flaky")

    reg = _reg(workspace, tmp_path, [flaky])
    env = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
    assert env.status is Status.OK
    assert ("hook:flaky", "warn") in _decisions(env, "pre_hook")
    reg.shutdown()


def test_hooks_see_redacted_arguments(workspace: Path, tmp_path: Path) -> None:
    seen: list[Any] = []
    secret = "AKIA" + "IOSFODNN7EXAMPLE"

    @hook()
    def spy(view: HookView) -> None:
        seen.append(dict(view.arguments))

    @tool()
    def store(value: str, note: str = "") -> str:
        return "stored " + str(len(value))

    @hook()
    def annotate(view: HookView) -> HookDecision:
        # Hands back the redacted value unchanged and narrows another argument.
        return HookDecision.modify(arguments={**view.arguments, "note": "n"})

    reg = _reg(workspace, tmp_path, [spy, annotate])
    reg.register(store)
    env = reg.call(ToolCall("store", {"value": f"key {secret}"}))
    assert env.status is Status.OK
    assert secret not in repr(seen) and "[REDACTED:" in seen[0]["value"]
    # The tool still got the raw value: the unchanged redacted view maps back to it.
    assert env.data == f"stored {len('key ' + secret)}"
    reg.shutdown()


def test_post_hook_can_redact_further_or_withhold(workspace: Path, tmp_path: Path) -> None:
    @hook(phase="post")
    def mask(view: HookView) -> HookDecision:
        assert view.phase == "post" and view.status == "ok"
        return HookDecision.modify(result={"text": "masked"}, reason="policy")

    reg = _reg(workspace, tmp_path, [mask])
    env = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
    assert env.status is Status.OK and env.data == {"text": "masked"}
    reg.shutdown()

    @hook(phase="post")
    def withhold(view: HookView) -> HookDecision:
        return HookDecision.block("contains customer data")

    reg = _reg(workspace, tmp_path, [withhold])
    env = reg.call(ToolCall("read_text", {"path": "hello.txt"}))
    assert env.status is Status.FAILED and env.data is None
    assert env.record.execution_started and "withheld" in env.summary
    reg.shutdown()


def test_bypass_every_entry_point_gets_the_same_rejection(workspace: Path, tmp_path: Path) -> None:
    """An always-block hook: no entry point reaches the tool's side effect."""
    marker = tmp_path / "side-effect"

    @tool(capability="write", effect="local")
    def touch(name: str) -> str:
        marker.write_text(name)
        return "touched"

    @hook(required=True)
    def deny_all(view: HookView) -> HookDecision:
        return HookDecision.block("maintenance window")

    reg = ToolRegistry(workspace=workspace, home=tmp_path / "h", hooks=[deny_all])
    reg.register(touch)
    call = ToolCall("touch", {"name": "x"})
    envs = [
        reg.call(call),
        reg.call({"name": "touch", "arguments": {"name": "x"}}),
        reg.call('{"name": "touch", "arguments": {"name": "x"}}'),
        asyncio.run(reg.acall(call)),
        reg.call(ToolCall("touch", {"name": "x"}, background=True)),
    ]
    assert not marker.exists()
    assert {(e.status, e.reject_stage) for e in envs} == {(Status.REJECTED, Stage.HOOK)}
    assert len({e.summary for e in envs}) == 1
    # No public attribute of the registry, or of what it returns, reaches the raw function.
    fn = touch.fn
    roots = [reg, reg.definition("touch"), *reg.resolution(), reg.visible_tools()]
    assert not _reaches(roots, fn)
    assert _reaches([touch], fn)  # the walk does find it where it is public-ish
    reg.shutdown()


def _reaches(roots: list[Any], target: Any, depth: int = 4) -> bool:
    seen: set[int] = set()
    todo = [(r, 0) for r in roots]
    while todo:
        obj, d = todo.pop()
        if obj is target:
            return True
        if id(obj) in seen or d >= depth or isinstance(obj, str | bytes | int | float):
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            todo.extend((v, d + 1) for v in obj.values())
            continue
        if isinstance(obj, list | tuple | set | frozenset):
            todo.extend((v, d + 1) for v in obj)
            continue
        # Public attributes only, plus FunctionTool's `_fn` so the positive control can work.
        for n in (n for n in dir(obj) if not n.startswith("_") or n == "_fn"):
            try:
                v = getattr(obj, n)
            except Exception:
                continue
            if callable(v) and getattr(v, "__self__", None) is obj:
                continue  # bound methods of the object itself
            todo.append((v, d + 1))
    return False
