"""The console's routes: pages over the trail and the approval queue, the live events, the
answer forms and the signed webhook callback."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from ..policy import AlreadyAnswered, ApprovalExpired, ApprovalNotFound, ApprovalQueue
from ..redaction import default_redactor
from . import _pages
from ._auth import Guard
from ._data import CallFilter, Trail

__all__ = ["ConsoleSettings", "create_app"]

_REDACT = default_redactor().redact_text


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """What a console serves and who may answer through it."""

    home: Path
    """The home whose trail and approval queue it shows."""
    token: str
    """The token every request must carry (printed at start)."""
    who: str
    """The identity answers given in the console are recorded under (``<user>@console``)."""
    read_only: bool = False
    """True: no answer can be given (forms and callbacks are refused)."""
    callback_keys: dict[str, bytes] = field(default_factory=dict)
    """Webhook callback keys by name (``X-Tooltrace-Key``)."""
    poll_s: float = 0.2
    """How often the live view looks at the trail."""


def _html(body: str, nonce: str, status: int = 200) -> HTMLResponse:
    # same-origin, not no-referrer: with no-referrer the browser sends "Origin: null" on the
    # answer forms, and the POST check could not tell the console's own form from a foreign one.
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; "
           "connect-src 'self'; img-src 'self' data:; form-action 'self'; "
           "frame-ancestors 'none'; base-uri 'none'")
    return HTMLResponse(body, status, headers={
        "Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin", "Cache-Control": "no-store"})


class _Console:
    def __init__(self, s: ConsoleSettings) -> None:
        self.s = s
        self.guard = Guard(s.token)
        self.trail = Trail(s.home)
        self.queue = ApprovalQueue(s.home)
        self.seen_signatures: dict[str, float] = {}

    def page(self, title: str, body: str, active: str, script: str = "",
             status: int = 200) -> HTMLResponse:
        nonce = secrets.token_urlsafe(12)
        return _html(_pages.layout(title, body, active=active, nonce=nonce, script=script,
                                   read_only=self.s.read_only), nonce, status)

    def not_found(self, what: str) -> HTMLResponse:
        return self.page("not found", f"<h1>Not found</h1><p>{what}</p>", "", status=404)

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/calls", status_code=303)

    async def calls(self, request: Request) -> Response:
        q = request.query_params
        f = CallFilter(q.get("status") or None, q.get("tool") or None, q.get("run") or None,
                       q.get("user") or None)
        rows = await run_in_threadpool(self.trail.calls, f)
        query = "?" + urlencode({k: v for k, v in q.items() if v and k != "token"})
        return self.page("Live calls", _pages.calls_page(rows, f, query), "calls",
                         _pages.LIVE_JS)

    async def call(self, request: Request) -> Response:
        cid = request.path_params["call_id"]
        rep = await run_in_threadpool(self.trail.report, "call", cid)
        if rep is None:
            return self.not_found("no call has this id in the trail")
        from ..report import render_html

        return self.page(f"call {cid}", _pages.report_page(render_html(rep)), "calls")

    async def runs(self, request: Request) -> Response:
        rows = await run_in_threadpool(self.trail.runs)
        return self.page("Runs", _pages.runs_page(rows), "runs")

    async def run(self, request: Request) -> Response:
        rid = request.path_params["run_id"]
        rep = await run_in_threadpool(self.trail.report, "run", rid)
        if rep is None:
            return self.not_found("no call of this run is in the trail")
        from ..report import render_html

        link = f'<p><a href="/calls?run={_pages.esc(rid)}">live calls of this run</a></p>'
        return self.page(f"run {rid}", _pages.report_page(render_html(rep), link), "runs")

    async def any_id(self, request: Request) -> Response:
        ident = request.path_params["ident"]
        kind = await run_in_threadpool(self.trail.kind_of, ident)
        if kind is None:
            return self.not_found("no call or run has this id in the trail")
        return RedirectResponse(f"/{kind}s/{ident}", status_code=303)

    async def stats(self, request: Request) -> Response:
        rows, rate = await run_in_threadpool(self.trail.stats)
        return self.page("Stats", _pages.stats_page(rows, rate), "stats")

    async def approvals(self, request: Request) -> Response:
        pending = await run_in_threadpool(self.queue.pending)
        answered = await run_in_threadpool(self.queue.answered, 100)
        body = _pages.approvals_page(pending, answered, self.guard.csrf, self.s.read_only)
        return self.page("Approvals", body, "approvals", _pages.APPROVALS_JS)

    async def pending_fragment(self, request: Request) -> Response:
        pending = await run_in_threadpool(self.queue.pending)
        return _html(_pages.pending_section(pending, self.guard.csrf, self.s.read_only), "-")

    async def answer(self, request: Request) -> Response:
        if self.s.read_only:
            return PlainTextResponse("this console is read-only", status_code=403)
        form = await request.form()
        csrf = form.get("csrf")
        if not self.guard.csrf_ok(request, csrf if isinstance(csrf, str) else None):
            return PlainTextResponse("bad or missing CSRF token", status_code=403)
        decision, reason, ttl = form.get("decision"), form.get("reason"), form.get("ttl")
        if decision not in ("approve", "deny"):
            return PlainTextResponse("decision must be approve or deny", status_code=400)
        try:
            ttl_s = _ttl(ttl if isinstance(ttl, str) else "")
        except ValueError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        aid = request.path_params["approval_id"]
        try:
            await run_in_threadpool(lambda: self.queue.answer(
                aid, approved=decision == "approve", who=self.s.who,
                reason=reason if isinstance(reason, str) else "", ttl_s=ttl_s, via="console"))
        except ApprovalNotFound:
            return self.not_found("no approval request has this id")
        except (AlreadyAnswered, ApprovalExpired) as exc:
            return self.page("Too late", f"<h1>Not recorded</h1><p>{_pages.esc(exc)}</p>"
                             '<p><a href="/approvals">back</a></p>', "approvals", status=409)
        return RedirectResponse(f"/approvals#{aid}", status_code=303)

    async def callback(self, request: Request) -> Response:
        from ..policy import KEY_HEADER, SIGNATURE_HEADER, SignatureError, verify_signature

        if self.s.read_only:
            return JSONResponse({"error": "read-only"}, status_code=403)
        name = request.headers.get(KEY_HEADER, "")
        key = self.s.callback_keys.get(name)
        body = await request.body()
        sig = request.headers.get(SIGNATURE_HEADER, "")
        try:
            if key is None:
                raise SignatureError("unknown key")
            verify_signature(key, body, sig)
        except SignatureError as exc:
            return JSONResponse({"error": str(exc)}, status_code=401)
        now = time.time()
        self.seen_signatures = {k: t for k, t in self.seen_signatures.items() if now - t < 600}
        if sig in self.seen_signatures:
            return JSONResponse({"error": "replayed"}, status_code=409)
        self.seen_signatures[sig] = now
        return await self._callback_answer(name, body)

    async def _callback_answer(self, name: str, body: bytes) -> Response:
        try:
            data = orjson.loads(body)
            aid, decision = str(data["approval_id"]), data["decision"]
            who = f"{data.get('who') or 'someone'}@webhook.{name}"
            ttl = data.get("ttl_s")
            if decision not in ("approve", "deny"):
                raise ValueError(decision)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return JSONResponse({"error": "malformed answer"}, status_code=400)
        try:
            ans = await run_in_threadpool(lambda: self.queue.answer(
                aid, approved=decision == "approve", who=who, reason=str(data.get("reason") or ""),
                ttl_s=float(ttl) if ttl else None, via="webhook"))
        except ApprovalNotFound:
            return JSONResponse({"error": "no such request"}, status_code=404)
        except (AlreadyAnswered, ApprovalExpired) as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse({"approval_id": aid, "approved": ans.approved, "who": ans.who})

    async def events(self, request: Request) -> Response:
        q = request.query_params
        f = CallFilter(q.get("status") or None, q.get("tool") or None, q.get("run") or None,
                       q.get("user") or None)
        gen = self._events(request, f, approvals=bool(q.get("approvals")))
        return StreamingResponse(gen, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    async def _events(self, request: Request, f: CallFilter, *, approvals: bool
                      ) -> AsyncIterator[bytes]:
        from ..audit import Follower

        follower = await run_in_threadpool(Follower, self.s.home)
        last_ids: str | None = None
        beat = time.monotonic()
        yield b"retry: 1000\n\n"
        while not await request.is_disconnected():
            if approvals:
                ids = ",".join(p.approval_id for p in await run_in_threadpool(self.queue.pending))
                if ids != last_ids:
                    last_ids = ids
                    yield f"event: approvals\ndata: {ids}\n\n".encode()
            else:
                poll = await run_in_threadpool(follower.poll)
                for line in poll.lines:
                    if line.get("k") == "c" and f.matches(line):
                        yield b"event: call\ndata: " + orjson.dumps(_live(line)) + b"\n\n"
            if time.monotonic() - beat > 15:
                beat = time.monotonic()
                yield b": keep-alive\n\n"
            await asyncio.sleep(self.s.poll_s)


def _live(line: dict[str, Any]) -> dict[str, Any]:
    """A finished call as the live view shows it (redacted once more)."""
    elapsed = (line.get("elapsed_us") or 0) / 1000.0
    at = line.get("started_at_us")
    return {"call_id": line.get("call_id"), "run_id": line.get("run_id"),
            "tool": _REDACT(str(line.get("tool"))), "status": line.get("status"),
            "principal": _REDACT(_pages.principal_text(line.get("principal"))),
            "elapsed": f"{elapsed:.1f} ms",
            "summary": _REDACT(str(line.get("summary") or ""))[:300],
            "at": _pages.when(at) if isinstance(at, int) else ""}


def _ttl(value: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    n, unit = (value[:-1], units[value[-1]]) if value[-1] in units else (value, 1)
    try:
        seconds = float(n) * unit
    except ValueError:
        raise ValueError("TTL: a duration such as 90, 10m or 2h") from None
    if not seconds > 0:
        raise ValueError("TTL: a positive duration")
    return seconds


def create_app(settings: ConsoleSettings) -> Starlette:
    """The console as an ASGI app (serve it with ``tooltrace.console.serve`` or any server)."""
    c = _Console(settings)

    async def unreadable(request: Request, exc: Exception) -> Response:
        # The trail changes under a reader (segments sealed, compacted, moved): the next look
        # usually succeeds. Only the error's type is shown, never its text.
        return c.page("Try again", "<h1>The trail could not be read just now</h1>"
                      f"<p>{_pages.esc(type(exc).__name__)}: reload the page.</p>", "",
                      status=503)

    routes = [
        Route("/", c.home), Route("/calls", c.calls), Route("/calls/{call_id}", c.call),
        Route("/runs", c.runs), Route("/runs/{run_id}", c.run), Route("/id/{ident}", c.any_id),
        Route("/stats", c.stats), Route("/approvals", c.approvals),
        Route("/approvals/pending", c.pending_fragment),
        Route("/approvals/{approval_id}", c.answer, methods=["POST"]),
        Route("/api/callback", c.callback, methods=["POST"]),
        Route("/events", c.events),
    ]
    return Starlette(routes=routes, exception_handlers={Exception: unreadable},
                     middleware=[Middleware(BaseHTTPMiddleware, dispatch=c.guard)])
