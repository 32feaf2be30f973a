"""The detectors: one entry per well-known credential format, and the scan that runs them.

Cloud keys, VCS and SaaS tokens, JWTs, PEM private key blocks, passwords in URLs,
``Authorization`` headers and cookies each have a :class:`_Detector`: a regex, the literal
anchors that must be in the text before the regex runs, and a check that vetoes a well-formed
but benign match. :func:`detect` runs the table and the key rules' search for values assigned
to key-like names, and replaces each find with a :func:`marker`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tooltrace.redaction._benign import (
    basic_credentials,
    benign_value,
    char_classes,
    mixed,
    placeholder,
    random_looking,
)
from tooltrace.redaction._keyrules import KEYWORDS, find_assignments

__all__ = ["ASCII_LOWER", "CS_ANCHORS", "LC_ANCHORS", "detect", "marker"]


def marker(kind: str) -> str:
    """The replacement text for a secret of ``kind``."""
    return f"[REDACTED:{kind}]"


@dataclass(frozen=True, slots=True)
class _Detector:
    """One credential format.

    ``pattern``'s group ``s`` (when present) is the secret, else the whole match is. The detector
    runs only when one of its anchors is in the text (``cs``: case-sensitive literals) or in
    its lower-cased copy (``lc``). ``check`` vetoes a match that is well-formed but benign.
    ``rank`` orders overlapping finds: the most specific format names the marker.
    ``at_anchor``: every match starts with one of the anchors, so in long text the pattern is
    tried at each anchor alone instead of scanning the lines around it.
    """

    kind: str
    pattern: str
    cs: tuple[str, ...] = ()
    lc: tuple[str, ...] = ()
    check: Callable[[re.Match[str], str], bool] | None = None
    rank: int = 2
    at_anchor: bool = False


def _check_random(_m: re.Match[str], value: str) -> bool:
    return mixed(value)


def _check_not_placeholder(_m: re.Match[str], value: str) -> bool:
    return not placeholder(value)


def _check_bearer(m: re.Match[str], value: str) -> bool:
    if benign_value(value):
        return False
    if m.group("hdr"):
        return True
    # Outside a header, "bearer <word>" is often prose: the token must look machine-made
    # (a digit is one sign of that, mixed case in a long token another).
    return random_looking(value) or (
        len(value) >= 16 and char_classes(value) >= 2 and any(c.isdigit() for c in value)
    )


# A header value is credentials when it is one token (a raw key), ``name=value`` pairs
# (cookies), or an auth scheme followed by a token or by ``name=value`` parameters (RFC 9110
# 11.4: Negotiate <token68>, Digest username="..", AWS4-HMAC-SHA256 Credential=..). After the
# header name in documentation comes prose instead: "see the docs at ...", "see below".
_PARAM_START = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]*=")
# A word of prose: not longer than "authentication" (a long lower-case token is a
# credential), or a link.
_PROSE_WORD = re.compile(
    r"[(\"']*(?:[A-Za-z][a-z]{0,13}|[A-Z]{2,5})[.,:;!?)\"']*|[A-Za-z][A-Za-z0-9+.\-]*://\S*"
)


# What may surround a header's value: any whitespace (a form feed or a no-break space too, as
# str.split sees them), and the quotes and comma of a string it sits in: "Cookie: none",
_VALUE_EDGES = re.compile(r"\A[\s\"',]+|[\s\"',]+\Z")


def _check_header_value(_m: re.Match[str], value: str) -> bool:
    value = _VALUE_EDGES.sub("", value)
    if placeholder(value):
        return False
    if _PARAM_START.match(value) is not None:
        return True
    words = value.split(None, 2)
    if len(words) < 2:
        return bool(words) and _PROSE_WORD.fullmatch(words[0]) is None
    # "<scheme> <credentials>": prose when a plain word follows the first one (a parameter,
    # name=value, is never one).
    return _PROSE_WORD.fullmatch(words[1]) is None


def _check_basic(m: re.Match[str], value: str) -> bool:
    return bool(m.group("hdr")) or basic_credentials(value)


# Where a prefixed token may start: not inside a run of letters and digits, but right after
# "_" or "-" (file names glue words so: backup_ghp_..., notes-AKIA...), which \b would refuse.
_GLUE = r"(?<![A-Za-z0-9])"
# The optional header name before "Bearer"/"Basic": a pattern starting with it is tried at every
# position of the text, so each starts with a lookahead for the first letters it may begin with,
# which the regex engine uses to skip ahead. It took the Bearer pattern's scan of a 1.5 MB line
# of random words from 158 ms to 27 ms (2026-12-06, docs/internals/performance-history.md).
_HDR = r"(?P<hdr>(?ai:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?)?"
_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA")

_PEM = (
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?s:.*?)(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)

_DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "private_key",
        _PEM,
        cs=("PRIVATE KEY",),
        rank=3,
    ),
    _Detector(
        "jwt",
        _GLUE + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        cs=("eyJ",),
        at_anchor=True,
    ),
    _Detector(
        "aws_access_key",
        _GLUE + r"(?:" + "|".join(_AWS_PREFIXES) + r"|APKA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        cs=(*_AWS_PREFIXES, "APKA"),
        at_anchor=True,
    ),
    _Detector(
        "aws_secret_key",
        (
            r"(?ai:aws)[A-Za-z0-9_\-]{0,20}(?ai:secret|key)[A-Za-z0-9_\-]{0,20}[\"']?\s*[:=]+\s*"
            r"[\"']?(?P<s>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        lc=("aws",),
        check=_check_random,
        at_anchor=True,
    ),
    _Detector(
        "gcp_api_key",
        _GLUE + r"AIza[0-9A-Za-z_\-]{35,40}(?![0-9A-Za-z_\-])",
        ("AIza",),
        at_anchor=True,
    ),
    _Detector("gcp_oauth_token", _GLUE + r"ya29\.[0-9A-Za-z_\-]{20,}", ("ya29.",), at_anchor=True),
    _Detector(
        "gcp_client_secret", _GLUE + r"GOCSPX-[0-9A-Za-z_\-]{20,}", ("GOCSPX-",), at_anchor=True
    ),
    _Detector(
        "azure_key",
        (
            r"(?ai:AccountKey|SharedAccessKey|SharedAccessSignature|[?&;]sig)="
            r"(?P<s>[A-Za-z0-9%/+]{20,}(?:={1,2}|%3[Dd]){0,2})"
        ),
        lc=("accountkey=", "sharedaccess", "sig="),
    ),
    _Detector(
        "azure_client_secret",
        (
            # Anchored by its "<digit>Q~": it may follow "-" or "_" and be followed by "."
            # (a file name: notes-<secret>.txt).
            r"(?<![A-Za-z0-9])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"
            r"(?![A-Za-z0-9_~\-])"
        ),
        cs=("Q~",),
    ),
    _Detector(
        "github_token",
        (
            _GLUE + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"
            r"(?![A-Za-z0-9])"
        ),
        cs=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        at_anchor=True,
    ),
    _Detector(
        "gitlab_token",
        _GLUE + r"gl(?:pat|dt|rt|cbt|ptt|ft|imt|oas|soat)-[A-Za-z0-9_\-]{20,}",
        cs=("glpat-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "gloas-", "glsoat-"),
        at_anchor=True,
    ),
    _Detector(
        "slack_token",
        _GLUE + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})",
        cs=("xox", "xapp-"),
        at_anchor=True,
    ),
    _Detector(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9/_\-]{8,})",
        cs=("hooks.slack.com",),
        at_anchor=True,
    ),
    _Detector(
        "stripe_key",
        _GLUE + r"(?:(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})",
        cs=("_live_", "_test_", "whsec_"),
    ),
    _Detector(
        "anthropic_key", _GLUE + r"sk-ant-[A-Za-z0-9_\-]{20,}", ("sk-ant-",), rank=3, at_anchor=True
    ),
    _Detector(
        "openai_key",
        _GLUE + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}",
        cs=("sk-",),
        check=_check_random,
        at_anchor=True,
    ),
    _Detector(
        "twilio_key",
        (
            _GLUE + r"(?:SK|AC)[0-9a-f]{32}(?![A-Za-z0-9])"
            r"|(?ai:twilio)[A-Za-z_]*[\"']?\s*[:=]\s*[\"']?"
            r"(?P<s>[0-9a-f]{32})\b"
        ),
        cs=("SK", "AC"),
        lc=("twilio",),
        at_anchor=True,
    ),
    _Detector(
        "sendgrid_key",
        _GLUE + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}",
        cs=("SG.",),
        at_anchor=True,
    ),
    _Detector(
        "npm_token", _GLUE + r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", ("npm_",), at_anchor=True
    ),
    _Detector("pypi_token", _GLUE + r"pypi-[A-Za-z0-9_\-]{50,}", ("pypi-",), at_anchor=True),
    _Detector(
        "huggingface_token", _GLUE + r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])", ("hf_",), at_anchor=True
    ),
    _Detector(
        "url_password",
        (
            r"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/@\"'<>]{1,256}:"
            r"(?P<s>[^\s@/\"'<>]{1,256})@"
        ),
        cs=("://",),
        check=_check_not_placeholder,
        rank=3,
    ),
    _Detector(
        "authorization",
        # "token" only before a blank or a tab (the HTTP scheme's own spacing): "tokens" and
        # "token": in JSON, common in a model's usage figures, do not make the pattern run.
        (
            r"(?=[APBTapbt])" + _HDR + r"(?:(?ai:bearer)\s+|(?ai:token)[ \t]+)"
            r"(?P<s>[A-Za-z0-9_\-.~+/]{8,}=*)"
        ),
        lc=("bearer", "token ", "token\t"),
        check=_check_bearer,
        rank=1,
    ),
    _Detector(
        "authorization",
        r"(?=[APBapb])" + _HDR + r"(?ai:basic)\s+(?P<s>[A-Za-z0-9+/]{8,}={0,2})",
        lc=("basic",),
        check=_check_basic,
        rank=1,
    ),
    _Detector(
        # Any other scheme (Digest, AWS4-HMAC-SHA256, Negotiate ...): the whole header value.
        "authorization",
        (
            r"(?im:^[ \t\"']*(?ai:(?:proxy-)?authorization)[ \t]*:[ \t]*"
            r"(?!(?ai:bearer|basic|token)\s)(?P<s>[^\s][^\r\n]*))"
        ),
        lc=("authorization",),
        check=_check_header_value,
        rank=1,
    ),
    _Detector(
        "cookie",
        r"(?im:^[ \t\"']*(?ai:(?:set-)?cookie)[ \t]*:[ \t]*(?P<s>[^\r\n]+))",
        lc=("cookie",),
        check=_check_header_value,
        rank=1,
    ),
    _Detector(
        "cookie",
        (
            r"(?ai:(?:set-)?cookie)[\"']?[ \t]*[:=][ \t]*[\"']"
            r"(?P<s>[^\"'\r\n\s,;)+][^\"'\r\n]*=[^\"'\r\n]*)[\"']"
        ),
        lc=("cookie",),
        rank=1,
    ),
)


# Compiled by the first scan that finds an anchor, not at import: compiling the table took
# 3.4 ms of CPU, the largest part of this package's import (2026-12-06, measured for
# ``python -m bench --sections startup``; docs/performance/figures.md). A process that never
# meets an anchor never compiles it.
@functools.cache
def _compiled() -> tuple[tuple[_Detector, re.Pattern[str]], ...]:
    """The table, each detector with its regex compiled."""
    return tuple((det, re.compile(det.pattern)) for det in _DETECTORS)


# Text without any anchor skips the detectors: one scan per case (the lower-case anchors
# include the key rules' keywords).
CS_ANCHORS = re.compile("|".join(re.escape(a) for d in _DETECTORS for a in d.cs))
LC_ANCHORS = re.compile(
    "|".join([KEYWORDS.pattern, "aws|twilio|accountkey=|sharedaccess|bearer|basic"])
)
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


# In long text a detector's regex runs only where its anchors are (a scan of the whole text
# costs 15-75 ms per detector and MB; the anchors are found with str.find). A pattern whose
# every match starts with an anchor is tried at each anchor alone; the others run on the lines
# around their anchors. Both find exactly what a scan of the whole text finds. The windows:
# - every match holds one of its detector's anchors (the patterns' case-insensitive words are
#   ASCII-only, as the anchors' lower-casing is);
# - a match runs over more than one line only through whitespace, a run of ":" or "=" and a
#   quote, between a name and its value ("aws_secret_access_key:\n  <key>", "Authorization:\n
#   Bearer <token>", "TWILIO_TOKEN\n=\n<token>"). So a window is the anchor's line with the
#   nearest line before it and after it that holds anything else, and the filler lines between;
# - windows are whole lines, merged where they overlap: no match crosses a window's edge.
# The multi-line PEM block is always scanned whole.
_WINDOW_MIN_TEXT = 4096
_CONTENT = re.compile(r"[^\s:=\"']")


def _content_before(text: str, start: int) -> int:
    """The start of the nearest line before the line at ``start`` that holds more than filler."""
    while start > 0:
        line = text.rfind("\n", 0, start - 1) + 1
        if _CONTENT.search(text, line, start - 1) is not None:
            return line
        start = line
    return 0


def _content_after(text: str, end: int) -> tuple[int, int]:
    """Where the nearest line after the line ending at ``end`` that holds more than filler
    starts and ends (the end of the text when there is none)."""
    n = len(text)
    while end < n:
        line_end = text.find("\n", end + 1)
        line_end = n if line_end < 0 else line_end
        if _CONTENT.search(text, end + 1, line_end) is not None:
            return end + 1, line_end
        end = line_end
    return n, n


def _hits(text: str, low: str, det: _Detector) -> list[int]:
    """Where ``det``'s anchors occur, in order."""
    hits: list[int] = []
    for source, anchors in ((text, det.cs), (low, det.lc)):
        for a in anchors:
            i = source.find(a)
            while i >= 0:
                hits.append(i)
                i = source.find(a, i + 1)
    hits.sort()
    return hits


