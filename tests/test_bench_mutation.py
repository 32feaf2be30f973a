"""``python -m bench.mutation``: every security module it names and every test it runs
against one exist, annotation mutants are told apart, and ``--list`` prints the selection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import mutation

REPO = Path(__file__).resolve().parents[1]


def test_every_target_and_its_tests_exist() -> None:
    for name, t in mutation.TARGETS.items():
        assert (REPO / t.path).is_file(), name
        assert t.tests and all((REPO / f).is_file() for f in t.tests), name
    core = {t.path for t in mutation.TARGETS.values()}
    assert {"tooltrace/runtime/_sandbox.py", "tooltrace/runtime/_landlock.py",
            "tooltrace/audit/_signing.py", "tooltrace/audit/_anchors.py",
            "tooltrace/audit/_anchorcheck.py",
            "tooltrace/pipeline/_authorize.py", "tooltrace/policy/_paths.py",
            "tooltrace/redaction/_detectors.py"} <= core


def test_annotation_lines_are_only_annotations(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "from __future__ import annotations\n"
        "def f(a: int | None,\n"
        "      b: int = 1 | 2) -> str | None:\n"
        "    x: dict | list = {}\n"
        "    return str(a | b)\n")
    assert mutation._annotation_lines(src) == {2, 3, 4}


def test_list_prints_the_selection() -> None:
    out = subprocess.run([sys.executable, "-m", "bench.mutation", "--modules",
                          "policy,segmentcheck", "--list"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert [ln.split()[:2] for ln in out.splitlines()] == [
        ["policy", "tooltrace/policy/_rules.py"],
        ["segmentcheck", "tooltrace/audit/_segmentcheck.py"]]


def test_an_unknown_module_is_a_clear_error() -> None:
    res = subprocess.run([sys.executable, "-m", "bench.mutation", "--modules", "nope"],
                         cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 1 and "unknown module(s) nope" in res.stderr


def test_the_mutated_line_of_a_diff() -> None:
    changed = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    x = a - 1\n+    x = a & 1\n"
    removed = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1 @@\n-@functools.cache\n def f():\n"
    assert mutation._mutated_line(changed) == "x = a & 1"
    assert mutation._mutated_line(removed) == "-@functools.cache"
