"""Mutation testing of the security core with cosmic-ray: one module at a time, each against a
narrow selection of the tests that should notice, in a scratch copy of the checkout as
committed (``--worktree``: as the working tree has it; the working tree is never mutated). A
module whose tests fail unmutated is an error, not a score.

Usage (from the repository root)::

    .venv/bin/python -m bench.mutation                          # every security module
    .venv/bin/python -m bench.mutation --modules policy,authorize
    .venv/bin/python -m bench.mutation --changed-since origin/main --sample 40 --budget-s 170
    .venv/bin/python -m bench.mutation --pick 2 --sample 6 --seed "$(date +%j)"   # what CI runs
    .venv/bin/python -m bench.mutation --list                   # the modules and their tests

For each module it prints the mutants killed, survived and skipped, the score (killed over
killed plus survived; a timeout counts as killed, a mutant that does not even import as
neither) and every surviving mutant as a diff, except those listed in ``EQUIVALENT`` with the
reason they cannot be killed (printed apart, not counted). ``--sample N`` runs N mutants per
module drawn with ``--seed`` (the others are skipped); ``--budget-s`` stops starting modules
once the budget is spent; ``--pick K`` runs K of the chosen modules, drawn with ``--seed``.
Mutants in type annotations are not run: with postponed evaluation of annotations they are
equivalent by construction (counted apart). Exit status 1 when a module that ran all its
mutants is under ``--aim`` (default 90%), else 0: a sampled run reports, it does not judge.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """One security module and the tests that should notice a change to it."""

    path: str
    tests: tuple[str, ...]
    timeout_s: float = 60.0


TARGETS: dict[str, Target] = {
    "policy": Target("tooltrace/policy/_rules.py", (
        "tests/test_policy.py", "tests/test_fail_closed.py")),
    "authorize": Target("tooltrace/pipeline/_authorize.py", (
        "tests/test_fail_closed.py", "tests/test_hooks.py", "tests/test_approvals.py",
        "tests/test_home.py", "tests/test_policy.py")),
    "approvals": Target("tooltrace/policy/_approvals.py", (
        "tests/test_approvals.py", "tests/test_approval_ttl.py")),
    "paths": Target("tooltrace/policy/_paths.py", ("tests/test_paths.py", "tests/test_home.py")),
    "redactor": Target("tooltrace/redaction/_redactor.py", ("tests/test_redaction.py",)),
    "detectors": Target("tooltrace/redaction/_detectors.py", ("tests/test_redaction.py",)),
    "chain": Target("tooltrace/audit/_format.py", (
        "tests/test_known_answers.py", "tests/test_audit_verify.py")),
    "segmentcheck": Target("tooltrace/audit/_segmentcheck.py", (
        "tests/test_fail_closed.py", "tests/test_audit_verify.py",
        "tests/test_audit_signing.py")),
    "signing": Target("tooltrace/audit/_signing.py", (
        "tests/test_known_answers.py", "tests/test_audit_signing.py")),
    "anchors": Target("tooltrace/audit/_anchors.py", ("tests/test_anchors.py",)),
    "anchorcheck": Target("tooltrace/audit/_anchorcheck.py", ("tests/test_anchors.py",)),
    "sandbox": Target("tooltrace/runtime/_sandbox.py", ("tests/test_sandbox.py",), 120.0),
    "landlock": Target("tooltrace/runtime/_landlock.py", ("tests/test_sandbox.py",), 120.0),
}

# (module, text of the mutated line as it reads after the mutation, stripped) -> why no test
# can tell the mutant from the original. Listed here, printed apart, not counted.
# A removed line reads "-<line>"; module "*" matches every module.
EQUIVALENT: dict[tuple[str, str], str] = {
    ("policy", 'if (t == str and "://" in v) or t not in _PLAIN:'):
        "type(v) is str and type(v) == str agree for every type (a type compares by identity)",
    ("policy", "and ip.is_link_local"):
        "every link-local address (169.254/16, fe80::/10) is also is_private, the test before",
    ("segmentcheck", "missing = sorted(set(range(first, top + 0)) - set(counts))"):
        "top is max(counts): the one value the shorter range leaves out is never missing",
}


_COPIED = ("tooltrace", "tests", "bench", "docs", "dashboards", "queries", "pyproject.toml",
           "setup.py", "mkdocs.yml", "README.md", "CHANGELOG.md")


def _scratch(worktree: bool) -> Path:
    """A copy of the package and tests (and what they read) to mutate: as committed (HEAD),
    or as the working tree has them."""
    dst = Path(tempfile.mkdtemp(prefix="tooltrace-mutation-"))
    if not worktree:
        names = [n for n in _COPIED if (ROOT / n).exists()]
        archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", *names], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
        return dst
    ignore = shutil.ignore_patterns("__pycache__", "*.so", ".mypy_cache")
    for name in _COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dst / name, ignore=ignore, symlinks=True)
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dst / name)
    return dst


def _command(t: Target) -> str:
    return (f"{sys.executable} -m pytest -x -q -p no:cacheprovider "
            f"--timeout {int(t.timeout_s)} {' '.join(t.tests)}")


def _baseline(work: Path, t: Target) -> str | None:
    """None when the module's tests pass unmutated; else the end of their output (a failing
    baseline would count every mutant as killed)."""
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
    res = subprocess.run(_command(t).split(), cwd=work, env=env, text=True,
                         capture_output=True, check=False)
    return None if res.returncode == 0 else (res.stdout + res.stderr)[-1500:]


def _config(work: Path, name: str, t: Target) -> Path:
    cmd = _command(t)
    cfg = work / f"mutation-{name}.toml"
    cfg.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{t.path}"\n'
        f"timeout = {t.timeout_s * 2}\n"
        "excluded-modules = []\n"
        f"test-command = {cmd!r}\n".replace("'", '"')
        + '[cosmic-ray.distributor]\nname = "local"\n')
    return cfg


def _cr(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("cosmic-ray")
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([str(exe), *args], cwd=work, env=env, text=True, capture_output=True,
                          check=False)


@dataclasses.dataclass(slots=True)
class Score:
    """One module's outcome."""

    name: str
    killed: int = 0
    survived: list[str] = dataclasses.field(default_factory=list)
    equivalent: list[str] = dataclasses.field(default_factory=list)
    skipped: int = 0
    incompetent: int = 0
    annotation: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        """Killed plus survived."""
        return self.killed + len(self.survived)

    @property
    def percent(self) -> float:
        """Killed over killed plus survived (100 with nothing to kill)."""
        return 100.0 * self.killed / self.total if self.total else 100.0


