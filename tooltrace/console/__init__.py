"""The local web console (``tooltrace serve``): live calls, calls and runs as the report shows
them, pending approvals to answer, and per-tool figures, over a home's trail and approval queue.

Server-rendered HTML (Starlette, served by uvicorn), no front-end build; the live views use
server-sent events. It binds 127.0.0.1 unless told otherwise, and every request needs the token
printed at start (``tooltrace.console._auth``); forms carry a CSRF token; ``read_only`` turns
answering off. It shows only what the trail and the queue hold, which are redacted, and passes
every value through the redactor once more.

``create_app(ConsoleSettings(...))`` is the ASGI app; ``serve`` runs it (the CLI's way).
Needs the ``console`` extra (``pip install 'tooltrace[console]'``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from ._app import ConsoleSettings, create_app
from ._auth import new_token

__all__ = ["Background", "ConsoleSettings", "bind", "create_app", "new_token", "serve"]


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket for the console (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(settings: ConsoleSettings, sock: socket.socket,
          started: Callable[[], None] | None = None) -> None:
    """Serve the console on ``sock`` until interrupted (``started``: called once listening)."""
    import uvicorn

    config = uvicorn.Config(create_app(settings), log_level="warning", access_log=False,
                            lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    if started is not None:
        orig = server.startup

        async def startup(sockets: list[socket.socket] | None = None) -> None:
            await orig(sockets)
            started()

        server.startup = startup  # type: ignore[method-assign]
    server.run(sockets=[sock])


class Background:
    """The console served on a thread of this process (``tooltrace demo --serve``)."""

    def __init__(self, settings: ConsoleSettings, sock: socket.socket) -> None:
        import uvicorn

        config = uvicorn.Config(create_app(settings), log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=1)
        self._server: Any = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        daemon=True, name="tooltrace-console")
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and wait (at most ``timeout_s``) for the thread to end."""
        self._server.should_exit = True
        self._thread.join(timeout_s)