def _at_anchors(text: str, hits: list[int], regex: re.Pattern[str]) -> Iterator[re.Match[str]]:
    """The matches a scan of the whole text finds, for a pattern whose every match starts with
    an anchor: tried at each anchor, skipping those inside the last match (as a scan does)."""
    end = 0
    for i in hits:
        if i >= end and (m := regex.match(text, i)) is not None:
            end = m.end()
            yield m


def _in_windows(text: str, hits: list[int], regex: re.Pattern[str]) -> Iterator[re.Match[str]]:
    """The matches in the windows around ``hits``."""
    for w_start, w_end in _anchor_windows(text, hits):
        yield from regex.finditer(text, w_start, w_end)


def _anchor_windows(text: str, hits: list[int]) -> list[tuple[int, int]]:
    windows: list[tuple[int, int]] = []
    last_line = 0  # where the last window's last line starts
    for i in hits:
        if windows and i < windows[-1][1]:
            # Inside the last window: only an anchor on its last line takes it further.
            if i >= last_line:
                last_line, end = _content_after(text, windows[-1][1])
                windows[-1] = (windows[-1][0], end)
            continue
        line = text.rfind("\n", 0, i) + 1
        start = _content_before(text, line)
        line_end = text.find("\n", i)
        last_line, end = _content_after(text, len(text) if line_end < 0 else line_end)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], end)
        else:
            windows.append((start, end))
    return windows