def _annotation_lines(path: Path) -> set[int]:
    """Lines of type annotations: with ``from __future__ import annotations`` they are never
    evaluated, so a mutant in one (``X | None`` to ``X ^ None``) is equivalent by
    construction."""
    tree = ast.parse(path.read_text())
    notes: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            notes.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            notes.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
    return {n.lineno for note in notes for n in ast.walk(note) if isinstance(n, ast.BinOp)}


def _mutated_line(diff: str) -> str:
    """The mutated line as it reads after the mutation; "-<line>" when a line was removed."""
    lines = diff.splitlines()
    added = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    if any(added):
        return next(a for a in added if a)
    return "-" + next((r for r in removed if r), "")


def run_module(work: Path, name: str, t: Target, sample: int | None, seed: int) -> Score:
    """Init, (sample), exec and read back one module's session."""
    from cosmic_ray.work_db import WorkDB, use_db  # type: ignore[import-untyped]
    from cosmic_ray.work_item import (  # type: ignore[import-untyped]
        TestOutcome,
        WorkerOutcome,
        WorkResult,
    )

    t0 = time.monotonic()
    failing = _baseline(work, t)
    if failing is not None:
        raise SystemExit(f"mutation: {name}: its tests fail before any mutation:\n{failing}")
    cfg = _config(work, name, t)
    session = work / f"mutation-{name}.sqlite"
    session.unlink(missing_ok=True)
    res = _cr(work, "init", str(cfg), str(session))
    if res.returncode:
        raise SystemExit(f"cosmic-ray init failed for {name}:\n{res.stderr[-2000:]}")
    notes = _annotation_lines(work / t.path)
    annotation = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for w in list(db.pending_work_items):
            m = w.mutations[0]
            if m.operator_name.startswith("core/ReplaceBinaryOperator_BitOr") and (
                    m.start_pos[0] in notes):
                db.set_result(w.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED,
                                                   output="annotation"))
                annotation += 1
    if sample is not None:
        with use_db(str(session), WorkDB.Mode.open) as db:
            # Drawn from the mutants in source order (job ids are random): a seed names a sample.
            ids = [w.job_id for w in sorted(db.pending_work_items, key=lambda w: (
                w.mutations[0].start_pos, w.mutations[0].operator_name,
                w.mutations[0].occurrence))]
            keep = set(random.Random(f"{seed}:{name}").sample(ids, min(sample, len(ids))))
            for job in ids:
                if job not in keep:
                    db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    res = _cr(work, "exec", str(cfg), str(session))
    if res.returncode:
        raise SystemExit(f"cosmic-ray exec failed for {name}:\n{res.stderr[-2000:]}")
    score = Score(name, annotation=annotation)
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                score.skipped += result.output != "annotation"
                continue
            if result.test_outcome == TestOutcome.INCOMPETENT:
                score.incompetent += 1
                continue
            if result.test_outcome != TestOutcome.SURVIVED:  # killed, or timed out
                score.killed += 1
                continue
            diff = result.diff or ""
            m = item.mutations[0]
            where = f"{m.module_path}:{m.start_pos[0]} {m.operator_name}"
            line = _mutated_line(diff)
            why = EQUIVALENT.get((name, line)) or EQUIVALENT.get(("*", line))
            if why is not None:
                score.equivalent.append(f"{where}: {why}")
            else:
                score.survived.append(f"{where}\n{diff}")
    score.seconds = time.monotonic() - t0
    return score


