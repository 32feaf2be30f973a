"""Mutation testing of the security core with cosmic-ray: one module at a time, in scratch
copies of the checkout as committed (``--worktree``: as the working tree has it; the working
tree is never mutated). Each mutant runs only the tests that execute its line. A module whose
tests fail unmutated is an error, not a score.

Usage (from the repository root)::

    .venv/bin/python -m bench.mutation                          # every security module
    .venv/bin/python -m bench.mutation --modules policy,authorize --jobs 2
    .venv/bin/python -m bench.mutation --changed-since origin/main --sample 40 --budget-s 170
    .venv/bin/python -m bench.mutation --pick 2 --sample 3 --seed "$(date +%j)"   # what CI runs
    .venv/bin/python -m bench.mutation --list                   # the modules and their tests

The tests a mutant runs: the module's test files are run once unmutated under coverage with
one context per test (pytest-cov's ``--cov-context=test``), which records the test node ids
that execute each line. A mutant runs the node ids that execute the lines of its statement
(``pytest -x``, stopped at the first failure). A mutant in code that runs when the module is
imported (module and class bodies, a ``def``'s decorators and defaults, the body of a cached
function) or in a Python subprocess a test starts runs the module's whole selection, since
no one test can be credited with it.
A mutant whose line no test executes survives without a run. ``--confirm N`` runs up to N
survivors of their narrow selection once more against the whole selection: a kill there counts
as a kill and is reported, as a sign the selection was too narrow.

For each module it prints the mutants killed, survived and skipped, the score (killed over
killed plus survived; a timeout counts as killed, a mutant that does not even import as
neither) and every surviving mutant as a diff, except those listed in ``EQUIVALENT`` with the
reason they cannot be killed (printed apart, not counted). ``--sample N`` runs N mutants per
module drawn with ``--seed`` (the others are skipped); ``--lines-changed-since REF`` runs only
the mutants on lines added or changed since REF; ``--budget-s`` stops starting modules
once the budget is spent; ``--pick K`` runs K of the chosen modules, drawn with ``--seed``;
``--jobs N`` runs N mutants at once, each in a scratch copy of its own. The mutants run at
idle CPU priority (``SCHED_IDLE``), so they take only the time nobody else wants.
Mutants in type annotations are not run: with postponed evaluation of annotations they are
equivalent by construction (counted apart). Exit status 1 when a module that ran all its
mutants is under ``--aim`` (default 90%), else 0: a sampled run reports, it does not judge.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import queue
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """One security module and the tests that should notice a change to it."""

    path: str
    tests: tuple[str, ...]
    timeout_s: float = 60.0
    # The module also runs in child processes that coverage does not follow: a line no test is
    # seen to execute runs the whole selection instead of surviving unrun.
    in_child: bool = False


TARGETS: dict[str, Target] = {
    "policy": Target("tooltrace/policy/_rules.py", (
        "tests/test_policy.py", "tests/test_fail_closed.py", "tests/test_approvals.py",
        "tests/test_registry.py")),
    "authorize": Target("tooltrace/pipeline/_authorize.py", (
        "tests/test_fail_closed.py", "tests/test_hooks.py", "tests/test_approvals.py",
        "tests/test_home.py", "tests/test_policy.py", "tests/test_nested.py",
        "tests/test_registry.py", "tests/test_paths_read_only.py")),
    "approvals": Target("tooltrace/policy/_approvals.py", (
        "tests/test_approvals.py", "tests/test_approval_ttl.py")),
    "paths": Target("tooltrace/policy/_paths.py", (
        "tests/test_paths.py", "tests/test_home.py", "tests/test_paths_read_only.py")),
    "redactor": Target("tooltrace/redaction/_redactor.py", (
        "tests/test_redaction.py", "tests/test_redaction_encoded.py",
        "tests/test_redaction_values.py")),
    "detectors": Target("tooltrace/redaction/_detectors.py", (
        "tests/test_redaction.py", "tests/test_redaction_detectors.py")),
    "chain": Target("tooltrace/audit/_format.py", (
        "tests/test_known_answers.py", "tests/test_audit_verify.py")),
    "jsonsafe": Target("tooltrace/_jsonsafe.py", (
        "tests/test_known_answers.py", "tests/gauntlet/test_bad_input.py",
        "tests/test_logging.py", "tests/test_tracing.py")),
    "segmentcheck": Target("tooltrace/audit/_segmentcheck.py", (
        "tests/test_fail_closed.py", "tests/test_audit_verify.py",
        "tests/test_audit_verify_rules.py", "tests/test_audit_signing.py")),
    "signing": Target("tooltrace/audit/_signing.py", (
        "tests/test_known_answers.py", "tests/test_audit_signing.py")),
    "anchors": Target("tooltrace/audit/_anchors.py", ("tests/test_anchors.py",)),
    "anchorcheck": Target("tooltrace/audit/_anchorcheck.py", (
        "tests/test_anchors.py", "tests/test_anchorcheck.py")),
    "sandbox": Target("tooltrace/runtime/_sandbox.py", ("tests/test_sandbox.py",), 120.0),
    "landlock": Target("tooltrace/runtime/_landlock.py", (
        "tests/test_sandbox.py", "tests/test_landlock.py"), 120.0,
                       in_child=True),
}

# Reasons shared by several equivalent mutants.
_MEMO_ONLY = ("the allow step's memo lives in one environment (a new redactor makes a new one)"
              " and is checked against the redactor's generation: the mutant only remembers"
              " less or recomputes the same detail")
_DRIVER = ("the drivers send the approver's answer as ('ok', answer) or ('error', exception):"
           " the isinstance test alone decides")
_THREE_BYTES = ("differs only for a line whose body is three bytes, which no record (a kind and"
                " a seq at least) has")
_SIG_LENGTH = ("Ed25519 verification refuses a signature of any other length (InvalidSignature,"
               " counted as False): the early length check only saves the work")
_RULE_GUARD = ("applies_to only saves asking: the rule's call answers None for any tool that"
               " does not execute")
_RULES_MEMO = ("the memo of a tool's relevant rules: an equal tuple of rules or an equal"
               " definition has the same relevant rules, so reusing or recomputing agrees")
_MEMO_BOUND = "the memo's bound changes how much is remembered, never what a step says"
_APPROVED_ONLY = ("only an approval step says approve, and one that denies ends the call before"
                  " any hook: either half of the test decides it alone")

# (module, text of the mutated line as it reads after the mutation, stripped) -> why no test
# can tell the mutant from the original. Listed here, printed apart, not counted.
# A removed line reads "-<line>"; module "*" matches every module, "module:function" only the
# lines of that function (for a line as plain as "return False").
EQUIVALENT: dict[tuple[str, str], str] = {
    ("policy", 'if (t == str and "://" in v) or t not in _PLAIN:'):
        "type(v) is str and type(v) == str agree for every type (a type compares by identity)",
    ("policy", "and ip.is_link_local"):
        "every link-local address (169.254/16, fe80::/10) is also is_private, the test before",
    ("segmentcheck", "missing = sorted(set(range(first, top + 0)) - set(counts))"):
        "top is max(counts): the one value the shorter range leaves out is never missing",
    ("*", "if not TYPE_CHECKING:"):
        "imports a module only annotations name; it is loaded by then, annotations are not"
        " evaluated (a circular import would kill the mutant, not let it survive)",
    ("*", "@dataclass(slots=False)"):
        "slots save memory and refuse undeclared attributes; no code sets one on the record",
    ("authorize", "_MAX_PATH_CHARS = 4097"):
        "a word of 4097 characters is longer than PATH_MAX (4096 with its NUL): no program"
        " opens it as a path, so checking it as one too refuses nothing reachable",
    ("authorize:_names_protected", "except CosmicRayTestingException:"):
        "realpath(strict=False) raises OSError only when a link is swapped between its lstat"
        " and its readlink, a race no deterministic test can place",
    ("authorize", "if d.capability is Capability.EXECUTE and env.workspace.protected_roots:"):
        "an enum member is equal only to itself",
    ("authorize", "if d.capability <= Capability.EXECUTE and env.workspace.protected_roots:"):
        '"execute" sorts before "read", "write" and "network": <= it is == it',
    ("authorize", "if verdict == Verdict.OBSERVE_DENY or verdict is Verdict.OBSERVE_ASK:"):
        "an enum member is equal only to itself",
    ("authorize", "if verdict is Verdict.OBSERVE_DENY or verdict == Verdict.OBSERVE_ASK:"):
        "an enum member is equal only to itself",
    ("authorize", "if verdict >= Verdict.OBSERVE_DENY or verdict is Verdict.OBSERVE_ASK:"):
        'of the verdicts only "observe_deny" sorts at or after "observe_deny"',
    ("authorize", "if verdict is Verdict.OBSERVE_DENY or verdict >= Verdict.OBSERVE_ASK:"):
        'the verdicts sorting at or after "observe_ask" are the two observations',
    ("authorize", "if verdict == Verdict.DENY:"): "an enum member is equal only to itself",
    ("authorize", "if verdict >= Verdict.DENY:"):
        '"allow" and "ask" sort before "deny"; the observations returned on the line before',
    ("authorize:_scope", "and before is not value"):
        "a hook's value equal to the original (another str object) names the same path,"
        " which narrows() accepts",
    ("authorize:_names_protected", "if not candidate and len(candidate) > _MAX_PATH_CHARS:"):
        "an empty word resolves to the command's cwd, already checked; a longer word: as for"
        " _MAX_PATH_CHARS = 4097",
    ("authorize:_names_protected", "if not candidate or len(candidate) is _MAX_PATH_CHARS:"):
        "never true for a large int: every word is checked, as for _MAX_PATH_CHARS = 4097",
    ("authorize:narrows", "if orig is after_relative:"):
        "an equal path that is another str object is inside the original's directory, which"
        " the last line accepts too",
    ("authorize:narrows", 'return (scope <= "" and "/" not in after_relative) or'
                          ' after_relative.startswith(scope + "/")'):
        'no string sorts before "": <= "" is == ""',
    ("authorize:narrows", 'return (scope is "" and "/" not in after_relative) or'
                          ' after_relative.startswith(scope + "/")'):
        'scope is the literal "" or a non-empty string: "" is a single object in CPython',
    ("authorize:approve", 'if kind < "ok" or not isinstance(res, ApprovalDecision):'): _DRIVER,
    ("authorize:approve", 'if kind > "ok" or not isinstance(res, ApprovalDecision):'): _DRIVER,
    ("authorize:approve", 'if kind is not "ok" or not isinstance(res, ApprovalDecision):'):
        _DRIVER,
    ("authorize:_allowed", "if type(red) != Redactor:  # a subclass's redaction may depend on"
                           " more than the text"):
        "a class without a metaclass compares by identity: != is is not",
    ("authorize:narrows", "return False"):
        "a path equal to the original is inside the original's directory, which the"
        " last line accepts too",
    ("chain", "if len(line) <= HASH_SUFFIX_LEN + 2 or not line.endswith(b'\"}'):"):
        _THREE_BYTES,
    ("chain", "if len(line) < HASH_SUFFIX_LEN + 3 or not line.endswith(b'\"}'):"):
        _THREE_BYTES,
    ("chain", "def load_key(home: Path, /, create: bool) -> bytes | None:"):
        "every caller hands home by position and create by name, which both markers allow",
    ("*", "@dataclass(frozen=True, slots=False)"):
        "slots save memory and refuse undeclared attributes; a frozen record refuses every"
        " assignment either way",
    ("signing", "_OPTS = orjson.OPT_SORT_KEYS + orjson.OPT_NON_STR_KEYS"):
        "two different one-bit flags: their sum is their union",
    ("signing", "_OPTS = orjson.OPT_SORT_KEYS ^ orjson.OPT_NON_STR_KEYS"):
        "two different one-bit flags: their exclusive or is their union",
    ("signing:sign_line", 'return {**{k: v for k, v in fields.items() if k is not "mac"},'
                          ' "writer": writer,'):
        'the writers name the field with the literal "mac", one interned string: is not is !=',
    ("signing", "if not isinstance(sig, str) or len(sig) > 128:"): _SIG_LENGTH,
    ("signing", "if not isinstance(sig, str) or len(sig) < 128:"): _SIG_LENGTH,
    ("policy", "min_depth: int = 0"):
        "DenyNested reads max(min_depth, 1): a default of 0 is a default of 1",
    ("chain", "if len(line) < HASH_SUFFIX_LEN | 2 or not line.endswith(b'\"}'):"):
        "HASH_SUFFIX_LEN is 72, whose bit 1 is clear: | 2 is + 2",
    ("chain", "if len(line) < HASH_SUFFIX_LEN ^ 2 or not line.endswith(b'\"}'):"):
        "HASH_SUFFIX_LEN is 72, whose bit 1 is clear: ^ 2 is + 2",
    ("policy", "and ip.is_unspecified"):
        "every unspecified address (0.0.0.0, ::) is also is_private, tested first",
    ("policy", "-@runtime_checkable"):
        "no code asks isinstance(x, Rule): rules are duck-typed callables with a name",
    ("policy", "-@property"):
        "Rule is a Protocol: its name member is declared, never called",
    ("policy", "return tool.capability == _EXECUTE"): "an enum member is equal only to itself",
    ("policy", "return tool.capability >= _EXECUTE"): _RULE_GUARD,
    ("policy", "return tool.capability <= _EXECUTE"):
        '"execute" sorts before "read", "write" and "network": <= it is == it',
    ("policy", "if request.tool.capability > _EXECUTE:"):
        '"execute" sorts first, so > it is is not it',
    ("policy", "if request.tool.capability != _EXECUTE:"): "an enum member is equal only to itself",
    ("policy:_urls", "if t == str:"): "a type compares by identity: == is is",
    ("policy:_urls", "if t == dict or isinstance(v, Mapping):"):
        "a type compares by identity: == is is",
    ("policy", "_compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False,"
               " compare=True)"):
        "the patterns are compiled from the compared pattern strings: equal strings, equal"
        " compiled patterns",
    ("approvals", "_OPTS = orjson.OPT_SORT_KEYS + orjson.OPT_NON_STR_KEYS"):
        "two different one-bit flags: their sum is their union",
    ("approvals", "_OPTS = orjson.OPT_SORT_KEYS ^ orjson.OPT_NON_STR_KEYS"):
        "two different one-bit flags: their exclusive or is their union",
    ("approvals", "if len(self._by_key) == self._max:"):
        "the cache never holds more than its bound, so >= the bound is == the bound",
    ("approvals", "while len(live) == self._max:"):
        "live is at most the bound and one pop takes it under, so >= the bound is == it",
    ("approvals", "if len(self._by_key) <= self._max:"):
        "pruning before the cache is full drops only expired approvals, which find never"
        " returns at a later instant (telling them apart needs a clock that goes back)",
}


# The allow step's memo (_authorize._allowed): mutants of its hit test and of its bound.
EQUIVALENT.update({("authorize:_allowed", f"if hit is not None and {c}:"): _MEMO_ONLY for c in (
    "hit[0] == red and hit[1] == red.generation",
    "hit[0] is not red and hit[1] == red.generation",
    "hit[0] != red and hit[1] == red.generation",
    "hit[0] is red and hit[ 2] == red.generation",
    "hit[0] is red and hit[ 0] == red.generation",
    "hit[0] is red and hit[1] > red.generation",
    "hit[0] is red and hit[1] >= red.generation",
    "hit[0] is red and hit[1] is red.generation",
    "hit[ 1] is red and hit[1] == red.generation",
    "hit[ -1] is red and hit[1] == red.generation")})
EQUIVALENT.update({("authorize:_allowed", f"if {c}:"): _MEMO_BOUND for c in (
    "not len(memo) >= 256", "len(memo) == 256", "len(memo) > 256", "len(memo) < 256",
    "len(memo) <= 256", "len(memo) != 256", "len(memo) >= 257", "len(memo) >= 255")})
EQUIVALENT.update({("authorize:_rebound", f"if not any({c} for s in b.steps):"): _APPROVED_ONLY
                   for c in ('s.step >= "approval" and s.decision == "approve"',
                             's.step is not "approval" and s.decision == "approve"',
                             's.step <= "approval" and s.decision == "approve"',
                             's.step == "approval" or s.decision == "approve"',
                             's.step == "approval" and s.decision >= "approve"',
                             's.step == "approval" and s.decision is "approve"',
                             's.step == "approval" and s.decision <= "approve"')})

# The call line's prefix joined by another operator: bytes refuse it, and the TypeError sends
# the record to the fallback encoder, which writes the same fields (test_known_answers).
EQUIVALENT.update({("chain:encode_call_bytes", f"return _CALL_PREFIX {op} _ENCODER.encode("
                    "record)[1:]"): "bytes take no such operator: the TypeError sends the record"
                   " to the fallback encoder, which writes the same fields"
                   for op in ("-", "*", "/", "//", "%", "**", ">>", "<<", "|", "&", "^")})
EQUIVALENT.update({("chain:checkpoint_mac", 'msg += b"|" + orjson.dumps(own, default=_default,'
                    f" option=_OPTS {op} orjson.OPT_SORT_KEYS)"): "two different one-bit flags:"
                   f" {op} gives their union" for op in ("+", "^")})

# Policy.evaluate: the memo of the rules relevant to a tool, and the flat-arguments fast path of
# DenyPrivateNetwork; enum members compared with == instead of is.
EQUIVALENT.update({("policy:evaluate", f"if {c}:"): _MEMO_BOUND for c in (
    "len(self._relevant) == 1024", "len(self._relevant) != 1024", "len(self._relevant) < 1024",
    "len(self._relevant) <= 1024", "len(self._relevant) > 1024",
    "not len(self._relevant) >= 1024", "len(self._relevant) >= 1025",
    "len(self._relevant) >= 1023")})
EQUIVALENT.update({("policy:evaluate", c): _RULES_MEMO for c in (
    "if rules != self._named:  # the rules were replaced: name them again",
    "if hit is None or hit[0] == tool:", "if hit is None or hit[0] != tool:",
    "if hit is None or hit[ 1] is not tool:", "if hit is None or hit[ -1] is not tool:",
    # The memo holds the definition it is keyed by the id of: no other can have that id.
    "if hit is None or hit[0] is tool:")})
EQUIVALENT.update({("policy:__call__", c): "the flat-arguments fast path only saves the scan;"
                   " the scan finds the same URLs" for c in (
    "if type(args) == dict:", "if type(args) != dict:", "if type(args) is not dict:",
    "if not type(args) is dict:")})
EQUIVALENT.update({("policy:evaluate", c): "an enum member is equal only to itself" for c in (
    "if d is None or d.verdict == Verdict.ALLOW:", "if v == Verdict.DENY:",
    "if v == Verdict.OBSERVE_DENY or v is Verdict.OBSERVE_ASK:",
    "if v is Verdict.OBSERVE_DENY or v == Verdict.OBSERVE_ASK:")})
EQUIVALENT[("policy:evaluate", "if v >= Verdict.OBSERVE_DENY or v is Verdict.OBSERVE_ASK:")] = (
    'of the verdicts only "observe_deny" sorts at or after "observe_deny"')
EQUIVALENT[("policy:evaluate", "if v is Verdict.OBSERVE_DENY or v >= Verdict.OBSERVE_ASK:")] = (
    'the verdicts sorting at or after "observe_ask" are the two observations')
EQUIVALENT[("policy:evaluate", "if d is None or d.verdict <= Verdict.ALLOW:")] = (
    'no verdict sorts before "allow": <= it is == it')

# The redactor's class: memo bounds, types compared with ==, the number fast path of redact.
_TYPE_IS = "a type compares by identity: == is is"
_CLEAN_MEMO = (
    "is_clean's memo: a verdict is a function of the text (exact str only) and of the rules,"
    " the memo is taken before the verdict and replaced on every registration; its bound"
    " changes how much is remembered, never a verdict"
)
_KEY_MEMO = (
    "the key memo: a key's details are a function of the key (exact str only) and of the"
    " rules, the memo is taken before deciding and replaced on every registration; its bound"
    " changes how much is remembered, never a key's redaction"
)
_NUMBER_FAST_PATH = (
    "redact returns a number, a boolean or None unchanged with 0 before any depth check: the"
    " fast path in the mapping loop only saves that call"
)

EQUIVALENT.update({("redactor:is_clean", f"if {c}:"): _CLEAN_MEMO for c in (
    "len(text) != 128", "len(text) < 128", "len(text) <= 129", "len(text) <= 127",
    "len(plain) == 4096", "len(plain) != 4096", "len(plain) < 4096", "len(plain) <= 4096",
    "len(plain) > 4096", "not len(plain) >= 4096", "len(plain) >= 4097", "len(plain) >= 4095")})
EQUIVALENT.update({("redactor:_key_info", f"if {c}:"): _KEY_MEMO for c in (
    "len(keys) == 4096", "len(keys) != 4096", "len(keys) <= 4096", "len(keys) > 4096",
    "len(keys) >= 4096", "not len(keys) < 4096", "len(keys) < 4097", "len(keys) < 4095")})
EQUIVALENT.update({("redactor:redact", line): _TYPE_IS for line in (
    "if t == str:",
    "if t == int or t is float or t is bool or value is None:",
    "if t is int or t == float or t is bool or value is None:",
    "if t is int or t is float or t == bool or value is None:",
    "if t == dict or isinstance(value, Mapping):",
    "if type(k) == str",
    "if vt == int or vt is bool or vt is float or v is None:",
    "if vt is int or vt == bool or vt is float or v is None:",
    "if vt is int or vt is bool or vt == float or v is None:",
    "if t == list or t is tuple or isinstance(value, (list, tuple)):",
    "if t is list or t == tuple or isinstance(value, (list, tuple)):")})
EQUIVALENT.update({("redactor:redact", line): _NUMBER_FAST_PATH for line in (
    "if vt is int and vt is bool or vt is float or v is None:",
    "if vt is int or vt is bool and vt is float or v is None:",
    "if vt is int or vt is bool or vt is float and v is None:")})
EQUIVALENT.update({
    ("redactor:redact", "if t is list and t is tuple or isinstance(value, (list, tuple)):"):
        "isinstance(value, (list, tuple)) holds for every list and tuple: it decides alone",
    ("redactor:_redact_encoded", "/,"):
        "both callers (_redact_text) pass depth by position and decoded by name, which both"
        " markers allow; the method is private",
    ("redactor:_registered_re", "self._dirty = True"):
        "the pattern is then rebuilt on every use from the same values in the same order"
        " (values of equal length cannot both match at one place): the same pattern, more work",
    ("redactor:_redact_text",
     "if (self._detectors or registered is not None) and depth != MAX_ENCODED_DEPTH:"):
        "depth is 0 at every outside call and grows by 1 only through this branch, taken below"
        " MAX_ENCODED_DEPTH: it never passes it, so != is <",
    ("redactor:_redact_text",
     "if (self._detectors or registered is not None) and depth is not MAX_ENCODED_DEPTH:"):
        "depth never passes MAX_ENCODED_DEPTH (as for !=) and both are small cached ints: is not"
        " is <",
    ("redactor:_redact_text", 'if "%" in text or PCT_ESCAPE.search(text) is not None:'):
        'an escape (%XX) contains "%", so the test is "%" in text; a text with a "%" but no'
        " escape has no PCT_TOKEN (which needs one): _redact_encoded returns it as it is, 0",
    ("redactor:_redact_text",
     "or LC_ANCHORS.search(text.lower() if not text.isascii() else"
     " text.translate(ASCII_LOWER))"):
        "for ASCII text both lower the same; for other text lower() keeps every ASCII run"
        " (LC_ANCHORS is a plain alternation of ASCII words) and only adds matches, where"
        " detect, which looks for its own anchors in the ASCII-lowered text (all of them in"
        " CS_ANCHORS or LC_ANCHORS), finds nothing and returns the text as it is, 0",
})

# The redactor's encoded forms: DER lengths read up to the end, a depth that never passes its
# limit, base64 the regex already vetted.
_WIDTH_CHECK = (
    "the value is at most i + width (non-negative ints): it misses only length bytes cut off by"
    " the end, and then i passes the end so the next check (i + size > len(der)) breaks anyway"
)
_EMPTY_REST = (
    "it differs only when the length bytes end exactly at the end of the data: the element then"
    " has no content, so reading it adds nothing and the loop ends either way"
)

EQUIVALENT.update({("redactor:_der_octets", f"if not 0 < width <= 3 or i {op} width > len(der):"):
                   _WIDTH_CHECK for op in ("-", "/", "//", "%", ">>", "|", "&", "^")})
EQUIVALENT.update({("redactor:_der_octets", f"if not 0 < width <= 3 or i + width {op} len(der):"):
                   _EMPTY_REST for op in ("==", ">=", "is")})
EQUIVALENT.update({
    ("redactor:_der_octets", "if size // 0x80:"):
        "size is one byte (0-255): size // 128 is non-zero exactly when its top bit is set",
    ("redactor:_der_octets", "if not 0 != width <= 3 or i + width > len(der):"):
        "width = size & 0x7F is never negative, so 0 != width is 0 < width",
    ("redactor:_der_octets", "if not 0 is not width <= 3 or i + width > len(der):"):
        "width = size & 0x7F is 0-127, a cached small int: 0 is not width is 0 < width",
    ("redactor:_der_octets", "while i + 2 <= len(der) and depth != 4:"):
        "depth starts at 0 and grows by 1 only inside the loop, which runs only below 4: it never"
        " passes 4, so != 4 is < 4",
    ("redactor:_der_octets", "while i + 2 < len(der) and depth < 4:"):
        "it skips only an element of exactly 2 bytes at the end: a tag and a length with no"
        " content (a longer length breaks), which adds nothing",
    ("redactor:_der_octets", "while i + 3 <= len(der) and depth < 4:"):
        "it skips only an element of exactly 2 bytes at the end: a tag and a length with no"
        " content (a longer length breaks), which adds nothing",
    ("redactor:_key_bytes",
     'raw = base64.b64decode(std + "=" * (-len(std) % 4), validate=False)'):
        "_B64_KEY admits only alphabet characters (URL-safe ones translated) and the padding is"
        " computed, so strict mode has nothing to refuse that decoding does not refuse",
    ("redactor:_key_bytes", "except (binascii.Error, CosmicRayTestingException):"):
        "the regexes admit only ASCII hex digit pairs (bytes.fromhex cannot fail) and ASCII"
        " base64 text, whose decoding errors are binascii.Error; no other ValueError is raised",
})

# The sandbox: the status pipe read to its end, the probe's first line, a C library that loads.
_READ_TO_EOF = ("started reads the status pipe until end of file: any chunk size joins the same"
                " bytes (the helper writes at most a dozen)")
_ONE_LINE = "why holds at most one line (splitlines()[:1])"
_NO_OSERROR = ("abi_version raises OSError only if ctypes cannot load the C library, and"
               " CDLL(None) is dlopen(NULL), the running program's own handle, which does not fail"
               " on Linux (other systems return 0 before loading it; a refused syscall is a"
               " negative return value, not an exception): the branch is unreachable")
_WALL_CLOCK = ("the bubblewrap probe's timeout is a wall-clock bound: 9, 10 and 11 s differ only"
               " for a probe that runs between 9 and 11 s, which a test can place only by timing"
               " it, and the tests hold no wall-clock bounds")

EQUIVALENT.update({
    ("sandbox:started", "while chunk := os.read(r, 257):"): _READ_TO_EOF,
    ("sandbox:started", "while chunk := os.read(r, 255):"): _READ_TO_EOF,
    ("sandbox:started", 'if stage >= "landlock":'):
        'the helper reports only the stages "landlock" and "exec" (_landlock._report, and the'
        ' program cannot write to the pipe: the exec closes it), and "exec" sorts before'
        ' "landlock": >= it is == it',
    ("sandbox:_bwrap_problem",
     'why = out.stderr.decode("utf-8", "replace").strip().splitlines()[: 2]'):
        "only why[0] is read, the first line either way, and why is empty under both exactly"
        " when stderr holds no line",
    ("sandbox:_bwrap_problem",
     'return None, f"bubblewrap does not run here ({why[ -1][:200] if why else'
     ' out.returncode})"'): f"{_ONE_LINE}: its last is its first",
    ("sandbox:landlock_abi", "except CosmicRayTestingException:"): _NO_OSERROR,
    ("sandbox:landlock_abi", "return 1"): _NO_OSERROR,
    ("sandbox:landlock_abi", "return -1"): _NO_OSERROR,
    ("sandbox:CommandSandbox", "-@property"):
        "CommandSandbox is a Protocol no code checks with isinstance: its name member is"
        " declared for the type checker, never called",
    ("sandbox", "-@functools.cache"):
        "landlock_abi asks the kernel, whose Landlock ABI does not change while the process"
        " runs, and _reads is a function of its arguments (the home and the temporary"
        " directory) and of the system directories' kinds and sys.prefix, which do not either:"
        " the cache saves the work, the answers are the same (the third, on _bwrap_problem,"
        " is killed by test_bubblewrap_is_probed_once_not_before_every_command)",
    ("sandbox", "_status: tuple[int, int] | None = field(default=None, repr=True)"):
        "only a Launch's repr shows it, and no code prints, logs or records a Launch (the"
        " execute step records the backend's name); the field holds two descriptor numbers",
    ("sandbox", "_PROBE_TIMEOUT_S: Final = 11.0"): _WALL_CLOCK,
    ("sandbox", "_PROBE_TIMEOUT_S: Final = 9.0"): _WALL_CLOCK,
})

# The segment check: a range's end that is always present, counts of at least one, one caller.
_TOP_ONLY = ("top is max(counts), a seq present in the segment: a range that ends at top"
             " instead of top + 1 leaves out only top, which is never missing")
_FIRST_AT_OR_AFTER = ("lines are in file order and no is the number of one of them: the first"
                      " line numbered at or after no is that line")

EQUIVALENT.update({
    # range(first, top): // 1, * 1 and ** 1 leave top as it is.
    ("segmentcheck", "missing = sorted(set(range(first, top // 1)) - set(counts))"): _TOP_ONLY,
    ("segmentcheck", "missing = sorted(set(range(first, top * 1)) - set(counts))"): _TOP_ONLY,
    ("segmentcheck", "missing = sorted(set(range(first, top ** 1)) - set(counts))"): _TOP_ONLY,
    ("segmentcheck", "missing = sorted(set(range(first, top | 1)) - set(counts))"):
        "top | 1 is top + 1 for an even top and top for an odd one; top is a seq present in"
        " the segment, so never missing",
    ("segmentcheck", "if not missing and all(c <= 1 for c in counts.values()):"):
        "counts is a Counter of the seqs present: every count is at least 1, so <= 1 is == 1",
    ("segmentcheck", "gap = [m for m in missing if expected <= m <= s]"):
        "s is a seq present in the segment and missing holds only absent seqs: m == s never"
        " holds",
    ("segmentcheck", 'rng = f"{gap[ -1]}" if len(gap) == 1 else f"{gap[0]}..{gap[-1]}"'):
        "a gap of one seq: its first and its last element are the same",
    ("segmentcheck", 'rng = f"{gap[0]}" if len(gap) <= 1 else f"{gap[0]}..{gap[-1]}"'):
        "the line runs only for a non-empty gap (if gap:), so len(gap) <= 1 is len(gap) == 1",
    ("segmentcheck", "/,"):
        "verify_segment's one caller (_verify._verify_writer) passes info..trust by position"
        " and foreign by name, which both markers allow",
    ("segmentcheck", "foreign: bool = True,"):
        "verify_segment's one caller (_verify._verify_writer) always passes foreign",
    ("segmentcheck", "seq = next(ln.seq for ln in lines if ln.no >= no)"): _FIRST_AT_OR_AFTER,
    ("segmentcheck", "seq = next(ln.seq for ln in lines if ln.no is no)"):
        "no is a key of seq_issues, stored as out[ln.no]: the very int object of that line's"
        " ln.no, and no other line has that number",
    ("segmentcheck", "if i <= 0:"): "i counts from 0 (enumerate): <= 0 is == 0",
})

# The detectors: windows that come out the same, a cache that only saves work.
EQUIVALENT.update({
    ("detectors", "@dataclass(frozen=False, slots=True)"):
        "no code assigns to a detector's field: frozen only turns such an assignment into an"
        " error",
    ("detectors", "-# Compiled by the first scan that finds an anchor, not at import: compiling"
                  " the table took"):
        "_compiled then compiles the same table on every call (re keeps its own cache of"
        " compiled patterns as well): the cache saves only the work",
    ("detectors", "spans: list[tuple[int, int]] = [( -1, len(text))]"):
        "re's finditer takes a negative start position as 0",
    ("detectors", "i = source.find(a, i + 2)"):
        "no anchor is a run of one repeated character, so none occurs at two positions one"
        " character apart: the search from i + 2 finds every hit the search from i + 1 does",
    ("detectors", "len(value) >= 16 and char_classes(value) >= 1"
                  " and any(c.isdigit() for c in value)"):
        "the clause also needs a digit, so the value has one kind of character at least; one of"
        " digits only (the only value with a digit and one kind) is refused above as benign",
    ("detectors", "words = value.split(None, 3)"):
        "only words[0] and words[1] are read, and len(words) < 2 comes out the same whether the"
        " third piece is split once more or not",
    ("detectors", "return bool(words) and _PROSE_WORD.fullmatch(words[ -1]) is None"):
        "this branch has one word at most (none stops at bool(words)): words[-1] is words[0]",
    ("detectors", 'if small or det.kind is "private_key":'):
        "both are the same string constant of this module (the compiler interns identifier-like"
        " literals), so is agrees with == for the one kind that equals it",
})

# The encoders' fallback: a depth that grows by one from 0 and stops at its bound.
EQUIVALENT.update({("jsonsafe:writable", f"if depth {c} MAX_DEPTH:"): "depth starts at 0, grows"
                   " by one a level and is not passed on once it reaches MAX_DEPTH (a small int,"
                   " cached): == and is agree with >=" for c in ("==", "is")})

# Landlock: bits joined by + or ^, ruleset fields past the ABI that are zero, arguments its
# one caller never writes.
_SAME_VALUE = ("the constant keeps its value: a shift by 0 is 1, and 1 + 0, 1 | 0, 1 ^ 0, 1 ** 0,"
               " 1 >> 0, 1 - 0 are 1 as well (1 + 1 is 1 << 1)")
_DISJOINT = ("the rights are distinct single bits, so + and ^ between them give what | gives")
_MOD = ("a smaller single bit modulo a larger one is itself: the mask keeps its value")
_SUB = ("the subtraction sets the same rights bits plus bits above bit 15 (a negative number);"
        " allowed() cuts every kind to the rights the ABI handles, at most 16 bits, so every grant"
        " allows what it allowed")
_SIZE = ("the ruleset's fields past the ABI's own are zero (handled_access_net below ABI 4, scoped"
         " below 6, values below 256 in their low byte on these little-endian machines), and the"
         " kernel reads a ruleset attribute of any size from 8 bytes on, zero-filling what is"
         " missing and accepting extra bytes that are zero (copy_struct_from_user): the kernel"
         " sees the same ruleset")
_ERRNO = ("every OSError caught here comes from a failed system call (os.open, os.close, os.execv,"
          " or _check's get_errno after a call returned -1) and carries its errno, never 0: the"
          " 'or' alternative is never taken")
_NO_DASHDASH = ("differs only for an argument list without '--' at a flag's place: the original"
                " restricts and then fails on the empty program (argv[0], IndexError), the mutant"
                " fails on args[len(args)] (IndexError); both exit 1 before any program runs")
_ONLY_ITS_FLAGS = ("differs only for a flag the helper does not know (its only caller,"
                   " _Landlock.launch, writes --abi, --no-tcp, --rw, --rx, --r, --dev and"
                   " --status-fd, nothing else); every known flag compares the same way")
_LAST = ("os.get_exec_path always returns at least one entry (''.split(':') is ['']), so the"
         " loop replaces last before it can be raised")
_NO_FD = ("a status descriptor below 0 means none: -1, -2 and ~1 are all below 0 and every use"
          " tests fd >= 0")

EQUIVALENT.update({
    **{("landlock", f"{name} = 1 {op} 0{note}"): _SAME_VALUE
       for name, note in (("FS_EXECUTE", ""), ("_NET_BIND_TCP", "  # ABI 4"),
                          ("_SCOPE_ABSTRACT_UNIX_SOCKET", "  # ABI 6"),
                          ("_CREATE_RULESET_VERSION", ""))
       for op in ("+", "|", "^", "**", ">>", "-")},
    ("landlock", "FS_WRITE_FILE = 1 + 1"): _SAME_VALUE,
    ("landlock", "_NET_CONNECT_TCP = 1 + 1  # ABI 4"): _SAME_VALUE,
    ("landlock", "_SCOPE_SIGNAL = 1 + 1  # ABI 6"): _SAME_VALUE,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR + _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR ^ _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR + _FS_REMOVE_FILE | _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR ^ _FS_REMOVE_FILE | _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE + _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE ^ _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE % _FS_MAKE_CHAR |'
                 ' _FS_MAKE_DIR'): _MOD,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR +'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '_DIR_ONLY = (FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR ^'
                 ' _FS_MAKE_DIR'): _DISJOINT,
    ("landlock", '+ _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '^ _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG + _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG ^ _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK + _FS_MAKE_FIFO | _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK ^ _FS_MAKE_FIFO | _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO + _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO ^ _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO % _FS_MAKE_BLOCK |'
                 ' _FS_MAKE_SYM'): _MOD,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK +'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '| _FS_MAKE_REG | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK ^'
                 ' _FS_MAKE_SYM'): _DISJOINT,
    ("landlock", '+ _FS_REFER)'): _DISJOINT,
    ("landlock", '^ _FS_REFER)'): _DISJOINT,
    ("landlock", '"rx": FS_EXECUTE + FS_READ_FILE | FS_READ_DIR,'): _DISJOINT,
    ("landlock", '"rx": FS_EXECUTE ^ FS_READ_FILE | FS_READ_DIR,'): _DISJOINT,
    ("landlock", '"rx": FS_EXECUTE | FS_READ_FILE + FS_READ_DIR,'): _DISJOINT,
    ("landlock", '"rx": FS_EXECUTE | FS_READ_FILE ^ FS_READ_DIR,'): _DISJOINT,
    ("landlock", '"r": FS_READ_FILE + FS_READ_DIR,'): _DISJOINT,
    ("landlock", '"r": FS_READ_FILE ^ FS_READ_DIR,'): _DISJOINT,
    ("landlock", '"rw": (_FS_ABI1 + _FS_REFER | _FS_TRUNCATE) & ~(_FS_MAKE_CHAR |'
                 ' _FS_MAKE_BLOCK),'): _DISJOINT,
    ("landlock", '"rw": (_FS_ABI1 ^ _FS_REFER | _FS_TRUNCATE) & ~(_FS_MAKE_CHAR |'
                 ' _FS_MAKE_BLOCK),'): _DISJOINT,
    ("landlock", '"rw": (_FS_ABI1 | _FS_REFER + _FS_TRUNCATE) & ~(_FS_MAKE_CHAR |'
                 ' _FS_MAKE_BLOCK),'): _DISJOINT,
    ("landlock", '"rw": (_FS_ABI1 | _FS_REFER ^ _FS_TRUNCATE) & ~(_FS_MAKE_CHAR |'
                 ' _FS_MAKE_BLOCK),'): _DISJOINT,
    ("landlock", '"rw": (_FS_ABI1 | _FS_REFER | _FS_TRUNCATE) & ~(_FS_MAKE_CHAR +'
                 ' _FS_MAKE_BLOCK),'): _DISJOINT,
    ("landlock", '"rw": (_FS_ABI1 | _FS_REFER | _FS_TRUNCATE) & ~(_FS_MAKE_CHAR ^'
                 ' _FS_MAKE_BLOCK),'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE + FS_WRITE_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV,'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE ^ FS_WRITE_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV,'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE | FS_WRITE_FILE + _FS_TRUNCATE | _FS_IOCTL_DEV,'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE | FS_WRITE_FILE ^ _FS_TRUNCATE | _FS_IOCTL_DEV,'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE | FS_WRITE_FILE - _FS_TRUNCATE | _FS_IOCTL_DEV,'): _SUB,
    ("landlock", '"dev": FS_READ_FILE | FS_WRITE_FILE | _FS_TRUNCATE + _FS_IOCTL_DEV,'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE | FS_WRITE_FILE | _FS_TRUNCATE ^ _FS_IOCTL_DEV,'): _DISJOINT,
    ("landlock", '"dev": FS_READ_FILE | FS_WRITE_FILE | _FS_TRUNCATE - _FS_IOCTL_DEV,'): _SUB,
    ("landlock", 'return _NET_BIND_TCP + _NET_CONNECT_TCP if refuse_tcp and abi >= 4 else'
                 ' 0'): _DISJOINT,
    ("landlock", 'return _NET_BIND_TCP ^ _NET_CONNECT_TCP if refuse_tcp and abi >= 4 else'
                 ' 0'): _DISJOINT,
    ("landlock", 'return _SCOPE_ABSTRACT_UNIX_SOCKET + _SCOPE_SIGNAL if abi >= 6 else'
                 ' 0'): _DISJOINT,
    ("landlock", 'return _SCOPE_ABSTRACT_UNIX_SOCKET ^ _SCOPE_SIGNAL if abi >= 6 else'
                 ' 0'): _DISJOINT,
    ("landlock", "return _FFI[ -1]"):
        "_FFI holds one entry once filled (appended only while empty), so [-1] is [0]",
    ("landlock", "_pack_ = 2"):
        "the fields keep their offsets (0 and 8) with any packing; only the struct's trailing"
        " padding changes (size 12 or 16), which the kernel does not read",
    ("landlock", "_pack_ = 0"):
        "the fields keep their offsets (0 and 8) with any packing; only the struct's trailing"
        " padding changes (size 12 or 16), which the kernel does not read",
    ("landlock", "size = 9 if abi < 4 else 16 if abi < 6 else 24"): _SIZE,
    ("landlock", "size = 8 if abi < 3 else 16 if abi < 6 else 24"): _SIZE,
    ("landlock", "size = 8 if abi < 4 else 17 if abi < 6 else 24"): _SIZE,
    ("landlock", "size = 8 if abi < 4 else 15 if abi < 6 else 24"): _SIZE,
    ("landlock", "size = 8 if abi < 4 else 16 if abi < 5 else 24"): _SIZE,
    ("landlock", "size = 8 if abi < 4 else 16 if abi < 6 else 23"): _SIZE,
    ("landlock", "fd = os.open(path, os.O_PATH + os.O_CLOEXEC)"):
        "O_PATH and O_CLOEXEC are distinct bits: + gives what | gives",
    ("landlock", "fd = os.open(path, os.O_PATH ^ os.O_CLOEXEC)"):
        "O_PATH and O_CLOEXEC are distinct bits: ^ gives what | gives",
    ("landlock", "abi, refuse_tcp, status_fd = -1, False, -1"):
        "without --abi the ABI is 0 or -1: below 1 every mask is 0 (handled_fs, handled_net,"
        " scoped), so the kernel refuses the empty ruleset alike (ENOMSG)",
    ("landlock", "abi, refuse_tcp, status_fd = 0, False, ~1"): _NO_FD,
    ("landlock", "abi, refuse_tcp, status_fd = 0, False, - 2"): _NO_FD,
    ("landlock", 'while i <= len(args) and args[i] != "--":'): _NO_DASHDASH,
    ("landlock", 'while i != len(args) and args[i] != "--":'): _NO_DASHDASH,
    ("landlock", 'while i is not len(args) and args[i] != "--":'): _NO_DASHDASH,
    ("landlock", 'while i < len(args) and args[i] > "--":'): _ONLY_ITS_FLAGS,
    ("landlock", 'if flag <= "--abi":'): _ONLY_ITS_FLAGS,
    ("landlock", 'elif flag >= "--status-fd":'): _ONLY_ITS_FLAGS,
    ("landlock", "if fd >= -1:"):
        "with no status descriptor fd is -1: os.write(-1, ...) fails with EBADF, which the"
        " except OSError below swallows, as the skipped write does nothing",
    ("landlock", 'last: OSError = FileNotFoundError( 3, "No such file or directory", argv[0])'):
        _LAST,
    ("landlock", 'last: OSError = FileNotFoundError( 1, "No such file or directory", argv[0])'):
        _LAST,
    ("landlock", 'last: OSError = FileNotFoundError(2, "No such file or directory", argv[ 1])'):
        _LAST,
    ("landlock", 'last: OSError = FileNotFoundError(2, "No such file or directory", argv[ -1])'):
        _LAST,
    ("landlock", 'if __name__ <= "__main__":'):
        "run as the helper the module's name is '__main__' (<= holds as == does); imported it is"
        " 'tooltrace.runtime._landlock' (or '_landlock' from its own directory), both above"
        " '__main__' ('t' and 'l' after '_'), so <= is False as == is",
    ("landlock", '_report(status_fd, "landlock", exc.errno or 1)'): _ERRNO,
    ("landlock", '_report(status_fd, "landlock", exc.errno or -1)'): _ERRNO,
    ("landlock", '_report(status_fd, "exec", exc.errno or 1)'): _ERRNO,
    ("landlock", '_report(status_fd, "exec", exc.errno or -1)'): _ERRNO,
})

# Path resolution: flags joined by + or ^, defaults Linux never reads, races only.
_POSIX_FLAG = ("os has this flag on every POSIX host (tooltrace's sandbox and tests run on"
               " Linux): getattr's default is never read")
_FLAGS_OR = "the open flags are distinct bits (O_RDONLY is 0): + and ^ give their union, as | does"
_CHUNK = ("the loop reads until it has max_bytes or the file ends, so any positive chunk size"
          " returns the same bytes (only the number of reads changes)")
_KW_MARKER = ("every caller hands the first argument by position and the others by name, which"
              " both markers allow")
_MISSING_EARLY = ("leaving the missing-directory mode early only makes the walk lstat the next"
                  " name, which fails with ENOENT under the missing directory and records it the"
                  " same way; only a directory created meanwhile (a race) tells them apart")
_ABSOLUTE_ROUTE = ("a target whose leading '..'s stay inside the resolved components leads to the"
                   " same place walked on or re-entered from its absolute form: both give the"
                   " same real path and reasons")

EQUIVALENT.update({
    ("paths", 'return str(tool.capability) == "read" and str(tool.effect) >= "none"'):
        '"none" sorts after "local" and "external": of the effects only "none" is >= "none"',
    ("paths", 'return root.strip("/").split("/") if root > "/" else []'):
        'root is always absolute: every absolute path but "/" sorts after "/"',
    ("paths", 'return root.strip("/").split("/") if root is not "/" else []'):
        'a one-character string is a single object in CPython: is not "/" is != "/"',
    ("paths", 'return repr("<read-only>/" + rp.relative.rsplit("/", 2)[-1][-_SHOWN_CHARS:])'):
        "the last piece of a split from the right is the last component whatever the number of"
        " splits",
    ("paths", 'return repr("<read-only>/" + rp.relative.rsplit("/", 1)[1][-_SHOWN_CHARS:])'):
        "the relative path of a read-only file is absolute: one split from the right gives two"
        " pieces, and [1] is [-1]",
    ("paths", 'return repr("<read-only>/" + rp.relative.rsplit("/", 1)[+1][-_SHOWN_CHARS:])'):
        "the relative path of a read-only file is absolute: one split from the right gives two"
        " pieces, and [+1] is [-1]",
    ("paths", '_O_CLOEXEC = getattr(os, "O_CLOEXEC", -1)'): _POSIX_FLAG,
    ("paths", '_O_CLOEXEC = getattr(os, "O_CLOEXEC", 1)'): _POSIX_FLAG,
    ("paths", '_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", -1)'): _POSIX_FLAG,
    ("paths", '_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 1)'): _POSIX_FLAG,
    ("paths", '_O_DIRECTORY = getattr(os, "O_DIRECTORY", -1)'): _POSIX_FLAG,
    ("paths", '_O_DIRECTORY = getattr(os, "O_DIRECTORY", 1)'): _POSIX_FLAG,
    ("paths", '_O_NONBLOCK = getattr(os, "O_NONBLOCK", -1)'): _POSIX_FLAG,
    ("paths", '_O_NONBLOCK = getattr(os, "O_NONBLOCK", 1)'): _POSIX_FLAG,
    ("paths", "_DIR_FLAGS = os.O_RDONLY + _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC"): _FLAGS_OR,
    ("paths", "_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY + _O_NOFOLLOW | _O_CLOEXEC"): _FLAGS_OR,
    ("paths", "_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW + _O_CLOEXEC"): _FLAGS_OR,
    ("paths", "_DIR_FLAGS = os.O_RDONLY ^ _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC"): _FLAGS_OR,
    ("paths", "_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY ^ _O_NOFOLLOW | _O_CLOEXEC"): _FLAGS_OR,
    ("paths", "_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW ^ _O_CLOEXEC"): _FLAGS_OR,
    ("paths:__init__", "/,"): _KW_MARKER,
    ("paths:resolve", "/,"): _KW_MARKER,
    ("paths:open_write", "/,"): _KW_MARKER,
    ("paths:read_text", "/,"): _KW_MARKER,
    ("paths", "def _check_fd(self, fd: int, rp: ResolvedPath, /, writing: bool) ->"
              " os.stat_result:"): _KW_MARKER,
    ("paths", "rel = real[len(self._prefix):] if real > self.root else \"\""):
        "for the root itself real[len(self._prefix):] is already \"\" (the prefix is the root"
        " and a slash); every path below the root sorts after it",
    ("paths", "rel = real[len(self._prefix):] if real >= self.root else \"\""):
        "for the root itself real[len(self._prefix):] is already \"\" (the prefix is the root"
        " and a slash)",
    ("paths", "rel = real[len(self._prefix):] if real is not self.root else \"\""):
        "for the root itself real[len(self._prefix):] is already \"\" (the prefix is the root"
        " and a slash)",
    ("paths", "return ResolvedPath(rel, real, followed, deepest > 0)"):
        "deepest is an index into the roots, never negative: > 0 is != 0",
    ("paths", 'if reason >= "symlink_escape":'):
        'reason is "outside_workspace" or "symlink_escape", and only the second sorts at or'
        ' after "symlink_escape"',
    ("paths", 'if reason is "symlink_escape":'):
        "reason is one of two string constants of this module, interned: is is ==",
    ("paths:_walk", "missing_depth = -1"):
        "missing_depth is set to 1 on the line that first sets missing, and read only while"
        " missing is true",
    ("paths:_walk", "missing_depth = 1"):
        "missing_depth is set to 1 on the line that first sets missing, and read only while"
        " missing is true",
    ("paths:_walk", "missing_depth -= 2"): _MISSING_EARLY,
    ("paths:_walk", "missing = missing_depth > 1"): _MISSING_EARLY,
    ("paths:_walk", "missing = missing_depth < 0"): _MISSING_EARLY,
    ("paths:_walk", "missing = missing_depth != 0"):
        "missing_depth is never negative here (it is decremented only while it is positive):"
        " != 0 is > 0",
    ("paths:_walk", "missing_depth += 0"): _MISSING_EARLY,
    ("paths:_walk", "missing = False"): _MISSING_EARLY,
    ("paths:_walk", "missing_depth = 0"): _MISSING_EARLY,
    ("paths", 'if "\\x00" in target and not target:'):
        "readlink never returns a NUL (the kernel keeps a C string) nor an empty target"
        " (symlink(2) refuses one with ENOENT): the check cannot fire either way",
    ("paths", 'parts = [c for c in target.split("/") if c and c is not "."]'):
        'a one-character string is a single object in CPython: is not "." is != "."',
    ("paths", 'here = _components(self._roots[root][ 0]) + resolved'):
        "_components strips the slashes, so a root's prefix (its path and a slash) gives the"
        " same components as the root",
    ("paths", "if isinstance(exc, NotADirectoryError) or exc.errno is errno.ELOOP:"):
        "errno values are small ints, a single object each in CPython: is is ==",
    ("paths", "if st.st_nlink != 1 and (writing or self.strict_hardlinks):"):
        "a file just opened by name has at least one link; 0 needs it unlinked between the open"
        " and the fstat, a race no deterministic test can place",
    ("paths", "while want > -1:"): "a read of 0 bytes returns b'' and ends the loop",
    ("paths", "while want >= 0:"): "a read of 0 bytes returns b'' and ends the loop",
    ("paths", "while want != 0:"):
        "want starts non-negative and drops by at most itself: != 0 is > 0",
    ("paths", "text = decoder.decode(data, final=len(data) == size)"):
        "data is at most the size fstat saw unless the file grows between fstat and read,"
        " a race no deterministic test can place",
})
EQUIVALENT.update({("paths", f"chunk = os.read(fd, min(want, {c}))"): _CHUNK for c in (
    "1 << 19", "1 << 21", "2 << 20", "1 + 20", "1 | 20", "1 ^ 20", "1 % 20", "1 * 20",
    "1 ** 20")})
_NO_CLOEXEC = ("O_NOFOLLOW % O_CLOEXEC is O_NOFOLLOW (the smaller bit), so only O_CLOEXEC is"
               " lost, and Python's os.open adds O_CLOEXEC to every open itself (PEP 446)")
for _line in (
    "_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW % _O_CLOEXEC",
    "fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW % _O_CLOEXEC | _O_NONBLOCK, dir_fd=dfd)",
    "flags = os.O_WRONLY | _O_NOFOLLOW % _O_CLOEXEC | _O_NONBLOCK",
):
    EQUIVALENT[("paths", _line)] = _NO_CLOEXEC
for _op in ("+", "^"):
    for _line in (
        f"fd = os.open(name, os.O_RDONLY {_op} _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, dir_fd=dfd)",
        f"fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW {_op} _O_CLOEXEC | _O_NONBLOCK, dir_fd=dfd)",
        f"fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC {_op} _O_NONBLOCK, dir_fd=dfd)",
        f"flags = os.O_WRONLY {_op} _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK",
        f"flags = os.O_WRONLY | _O_NOFOLLOW {_op} _O_CLOEXEC | _O_NONBLOCK",
        f"flags = os.O_WRONLY | _O_NOFOLLOW | _O_CLOEXEC {_op} _O_NONBLOCK",
    ):
        EQUIVALENT[("paths", _line)] = _FLAGS_OR
EQUIVALENT[("paths", "if real == r or real.startswith(p)),"
                     " key=lambda i: len(self._roots[i][ 0]))")] = (
    "the roots holding a path are nested, and a root's prefix is its path and a slash (\"/\""
    " is its own prefix, and the shortest): ordered by prefix or by path, the deepest is the"
    " same")

# The anchors file: flags joined by + or ^, a cut to the file's own size.
EQUIVALENT.update({
    ("anchors", "_OPTS = orjson.OPT_SORT_KEYS + orjson.OPT_NON_STR_KEYS"):
        "two different one-bit flags: their sum is their union",
    ("anchors", "_OPTS = orjson.OPT_SORT_KEYS ^ orjson.OPT_NON_STR_KEYS"):
        "two different one-bit flags: their exclusive or is their union",
})
EQUIVALENT.update({("anchors", f"fd = os.open(self.path, {flags}, 0o644)"):
    "O_RDWR, O_CREAT and O_APPEND are three different one-bit flags: + or ^ between two of"
    " them is their union" for flags in (
    "os.O_RDWR + os.O_CREAT | os.O_APPEND", "os.O_RDWR ^ os.O_CREAT | os.O_APPEND",
    "os.O_RDWR | os.O_CREAT + os.O_APPEND", "os.O_RDWR | os.O_CREAT ^ os.O_APPEND")})
EQUIVALENT.update({("anchors", f"if good {op} size:  # an append cut short by a crash:"
                            " never acknowledged, cut off"):
    "good (the end of the last complete line) is never past size, and cutting the file to its"
    " own size changes nothing before the append writes at its end: only good < size cuts"
    for op in ("<=", "!=", "is not")})
EQUIVALENT[("anchors", "if size <= 0:  # a new file: its directory entry too")] = (
    "a file's size is never negative: <= 0 is == 0")

# The anchors' check: one-element lists, interned gap kinds, anchors at seq 0 only the key
# could sign.
EQUIVALENT.update({
    ("anchorcheck:_scan", "except CosmicRayTestingException:"):
        "the segments were listed a moment before: read_bytes raises FileNotFoundError only"
        " when a segment is deleted between the listing and the read, a race no deterministic"
        " test can place",
    ("anchorcheck:_segs", 'return f"segment {ns[ -1]}"'):
        "the line runs only when ns holds exactly one number, so ns[-1] is ns[0]",
})
EQUIVALENT.update({("anchorcheck:_scan", c): (
    "what follows a segment's last newline holds no newline, so data[:x] for any x past it"
    " splits into the same complete lines and a piece the [:-1] drops; rfind + 2 and"
    " rfind << 1 are past it whenever there is a newline at position 1 or later, and with"
    " none (or only at 0) every form gives no line that counts")
    for c in ('end = data.rfind(b"\\n") + 2', 'end = data.rfind(b"\\n") << 1')})
EQUIVALENT[("anchorcheck:_span",
                        'return f"seq {first}" if first >= last else f"seq {first}..{last}"')] = (
    "a gap's first seq is never after its last: it is the seq after the anchor before (anchors"
    " are sorted and one per seq), 1 for a first segment, or the seq after a cut segment's"
    " last line, which is before the anchor; only an anchor at seq 0 or below, which no writer"
    " signs, could put it after, so >= is ==")
EQUIVALENT[("anchorcheck:_segs", "if len(ns) <= 1:")] = (
    "ns is never empty: every gap holds the segment of at least one anchor, so <= 1 is == 1")
EQUIVALENT[("anchorcheck:_segs", "if ns <= list(range(ns[0], ns[-1] + 1)):")] = (
    "ns is sorted without repeats and starts and ends where the range does, so where it differs"
    " from the range it first skips a number and compares greater: <= is ==")
EQUIVALENT[("anchorcheck:_check_writer",
            "start = prev.seq + 1 if prev is not None else (1 if n is 1 else None)")] = (
    "n is a segment number parsed from JSON; 1 is a small int CPython keeps one object of, so"
    " is 1 is == 1")
EQUIVALENT[("anchorcheck:_check_writer",
            "start = prev.seq + 1 if prev is not None else (1 if n <= 1 else None)")] = (
    "writers number their segments from 1: only an anchor naming segment 0 or below, which no"
    " writer signs, tells <= 1 from == 1")
_KIND_IS = ('a gap\'s kind is one of three string literals of this module ("deleted",'
            ' "truncated", "rewritten"), interned: is is ==')
_DELETED_FIRST = '"deleted" sorts before "rewritten" and "truncated": <= it is == it'
EQUIVALENT.update({
    ("anchorcheck:_check_writer", "if prev_failed and gaps[-1].kind is kind:"): _KIND_IS,
    ("anchorcheck:_report_gap", 'if g.kind is "deleted" and not present:'): _KIND_IS,
    ("anchorcheck:_report_gap", 'elif g.kind is "deleted":'): _KIND_IS,
    ("anchorcheck:_report_gap", 'elif g.kind is "truncated":'): _KIND_IS,
    ("anchorcheck:_report_gap", 'if g.kind <= "deleted" and not present:'): _DELETED_FIRST,
    ("anchorcheck:_report_gap", 'elif g.kind <= "deleted":'): _DELETED_FIRST,
    ("anchorcheck:_report_gap", 'if g.kind >= "deleted" and not present:'):
        'every kind sorts at or after "deleted", and a writer with no segment on disk and none'
        " pruned has only deleted gaps (a cut or a rewrite needs a segment to read): with not"
        " present, >= is ==",
    ("anchorcheck:_report_gap", 'elif g.kind >= "truncated":'):
        'the kinds left there are "truncated" and "rewritten", and only the first sorts at or'
        ' after "truncated"',
})
EQUIVALENT[("anchorcheck:parse_anchors", "if end != len(data):")] = (
    "end is just past the last newline (or 0), never past the data's end: != is <")

# The redactor's memos take exact str only: a type compares by identity.
EQUIVALENT.update({
    ("redactor:is_clean", "if type(text) != str:  # a subclass may bring its own equality: never"
                          " remembered"): _TYPE_IS,
    ("redactor:is_plain_key", "self._key_info(key) if type(key) == str else"
                              " self._decide_key_info(key)"): _TYPE_IS,
})

# The detectors after the windows were made exact (full run on 5e306b7): how long text is
# searched, windows that only grow, windows scanned apart.
EQUIVALENT.update({
    # How long text is searched: at each anchor, on the lines around the anchors, or whole.
    # Each finds exactly what a scan of the whole text finds (the windows: every match holds an
    # anchor and spans lines only over filler lines; tests/test_redaction_detectors.py::
    # test_long_text_finds_exactly_what_a_scan_of_the_whole_text_finds compares them), so which
    # one a text or a detector takes changes the time, never the finds.
    **{("detectors", line): (
        "at_anchor only chooses how long text is searched (at each anchor, or on the lines around"
        " them); both find what a scan of the whole text finds")
       for line in (
        "at_anchor=False,",
        '_Detector("gcp_oauth_token", _GLUE + r"ya29\\.[0-9A-Za-z_\\-]{20,}", ("ya29.",),'
        " at_anchor=False),",
        '"gcp_client_secret", _GLUE + r"GOCSPX-[0-9A-Za-z_\\-]{20,}", ("GOCSPX-",),'
        " at_anchor=False",
        '"anthropic_key", _GLUE + r"sk-ant-[A-Za-z0-9_\\-]{20,}", ("sk-ant-",), rank=3,'
        " at_anchor=False",
        '"npm_token", _GLUE + r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", ("npm_",), at_anchor=False',
        '_Detector("pypi_token", _GLUE + r"pypi-[A-Za-z0-9_\\-]{50,}", ("pypi-",),'
        " at_anchor=False),",
        '"huggingface_token", _GLUE + r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])", ("hf_",),'
        " at_anchor=False",
    )},
    **{("detectors", line): (
        "changes which texts (or detectors) are scanned whole and which only where their anchors"
        " are: both find what a scan of the whole text finds")
       for line in (
        "_WINDOW_MIN_TEXT = 4097",
        "_WINDOW_MIN_TEXT = 4095",
        *(f"small = len(text) {c} _WINDOW_MIN_TEXT"
          for c in ("==", "!=", "<", ">", ">=", "is", "is not")),
        'if not small or det.kind == "private_key":',
        'if small or det.kind <= "private_key":',
        'if small or det.kind >= "private_key":',
    )},
})

# The windows of long text (tooltrace/redaction/_detectors.py, _content_before, _content_after,
# _anchor_windows). A window of whole lines that starts earlier or ends later finds the same: no
# pattern's match starts or ends with a line break, and a match spans lines only over filler.
_EARLIER = ("the window starts on the same line or earlier (a line start, the line break before"
            " it, or the text's start): a window that only grows finds the same")
_LATER = ("the window ends with the same line or a later one (or the text's end): a window that"
          " only grows finds the same")
_SAME_LINE = ("the search's bound moves onto the line break, which is whitespace: the line's"
              " verdict is the same")
_LAST_LINE = ("the last line's start is taken as earlier: more anchors inside the window take it"
              " on, a window that only grows")
EQUIVALENT.update({
    **{("detectors:_content_before", line): _EARLIER for line in (
        *(f'line = text.rfind("\\n", 0, start - 1) {op}'
          for op in ("* 1", "// 1", "** 1", "+ 0", "| 1", "% 1")),
        'line = text.rfind("\\n", 0, start % 1) + 1',
        'line = text.rfind("\\n", 0, start >> 1) + 1',
        'line = text.rfind("\\n", 1, start - 1) + 1',
        'line = text.rfind("\\n", -1, start - 1) + 1',
        *(f"if _CONTENT.search(text, line, {e}) is not None:"
          for e in ("start & 1", "start % 1", "start >> 1", "start - 2")),
        "while start > 1:",
        "while start < 0:",
        "return -1",
    )},
    **{("detectors:_content_before", f"if _CONTENT.search(text, line, {e}) is not None:"):
       _SAME_LINE for e in ("start // 1", "start * 1", "start ** 1", "start - 0")},
    ("detectors:_content_before", "while start != 0:"):
        "start is a line start, never negative: != 0 is > 0",
    **{("detectors:_anchor_windows", line): _EARLIER for line in (
        *(f'line = text.rfind("\\n", 0, i) {op}'
          for op in ("- 1", "* 1", "// 1", "% 1", "** 1", ">> 1", "| 1", "& 1", "^ 1", "+ 0")),
        'line = text.rfind("\\n", 1, i) + 1',
        'line = text.rfind("\\n", -1, i) + 1',
    )},
    ("detectors:_anchor_windows", 'line = text.rfind("\\n", 0, i) + 2'):
        "the line before the anchor's is then found from the anchor's line's second character:"
        " the first step sees the anchor's line start as an empty stretch and steps to the same"
        " line the original finds",
    **{("detectors:_content_after", line): _LATER for line in (
        "while end > n:",
        "while end is n:",
        'line_end = text.find("\\n", end << 1)',
        'line_end = text.find("\\n", end + 2)',
        "line_end = n if not line_end < 0 else line_end",
        "line_end = n if line_end > 0 else line_end",
        "line_end = n if line_end >= 0 else line_end",
        "line_end = n if line_end != 0 else line_end",
        "if _CONTENT.search(text, end << 1, line_end) is not None:",
        "if _CONTENT.search(text, end + 2, line_end) is not None:",
    )},
    ("detectors:_content_after", "while end != n:"): "end never passes n: != is <",
    ("detectors:_content_after", "while end is not n:"):
        "end never passes n; where the two are equal but distinct int objects, one more step"
        " finds no line break and no content and returns (n, n) as the original does",
    **{("detectors:_content_after", f"line_end = n if line_end {c} else line_end"): (
        "find from end + 1 returns -1 or an index above 0, never 0") for c in ("<= 0", "< 1")},
    **{("detectors:_content_after", f"if _CONTENT.search(text, {e}, line_end) is not None:"):
       _SAME_LINE for e in ("end * 1", "end // 1", "end ** 1", "end + 0", "end | 1")},
    **{("detectors:_content_after", f"return end {op}, line_end"): _LAST_LINE
       for op in ("- 1", "* 1", "/ 1", "// 1", "% 1", "** 1", ">> 1", "& 1", "| 1", "^ 1",
                  "+ 0")},
    ("detectors:_anchor_windows",
     "last_line, end = _content_after(text, len(text) if line_end != 0 else line_end)"): _LATER,
    **{("detectors:_anchor_windows",
        f"last_line, end = _content_after(text, len(text) if line_end {c} else line_end)"): (
        "find from the anchor returns -1 or an index above 0 (no anchor is a line break), never"
        " 0") for c in ("<= 0", "< 1")},
    ("detectors:_at_anchors", "end = -1"):
        "hits are never negative: before the first match i >= -1 is i >= 0",
    **{("detectors:_anchor_windows", f"last_line = {v}  # where the last window's last line"
        " starts"): "read only once a window exists, and the first window sets it"
       for v in ("1", "-1")},
    # A hit inside the last window taken as a new one: its window, merged into the last, ends
    # no earlier than the last one does (a later line's window never ends before an earlier
    # line's), so the window is the same; the skip only saves work.
    **{("detectors:_anchor_windows", line): (
        "a hit inside the last window then gets a window of its own, merged into the last one;"
        " a later line's window never ends before an earlier line's, so the window is the same")
       for line in (
        "if windows and i == windows[-1][1]:",
        "if windows and i <= windows[-1][1]:",
        "if windows and i is windows[-1][1]:",
        "if windows and i < windows[not 1][1]:",
        "if windows and i < windows[- 0][1]:",
        "if windows and i < windows[-1][ 0]:",
    )},
    **{("detectors:_anchor_windows", line): (
        "the window then starts where the first window starts: it only grows") for line in (
        "windows[-1] = (windows[- 0][0], end)",
        "windows[-1] = (windows[not 1][0], end)",
    )},
})

# Which windows are merged. Scanning two overlapping windows apart finds what their union finds:
# a match reaches into the lines they share only over filler between a name and its value, and
# then lies whole in its own anchor's window, which is scanned too; either finds the same value.
_APART = ("overlapping windows are then scanned apart instead of merged: a match reaching into"
          " the lines they share lies whole in its own anchor's window, which is scanned too")
EQUIVALENT.update({
    **{("detectors:_anchor_windows", f"if windows and start {c} windows[-1][1]:"): _APART
       for c in ("==", ">", ">=", "is", "is not")},
    **{("detectors:_anchor_windows", f"if windows and start <= {w}:"): _APART
       for w in ("windows[not 1][1]", "windows[- 0][1]", "windows[-1][ 0]")},
    ("detectors:_anchor_windows", "if windows and start != windows[-1][1]:"):
        "disjoint windows are merged as well: the window spans the whole lines between, it only"
        " grows",
    ("detectors:_anchor_windows", "if windows and start < windows[-1][1]:"):
        "a window's start is a line holding content and the last window ends on a line break:"
        " the two are never equal, so < is <=",
})

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


# Plugins no security module's tests use: langsmith's alone took 1.0 of the 2.7 s pytest needed
# to run one test here (2026-12-06, ``-X importtime``; 1.6 s without it), paid by every mutant.
_UNUSED_PLUGINS = ("langsmith_plugin",)


def _pytest(work: Path, t: Target, tests: Sequence[str], coverage: bool = False) -> list[str]:
    """The command that runs ``tests`` in ``work``, stopped at the first failure (with
    ``coverage``: every test, recording the tests that execute each line of the module)."""
    unused = [*_UNUSED_PLUGINS, *(() if coverage else ("pytest_cov",))]
    how = (["-p", "mutation_preload", f"--cov={Path(t.path).parent}", "--cov-context=test",
            f"--cov-config={work / _COVERAGE_RC}", "--cov-report=", "-rA"] if coverage
           else ["-x"])
    return ["env", "-C", str(work), f"PYTHONPATH={work}", "PYTHONDONTWRITEBYTECODE=1",
            sys.executable, "-m", "pytest", *how, "-q", "-p", "no:cacheprovider",
            *(a for name in unused for a in ("-p", f"no:{name}")),
            "--timeout", str(int(t.timeout_s)), *tests]


# Python subprocesses the tests start are measured too (coverage's subprocess patch); what
# they run is recorded outside every test's context, so it runs the whole selection, like code
# run at import. A child started with -I or -S loads no .pth and is not seen (Target.in_child).
_COVERAGE_RC = ".coveragerc-mutation"
_COVERAGE_CONFIG = "[run]\npatch = subprocess\n"

_PRELOAD = """\
import importlib


