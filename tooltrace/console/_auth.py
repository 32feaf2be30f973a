"""Who may use the console: the token printed at start (as Jupyter's), kept in a cookie after the
first visit, and a CSRF token in every form.

A request is let in when it carries the token: ``?token=`` (the URL printed at start; the
console then sets an HttpOnly, SameSite=Strict cookie and redirects to the same page without
it), the cookie, or ``Authorization: Bearer``. A POST also needs the form's CSRF token, an HMAC
of the token, and, when the browser sends one, an ``Origin`` of the console itself. The
webhook callback is the one path without the token: its signature authenticates it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

__all__ = ["COOKIE", "Guard", "new_token"]

COOKIE = "tooltrace_console"
#: Paths open without the token (their own signature authenticates them).
OPEN_PATHS = frozenset({"/api/callback"})


def new_token() -> str:
    """A fresh console token (192 random bits, URL-safe)."""
    return secrets.token_urlsafe(24)


class Guard:
    """Checks a request's token (and a POST's CSRF token)."""

    def __init__(self, token: str) -> None:
        self._token = token
        self.csrf = hmac.new(token.encode(), b"csrf", hashlib.sha256).hexdigest()

    def _has_token(self, request: Request) -> bool:
        given = request.cookies.get(COOKIE) or ""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return hmac.compare_digest(given.encode(), self._token.encode())

    def csrf_ok(self, request: Request, form_value: str | None) -> bool:
        """The CSRF token matches, and the Origin (when sent) is this console."""
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return False
        return hmac.compare_digest((form_value or "").encode(), self.csrf.encode())

    async def __call__(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Middleware: let in requests that carry the token; turn ``?token=`` into a cookie."""
        if request.url.path in OPEN_PATHS:
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given.encode(), self._token.encode()):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            resp = RedirectResponse(target, status_code=303)
            resp.set_cookie(COOKIE, self._token, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
            return resp
        if not self._has_token(request):
            return PlainTextResponse(
                "tooltrace console: open the URL with the token that `tooltrace serve` printed.",
                status_code=401)
        return await call_next(request)
