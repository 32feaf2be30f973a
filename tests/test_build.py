"""Which build of the call path runs: the source in a checkout, the compiled modules of a wheel."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import tooltrace
from tooltrace import _build

ROOT = Path(__file__).resolve().parent.parent
PKG = Path(tooltrace.__file__).resolve().parent

# Which build each module came from, and one call through the registry.
PROBE = """
import json, sys, tempfile
import tooltrace
from tooltrace import ToolCall, ToolRegistry, _build, tool
@tool("noop", execution="inline")
def noop(x: str) -> str:
    return x
d = tempfile.mkdtemp()
reg = ToolRegistry(workspace=d, home=d)
reg.register(noop)
env = reg.call(ToolCall("noop", {"x": "a"}))
bad = reg.call(ToolCall(7, {"x": "a"}))  # a non-string name is rejected, not a TypeError
reg.shutdown(1.0)
print(json.dumps({
    "compiled": _build.BUILD.compiled,
    "reason": _build.BUILD.reason,
    "files": {m: sys.modules["tooltrace." + m].__file__ for m in _build.COMPILED},
    "status": str(env.status),
    "steps": [str(s.step) for s in env.record.steps],
    "bad": [str(bad.status), str(bad.record.reject_stage)],
}))
"""


def _probe(env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
        cwd=tempfile.gettempdir(),  # not the checkout: its sources would shadow a wheel
        timeout=120,
    )
    assert out.stderr == ""
    probe: dict[str, object] = json.loads(out.stdout)
    assert probe["status"] == "ok"
    assert probe["steps"] == ["resolve", "validate", "policy", "admission", "execute", "redact"]
    assert probe["bad"] == ["rejected", "resolve"]
    return probe


def _expects_compiled() -> bool:
    """CI runs the call path's tests a second time on the compiled wheel and says so."""
    return os.environ.get("TOOLTRACE_EXPECT_COMPILED", "") == "1"


def _source(name: str) -> Path:
    return PKG / (name.replace(".", "/") + ".py")


def test_every_module_setup_compiles_exists() -> None:
    # setup.py takes COMPILED from _build.py; each entry must be a module of the package.
    assert "_selector.COMPILED" in (ROOT / "setup.py").read_text()
    for name in _build.COMPILED:
        assert _source(name).exists(), name


def test_the_build_in_use_is_the_one_on_disk() -> None:
    probe = _probe()
    files = probe["files"]
    assert isinstance(files, dict)
    assert sorted(files) == sorted(_build.COMPILED)
    if _expects_compiled():
        assert probe["compiled"] is True, probe["reason"]
        assert probe["reason"] == "compiled with mypyc"
        assert all(not f.endswith(".py") for f in files.values()), files
    else:
        assert probe["compiled"] is False, probe["reason"]
        assert probe["reason"] == "Python source"
        assert all(f.endswith(".py") for f in files.values()), files


def test_the_package_holds_exactly_the_build_in_use() -> None:
    built = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.so"))
    if _expects_compiled():
        # The wheel: one extension per compiled module plus mypyc's shared group, and the
        # docstrings mypyc dropped.
        assert len(built) == len(_build.COMPILED) + 1, built
        assert (PKG / "_build.json").exists()
    else:
        # An editable checkout runs what is edited: nothing compiled may sit beside the sources
        # (Python would import it instead); setup.py removes what an older build left there.
        assert PKG == ROOT / "tooltrace"
        assert built == [] and not (PKG / "_build.json").exists()


def test_a_compiled_build_gives_the_classes_their_docstrings_back() -> None:
    from tooltrace import ToolRegistry
    from tooltrace.redaction import Redactor

    assert ToolRegistry.__doc__ and "Registered tools" in ToolRegistry.__doc__
    assert Redactor.__doc__ and "secrets" in Redactor.__doc__


def test_version_says_which_build_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from tooltrace.cli import main; main()", "--version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    want = "compiled with mypyc" if _expects_compiled() else "Python source"
    assert out.stdout.strip().endswith(f"(call path: {want})")


def test_compiled_modules_declare_no_class_options() -> None:
    # mypyc builds a class with a non-native base (msgspec.Struct, say) without its class
    # keywords: frozen=True or gc=False would be silently lost. Such classes live in modules
    # that stay Python (envelope.py).
    for name in _build.COMPILED:
        tree = ast.parse(_source(name).read_text())
        options = [
            f"{name}.py:{node.lineno} class {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.keywords
        ]
        assert options == []


def test_records_keep_their_options_in_the_build_in_use() -> None:
    import gc

    from tooltrace.policy import PolicyRequest
    from tooltrace.registry import CallStatus, Status

    st = CallStatus("c", "t", Status.OK, None, "s")
    assert not gc.is_tracked(st)
    with pytest.raises(AttributeError):
        st.tool = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        PolicyRequest(None, {}, "default", "r", "c").mode = "plan"  # type: ignore[arg-type,misc]


def test_public_classes_of_the_call_path_can_be_subclassed(tmp_path: Path) -> None:
    # Compiled classes refuse Python subclasses unless they allow them: the public ones do, and
    # their overrides are honoured from the compiled code that calls them.
    from typing import Any

    from tooltrace import (
        CallContext,
        DenyCommandPatterns,
        Policy,
        PolicyDecision,
        PolicyRequest,
        Redactor,
        ToolCall,
        ToolRegistry,
        Verdict,
        tool,
    )
    from tooltrace.redaction import ArtifactStore

    class MyPolicy(Policy):
        def evaluate(self, request: PolicyRequest) -> Any:
            if request.arguments.get("x") == "no":
                return PolicyDecision(Verdict.DENY, "mine", "said no"), ("mine",)
            return super().evaluate(request)

    class MyPatterns(DenyCommandPatterns):
        pass

    class MyRedactor(Redactor):
        def redact(self, value: Any, depth: int = 0) -> tuple[Any, int]:
            red, n = super().redact(value, depth)
            if isinstance(red, str) and "hunter2" in red:
                return red.replace("hunter2", "[MINE]"), n + 1
            return red, n

    class MyRegistry(ToolRegistry):
        seen: list[str] = []

        def call(self, call: Any) -> Any:
            self.seen.append(call.name)
            return super().call(call)

    class MyStore(ArtifactStore):
        pass

    class MyContext(CallContext):
        pass

    @tool("echo", execution="inline")
    def echo(x: str) -> str:
        return x

    reg = MyRegistry(
        workspace=tmp_path,
        home=tmp_path / ".home",
        redactor=MyRedactor(),
        policy=MyPolicy(rules=[MyPatterns()]),
    )
    try:
        reg.register(echo)
        env = reg.call(ToolCall("echo", {"x": "pw hunter2"}))
        assert env.status == "ok", env.summary
        assert env.data == "pw [MINE]"
        assert env.record.args_redacted == {"x": "pw [MINE]"}
        assert MyRegistry.seen == ["echo"]
        denied = reg.call(ToolCall("echo", {"x": "no"}))
        assert denied.status == "rejected" and "said no" in denied.summary, denied.summary
        assert isinstance(MyStore(tmp_path / "artifacts"), ArtifactStore)
        assert issubclass(MyContext, CallContext)
    finally:
        reg.shutdown(2.0)