def _changed(ref: str) -> set[str]:
    base = subprocess.run(["git", "merge-base", "HEAD", ref], cwd=ROOT, text=True,
                          capture_output=True, check=False).stdout.strip() or ref
    out = subprocess.run(["git", "diff", "--name-only", base], cwd=ROOT, text=True,
                         capture_output=True, check=False).stdout
    return {ln.strip() for ln in out.splitlines()}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.mutation", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--modules", help="comma-separated names (see --list); default all")
    p.add_argument("--changed-since", metavar="REF",
                   help="only modules whose file (or test selection) changed since the merge"
                        " base with REF")
    p.add_argument("--pick", type=int, help="run only this many of the modules, drawn with"
                                             " --seed")
    p.add_argument("--sample", type=int, help="mutants per module, drawn with --seed")
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--budget-s", type=float, help="start no module after this many seconds")
    p.add_argument("--aim", type=float, default=90.0, help="the score a full run must reach")
    p.add_argument("--list", action="store_true", help="print the modules and their tests")
    p.add_argument("--worktree", action="store_true",
                   help="mutate the working tree's files (default: HEAD's, as committed)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the chosen modules; print one table and the survivors."""
    ns = _parser().parse_args(argv)
    names = list(TARGETS) if not ns.modules else [m.strip() for m in ns.modules.split(",")]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise SystemExit(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    if ns.list:
        for n in names:
            print(f"{n:14} {TARGETS[n].path:34} {' '.join(TARGETS[n].tests)}")
        return 0
    if ns.changed_since:
        changed = _changed(ns.changed_since)
        names = [n for n in names
                 if TARGETS[n].path in changed or changed & set(TARGETS[n].tests)]
        if not names:
            print(f"mutation: no security module changed since {ns.changed_since}")
            return 0
    if ns.pick is not None:
        names = sorted(random.Random(ns.seed).sample(names, min(ns.pick, len(names))),
                       key=names.index)
    work = _scratch(ns.worktree)
    t0 = time.monotonic()
    scores: list[Score] = []
    try:
        for n in names:
            if ns.budget_s is not None and time.monotonic() - t0 > ns.budget_s:
                print(f"mutation: budget spent, {n} and later modules not run")
                break
            s = run_module(work, n, TARGETS[n], ns.sample, ns.seed)
            scores.append(s)
            print(f"mutation: {n}: {s.killed}/{s.total} killed ({s.percent:.1f}%),"
                  f" {s.skipped} skipped, {s.incompetent} not viable, {s.annotation} in"
                  f" annotations (equivalent), {s.seconds:.0f}s",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'module':14} {'file':34} {'killed':>7} {'survived':>8} {'score':>7}")
    for s in scores:
        print(f"{s.name:14} {TARGETS[s.name].path:34} {s.killed:7d} {len(s.survived):8d}"
              f" {s.percent:6.1f}%")
    for s in scores:
        for e in s.equivalent:
            print(f"\nequivalent (not counted) {e}")
        for sv in s.survived:
            print(f"\nSURVIVED {sv}")
    full = [s for s in scores if not s.skipped]
    return 1 if any(s.percent < ns.aim for s in full) else 0


if __name__ == "__main__":
    raise SystemExit(main())