def pytest_sessionstart(session):
    # Imported before the first test, so what runs at import is recorded outside every test's
    # context (the package loads some modules lazily, inside whichever test comes first).
    importlib.import_module({module!r})
"""


@dataclasses.dataclass(frozen=True, slots=True)
class Coverage:
    """Which tests execute which lines of one module, measured on the unmutated code."""

    by_line: dict[int, frozenset[str]]
    # Node ids in the order the module's tests ran them, so a selection keeps that order.
    order: dict[str, int]


def _coverage(work: Path, name: str, t: Target) -> Coverage | str:
    """Run the module's tests once under coverage with a context per test; the end of their
    output instead when they fail (a failing baseline would count every mutant as killed)."""
    from coverage import CoverageData

    module = t.path.removesuffix(".py").replace("/", ".")
    (work / "mutation_preload.py").write_text(_PRELOAD.format(module=module))
    (work / _COVERAGE_RC).write_text(_COVERAGE_CONFIG)
    data_file = work / f".coverage-{name}"
    cmd = _pytest(work, t, t.tests, coverage=True)
    res = subprocess.run(cmd, env=dict(os.environ, COVERAGE_FILE=str(data_file)), text=True,
                         capture_output=True, check=False)
    if res.returncode:
        return (res.stdout + res.stderr)[-1500:]
    # -rA lists every test in the order it ran ("PASSED tests/x.py::test_y").
    ran = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines()
           if ln.startswith(("PASSED ", "SKIPPED ", "XFAIL ", "XPASS "))]
    data = CoverageData(basename=str(data_file))
    data.read()
    data.set_query_contexts(None)
    contexts = data.contexts_by_lineno(str((work / t.path).resolve()))
    return Coverage(by_line={ln: frozenset(c.rpartition("|")[0] or c for c in cs)
                             for ln, cs in contexts.items()},
                    order={nid: i for i, nid in enumerate(dict.fromkeys(ran))})


@dataclasses.dataclass(frozen=True, slots=True)
class Statement:
    """The header lines of the innermost statement around a line, and whether that statement
    runs when the module is imported."""

    first: int
    last: int
    at_import: bool


_CACHES = {"cache", "lru_cache", "cached_property"}


def _statements(path: Path) -> dict[int, Statement]:
    """Each line's innermost statement (a compound statement by its header only)."""
    tree = ast.parse(path.read_text())
    out: dict[int, Statement] = {}

    def cached(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        names = {getattr(d, "attr", getattr(d, "id", "")) for dec in fn.decorator_list
                 for d in ast.walk(dec)}
        return bool(names & _CACHES)

    def visit(node: ast.AST, at_import: bool) -> None:
        kids = [c for c in ast.iter_child_nodes(node)
                if isinstance(c, (ast.stmt, ast.ExceptHandler))]
        if isinstance(node, (ast.stmt, ast.ExceptHandler)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            last = node.end_lineno or node.lineno
            if kids:
                last = max(first, min(k.lineno for k in kids) - 1)
            for ln in range(first, last + 1):
                out[ln] = Statement(first, last, at_import)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # A body runs when called; a cached body's result serves every later caller.
            at_import = cached(node)
        for k in kids:
            visit(k, at_import)

    visit(tree, True)
    return out


def _selection(cov: Coverage, spans: dict[int, Statement], t: Target, first: int,
               last: int) -> tuple[str, ...] | None:
    """The tests a mutant of lines first..last runs: its statements' tests, the whole
    selection for code run at import, None when no test executes it."""
    found: set[str] = set()
    for ln in range(first, last + 1):
        st = spans.get(ln)
        if st is None or st.at_import:
            return t.tests
        for lnum in range(st.first, st.last + 1):
            found |= cov.by_line.get(lnum, frozenset())
    if "" in found:  # run outside any test: at import, in a child process, or by a fixture
        return t.tests
    if not found:
        return t.tests if t.in_child else None
    return tuple(sorted(found, key=lambda nid: (cov.order.get(nid, len(cov.order)), nid)))


def _config(work: Path, name: str, t: Target) -> Path:
    cmd = " ".join(_pytest(work, t, t.tests))
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
    # Survivors no test executes (never run), and narrow survivors the whole selection killed.
    unrun: int = 0
    confirmed: int = 0
    widened: list[str] = dataclasses.field(default_factory=list)
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


def _test(works: queue.Queue[Path], t: Target, m: Any, tests: tuple[str, ...]) -> Any:
    """Apply one mutant in a free scratch copy, run ``tests`` there, put the copy back."""
    from cosmic_ray.mutating import mutate_and_test  # type: ignore[import-untyped]

    work = works.get()
    try:
        mutant = attrs.evolve(m, module_path=work / t.path)
        res = mutate_and_test([mutant], shlex.join(_pytest(work, t, tests)), t.timeout_s * 2)
        if res.diff:
            res = attrs.evolve(res, diff=res.diff.replace(f"/{work}/", "/"))
        return res
    finally:
        _reap(work)
        works.put(work)


def _reap(work: Path) -> int:
    """Kill every process still running from the scratch copy ``work`` (its path in the command
    line); how many. A helper that a mutant made loop, started in a session of its own (the
    Landlock helper), outlives the test command that cosmic-ray's timeout stops."""
    mark = os.fsencode(work) + b"/"
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return killed


def _unrun(work: Path, m: Any) -> Any:
    """The result of a mutant no test executes: survived, with its diff, not run."""
    from cosmic_ray.mutating import _make_diff, mutate_code  # type: ignore[import-untyped]
    from cosmic_ray.plugins import get_operator  # type: ignore[import-untyped]
    from cosmic_ray.work_item import (  # type: ignore[import-untyped]
        TestOutcome,
        WorkerOutcome,
        WorkResult,
    )

    src = (work / m.module_path).read_text()
    try:
        mutated = mutate_code(src, get_operator(m.operator_name)(**m.operator_args),
                              m.occurrence)
    except Exception:  # an operator that cannot apply here: not viable, as mutate_and_test says
        return WorkResult(worker_outcome=WorkerOutcome.EXCEPTION,
                          test_outcome=TestOutcome.INCOMPETENT, output="operator failed")
    if mutated is None:
        return WorkResult(worker_outcome=WorkerOutcome.NO_TEST)
    return WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.SURVIVED,
                      output="no test executes this line",
                      diff="\n".join(_make_diff(src, mutated, m.module_path)))


def run_module(works: list[Path], name: str, t: Target, sample: int | None, seed: int,
               confirm: int = 0, lines: set[int] | None = None) -> Score:
    """Init, (sample), run each mutant against the tests that execute it, read back one
    module's session. ``lines``: run only the mutants that start on these lines."""
    from cosmic_ray.work_db import WorkDB, use_db  # type: ignore[import-untyped]
    from cosmic_ray.work_item import (  # type: ignore[import-untyped]
        TestOutcome,
        WorkerOutcome,
        WorkResult,
    )

    t0 = time.monotonic()
    work = works[0]
    cov = _coverage(work, name, t)
    if isinstance(cov, str):
        raise SystemExit(f"mutation: {name}: its tests fail before any mutation:\n{cov}")
    spans = _statements(work / t.path)
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
    score = Score(name, annotation=annotation)
    with use_db(str(session), WorkDB.Mode.open) as db:
        # In source order (job ids are random): a seed names a sample, progress reads in order.
        pending = sorted(db.pending_work_items, key=lambda w: (
            w.mutations[0].start_pos, w.mutations[0].operator_name, w.mutations[0].occurrence))
        if lines is not None:
            for w in pending:
                if w.mutations[0].start_pos[0] not in lines:
                    db.set_result(w.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
            pending = [w for w in pending if w.mutations[0].start_pos[0] in lines]
        if sample is not None:
            keep = set(random.Random(f"{seed}:{name}").sample(
                [w.job_id for w in pending], min(sample, len(pending))))
            for w in pending:
                if w.job_id not in keep:
                    db.set_result(w.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
            pending = [w for w in pending if w.job_id in keep]
        free: queue.Queue[Path] = queue.Queue()
        for w in works:
            free.put(w)
        runs: dict[Future[Any], Any] = {}
        left = [confirm]  # narrow survivors still to run against the whole selection
        lock = threading.Lock()

        def run(m: Any, tests: tuple[str, ...]) -> Any:
            result = _test(free, t, m, tests)
            if result.test_outcome != TestOutcome.SURVIVED or tests == t.tests:
                return result
            with lock:
                if left[0] <= 0:
                    return result
                left[0] -= 1
                score.confirmed += 1
            again = _test(free, t, m, t.tests)
            if again.test_outcome != TestOutcome.KILLED:
                return result
            with lock:
                score.widened.append(f"{m.module_path}:{m.start_pos[0]} {m.operator_name}"
                                     f" ({len(tests)} tests)")
            return again

        with ThreadPoolExecutor(len(works)) as pool:
            for w in pending:
                m = w.mutations[0]
                tests = _selection(cov, spans, t, m.start_pos[0], m.end_pos[0])
                if tests is None:
                    score.unrun += 1
                    db.set_result(w.job_id, _unrun(work, m))
                else:
                    runs[pool.submit(run, m, tests)] = w
            for done, fut in enumerate(as_completed(runs), 1):
                db.set_result(runs[fut].job_id, fut.result())
                if done % 25 == 0:
                    print(f"mutation: {name}: {done}/{len(runs)} run,"
                          f" {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                score.skipped += result.output != "annotation"
                continue
            if result.test_outcome in (None, TestOutcome.INCOMPETENT):
                score.incompetent += 1
                continue
            if result.test_outcome != TestOutcome.SURVIVED:  # killed, or timed out
                score.killed += 1
                continue
            diff = result.diff or ""
            m = item.mutations[0]
            where = f"{m.module_path}:{m.start_pos[0]} {m.operator_name}"
            line = _mutated_line(diff)
            why = (EQUIVALENT.get((f"{name}:{m.definition_name}", line))
                   or EQUIVALENT.get((name, line)) or EQUIVALENT.get(("*", line)))
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


def _lines_changed(ref: str, path: str, worktree: bool) -> set[int]:
    """The lines of ``path`` added or changed since ``ref``, as HEAD has them (``worktree``: as
    the working tree has them)."""
    cmd = ["git", "diff", "-U0", ref, *([] if worktree else ["HEAD"]), "--", path]
    out = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, check=True).stdout
    lines: set[int] = set()
    for hunk in out.splitlines():
        if hunk.startswith("@@"):
            # "@@ -a,b +c,d @@": d lines from c (d is 1 when left out, 0 for a deletion).
            start, _, count = hunk.split()[2][1:].partition(",")
            lines.update(range(int(start), int(start) + int(count or 1)))
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.mutation", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--modules", help="comma-separated names (see --list); default all")
    p.add_argument("--changed-since", metavar="REF",
                   help="only modules whose file (or test selection) changed since the merge"
                        " base with REF")
    p.add_argument("--lines-changed-since", metavar="REF",
                   help="run only the mutants on lines added or changed since REF (the others"
                        " are skipped): a score of the new code")
    p.add_argument("--pick", type=int, help="run only this many of the modules, drawn with"
                                             " --seed")
    p.add_argument("--sample", type=int, help="mutants per module, drawn with --seed")
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--budget-s", type=float, help="start no module after this many seconds")
    p.add_argument("--aim", type=float, default=90.0, help="the score a full run must reach")
    p.add_argument("--list", action="store_true", help="print the modules and their tests")
    p.add_argument("--worktree", action="store_true",
                   help="mutate the working tree's files (default: HEAD's, as committed)")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at once, each in a scratch"
                                                        " copy of its own")
    p.add_argument("--confirm", type=int, default=0, metavar="N",
                   help="run up to N survivors of their narrow selection again against the"
                        " module's whole selection (a kill there means the selection was too"
                        " narrow; it counts as a kill)")
    return p


def _idle() -> None:
    """Run this process and its children at idle CPU priority (Linux; elsewhere as is)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


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
    _idle()
    works = [_scratch(ns.worktree) for _ in range(max(1, ns.jobs))]
    t0 = time.monotonic()
    scores: list[Score] = []
    try:
        for n in names:
            if ns.budget_s is not None and time.monotonic() - t0 > ns.budget_s:
                print(f"mutation: budget spent, {n} and later modules not run")
                break
            lines = (None if ns.lines_changed_since is None else
                     _lines_changed(ns.lines_changed_since, TARGETS[n].path, ns.worktree))
            s = run_module(works, n, TARGETS[n], ns.sample, ns.seed, ns.confirm, lines)
            scores.append(s)
            print(f"mutation: {n}: {s.killed}/{s.total} killed ({s.percent:.1f}%),"
                  f" {len(s.equivalent)} equivalent, {s.unrun} survived unrun (no test"
                  f" executes them), {len(s.widened)} of {s.confirmed} narrow survivors"
                  f" killed by the whole selection,"
                  f" {s.skipped} skipped, {s.incompetent} not viable, {s.annotation} in"
                  f" annotations (equivalent), {s.seconds:.0f}s",
                  flush=True)
    finally:
        for work in works:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'module':14} {'file':34} {'killed':>7} {'survived':>8} {'equivalent':>10}"
          f" {'score':>7}")
    for s in scores:
        print(f"{s.name:14} {TARGETS[s.name].path:34} {s.killed:7d} {len(s.survived):8d}"
              f" {len(s.equivalent):10d} {s.percent:6.1f}%")
    for s in scores:
        for wd in s.widened:
            print(f"\nkilled only by the whole selection (too narrow) {wd}")
        for e in s.equivalent:
            print(f"\nequivalent (not counted) {e}")
        for sv in s.survived:
            print(f"\nSURVIVED {sv}")
    full = [s for s in scores if not s.skipped]
    return 1 if any(s.percent < ns.aim for s in full) else 0


if __name__ == "__main__":
    raise SystemExit(main())
