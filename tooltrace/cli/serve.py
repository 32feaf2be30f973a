"""``tooltrace serve``: the local web console over a home's trail and approval queue."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._common import EXIT_USAGE, OutputGuard, fail, home_option


def _keys(values: tuple[str, ...]) -> dict[str, bytes]:
    """``NAME=FILE`` pairs: each file holds one callback key (surrounding whitespace dropped)."""
    keys: dict[str, bytes] = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{v!r}: use NAME=FILE", param_hint="--callback-key")
        try:
            key = Path(path).read_bytes().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read the key file for {name!r} "
                                     f"({exc.strerror})", param_hint="--callback-key") from None
        if len(key) < 16:
            raise click.BadParameter(f"the key for {name!r} is shorter than 16 bytes",
                                     param_hint="--callback-key")
        keys[name] = key
    return keys


@click.command()
@home_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (another than 127.0.0.1 exposes the console: the token"
              " is still required).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--read-only", is_flag=True, help="Show everything, answer nothing.")
@click.option("--callback-key", "callback_keys", multiple=True, metavar="NAME=FILE",
              help="Accept signed webhook answers (POST /api/callback) made with the key in FILE,"
              " recorded as <who>@webhook.NAME. Repeatable.")
def serve(home: Path | None, host: str, port: int, read_only: bool,
          callback_keys: tuple[str, ...]) -> None:
    """Serve the web console: live calls, calls, runs, approvals to answer, stats.

    Prints the URL to open, with a fresh token every request must carry (the browser keeps it
    in a cookie after the first visit). Answers given in the console are recorded as
    <your user>@console. Ctrl-C stops it.
    """
    try:
        from ..console import ConsoleSettings, bind, new_token
        from ..console import serve as run
    except ImportError:
        fail("the console needs its extra: pip install 'tooltrace[console]'", EXIT_USAGE)
    from .._settings import resolve_home
    from ..policy import answerer

    root = resolve_home(home)
    keys = _keys(callback_keys)
    try:
        sock = bind(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port} ({exc.strerror})", EXIT_USAGE)
    token = new_token()
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/?token={token}"
    settings = ConsoleSettings(root, token, answerer("console"), read_only=read_only,
                               callback_keys=keys)
    guard = OutputGuard(home)

    def started() -> None:
        click.echo(guard(f"tooltrace console for {root}{' (read-only)' if read_only else ''}"))
        click.echo(f"open: {url}")
        sys.stdout.flush()

    try:
        run(settings, sock, started)
    except KeyboardInterrupt:
        pass


def start_background(home: Path | None, port: int) -> tuple[str, object]:
    """The console on a thread of this process, on 127.0.0.1 (``port``, else any free port):
    its URL with a fresh token, and the handle whose ``stop()`` ends it."""
    try:
        from ..console import Background, ConsoleSettings, bind, new_token
    except ImportError:
        fail("the console needs its extra: pip install 'tooltrace[console]'", EXIT_USAGE)
    from .._settings import resolve_home
    from ..policy import answerer

    try:
        sock = bind("127.0.0.1", port)
    except OSError:
        sock = bind("127.0.0.1", 0)  # the usual port is taken (another console): any port
    token = new_token()
    settings = ConsoleSettings(resolve_home(home).absolute(), token, answerer("console"))
    return f"http://127.0.0.1:{sock.getsockname()[1]}/?token={token}", Background(settings, sock)