def detect(text: str) -> tuple[str, int]:
    """Run the detectors whose anchors occur in ``text``; replace what they find."""
    low = text.lower() if text.isascii() else text.translate(ASCII_LOWER)
    found: list[tuple[int, int, int, str]] = []  # (start, end, rank, kind)
    small = len(text) <= _WINDOW_MIN_TEXT
    for det, regex in _compiled():
        if not (any(a in text for a in det.cs) or any(a in low for a in det.lc)):
            continue
        matches: Iterator[re.Match[str]]
        if small or det.kind == "private_key":
            matches = regex.finditer(text)
        elif det.at_anchor:
            matches = _at_anchors(text, _hits(text, low, det), regex)
        else:
            matches = _in_windows(text, _hits(text, low, det), regex)
        for m in matches:
            if m.groupdict().get("s") is not None:
                start, end = m.span("s")
            else:
                start, end = m.span()
            if det.check is not None and not det.check(m, text[start:end]):
                continue
            found.append((start, end, det.rank, det.kind))
    if KEYWORDS.search(low) is not None:
        find_assignments(text, low, found)
    if not found:
        return text, 0
    # Merge overlapping finds into one redaction named by the most specific detector.
    found.sort()
    merged: list[list[Any]] = []
    for start, end, rank, kind in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if rank > last[2]:
                last[2], last[3] = rank, kind
        else:
            merged.append([start, end, rank, kind])
    out: list[str] = []
    pos = 0
    for start, end, _rank, kind in merged:
        out.append(text[pos:start])
        out.append(marker(kind))
        pos = end
    out.append(text[pos:])
    return "".join(out), len(merged)
