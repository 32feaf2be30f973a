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


def test_each_line_maps_to_its_statement_and_what_runs_at_import(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import functools\n"                 # 1
        "LIMIT = 3\n"                        # 2
        "@functools.cache\n"                 # 3
        "def table():\n"                     # 4
        "    return [LIMIT]\n"               # 5
        "def f(a,\n"                         # 6
        "      b=LIMIT):\n"                  # 7
        "    if (a >\n"                      # 8
        "            b):\n"                  # 9
        "        return 1\n"                 # 10
        "    return 2\n")                    # 11
    st = mutation._statements(src)
    assert st[2] == mutation.Statement(2, 2, True)
    assert st[3] == st[4] == mutation.Statement(3, 4, True)  # decorators are the header
    assert st[5].at_import  # a cached function's body serves every later caller
    assert st[7] == mutation.Statement(6, 7, True)  # defaults are evaluated at import
    assert st[9] == mutation.Statement(8, 9, False)  # an if by its header only
    assert st[10] == mutation.Statement(10, 10, False)


def test_a_mutant_runs_the_tests_that_execute_its_statement() -> None:
    t = mutation.Target("m.py", ("tests/test_m.py",))
    st = {1: mutation.Statement(1, 1, True), 5: mutation.Statement(5, 6, False),
          6: mutation.Statement(5, 6, False), 9: mutation.Statement(9, 9, False),
          12: mutation.Statement(12, 12, False)}
    cov = mutation.Coverage(
        by_line={5: frozenset({"t.py::b"}), 6: frozenset({"t.py::a"}),
                 12: frozenset({"", "t.py::a"})},
        order={"t.py::a": 0, "t.py::b": 1})
    assert mutation._selection(cov, st, t, 6, 6) == ("t.py::a", "t.py::b")  # in run order
    assert mutation._selection(cov, st, t, 1, 1) == t.tests  # runs at import
    assert mutation._selection(cov, st, t, 12, 12) == t.tests  # runs outside any test
    assert mutation._selection(cov, st, t, 9, 9) is None  # no test executes it
    child = mutation.Target("m.py", ("tests/test_m.py",), in_child=True)
    assert mutation._selection(cov, st, child, 9, 9) == child.tests


def test_lines_changed_since_a_commit_are_the_lines_it_added_or_changed(tmp_path: Path) -> None:
    """A repository of its own: one commit, then lines changed, added and deleted."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    f = tmp_path / "m.py"
    f.write_text("".join(f"line{i}\n" for i in range(1, 11)))
    git("add", "m.py")
    git("commit", "-q", "-m", "one")
    lines = f.read_text().splitlines()
    lines[1] = "changed2"  # line 2
    lines[5:7] = ["new6", "new7", "new8"]  # lines 6-7 replaced by three
    del lines[-1]  # line 10 deleted: nothing to run
    f.write_text("\n".join(lines) + "\n")
    git("commit", "-q", "-am", "two")
    old_root, mutation.ROOT = mutation.ROOT, tmp_path
    try:
        assert mutation._lines_changed("HEAD~1", "m.py", worktree=False) == {2, 6, 7, 8}
        f.write_text(f.read_text() + "tail\n")  # only in the working tree
        assert mutation._lines_changed("HEAD~1", "m.py", worktree=True) == {2, 6, 7, 8, 11}
        assert mutation._lines_changed("HEAD", "m.py", worktree=False) == set()
    finally:
        mutation.ROOT = old_root


def test_what_a_mutant_left_running_from_its_scratch_copy_is_killed(tmp_path: Path) -> None:
    # A looping helper in a session of its own outlives the test command's timeout.
    work = tmp_path / "scratch"
    (work / "tooltrace").mkdir(parents=True)
    helper = work / "tooltrace" / "helper.py"
    helper.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    left = subprocess.Popen([sys.executable, str(helper)], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              str(tmp_path / "scratch2" / "x")])
    try:
        assert mutation._reap(work) == 1
        assert left.wait(10) == -9
        assert other.poll() is None  # another copy's path that only starts alike is kept
    finally:
        other.kill()
        other.wait()
