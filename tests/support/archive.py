"""Real servers for the archive tests, on 127.0.0.1: S3 (moto_server) and PostgreSQL 15.

``MotoS3`` starts ``moto_server`` on a free port and creates buckets with boto3;
``Postgres`` runs ``initdb`` and ``pg_ctl`` as the ``postgres`` user (the tests run as root in
CI) with a private socket directory, and creates one database per DuckLake catalog. Both poll
until ready and stop at the end. ``s3_env`` is the environment a shipper or reader needs.

Run as a script (``python tests/support/archive.py writer HOME N SEGMENT_BYTES``) it is one
agent process on its own "machine": it writes N finished calls through an ``AuditSink`` into
HOME (small segments), seals them, and prints every acknowledged call id.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from support.components import require_binary
from support.otlp import free_port

__all__ = ["ACCESS_KEY", "SECRET_KEY", "MotoS3", "Postgres", "run_writer"]

ACCESS_KEY = "AKIAARCHIVETEST00001"
#: The S3 secret every test uses; tests assert it never appears in output or errors.
SECRET_KEY = "archive-s3-secret-Zq9vXw2LmN4pR7tY"
#: Debian's PostgreSQL binaries (package ``postgresql``; the newest major installed).
PG_BIN = max(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name),
             default=Path("/usr/lib/postgresql/15/bin"))
_VENV_BIN = Path(sys.executable).parent


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not become ready in {timeout_s} s")


class MotoS3:
    """``moto_server`` on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoS3:
        hint = "pip install 'moto[s3]==5.2.5' flask flask-cors"
        venv_exe = _VENV_BIN / "moto_server"
        exe = (require_binary("moto_server", hint, path=venv_exe) if venv_exe.exists()
               else require_binary("moto_server", hint))
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up() -> bool:
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=1):
                    return True
            except (urllib.error.URLError, OSError):
                assert self.proc is not None and self.proc.poll() is None, "moto_server died"
                return False

        _wait(up, 30, "moto_server")
        return self

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def bucket(self, name: str) -> str:
        """Create a bucket (idempotent); return its name."""
        c = self.client()
        try:
            c.create_bucket(Bucket=name)
        except c.exceptions.BucketAlreadyOwnedByYou:
            pass
        return name

    def env(self) -> dict[str, str]:
        """AWS_* variables that point DuckDB (and boto3) at this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1"}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Postgres:
    """PostgreSQL 15 on a free loopback port, its data and socket in a private directory."""

    def __init__(self) -> None:
        require_binary("initdb", "apt-get install -y postgresql", path=PG_BIN / "initdb")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tooltrace-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.as_root = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=60)

    def start(self) -> Postgres:
        self.sock.mkdir(parents=True)
        self.data.mkdir()
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chmod(self.root, 0o755)
            for p in (self.root, self.data, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                  "postgres", "--no-sync")
        opts = (f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off"
                " -c max_connections=200")
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                  str(self.root / "log"), "-w", "start")
        return self

    def createdb(self, name: str) -> str:
        """Create a database; return its libpq conninfo over TCP."""
        self._run(str(PG_BIN / "createdb"), "-h", str(self.sock), "-p", str(self.port),
                  "-U", "postgres", name)
        return self.conninfo(name)

    def conninfo(self, name: str) -> str:
        """libpq conninfo of a database on this server."""
        return f"dbname={name} host=127.0.0.1 port={self.port} user=postgres"

    def psql(self, db: str, sql: str) -> str | None:
        """Run SQL with psql; its unaligned output, or None when the query failed."""
        proc = self._run(str(PG_BIN / "psql"), "-h", str(self.sock), "-p", str(self.port),
                         "-U", "postgres", "-d", db, "-At", "-c", sql, check=False)
        return proc.stdout if proc.returncode == 0 else None

    def stop(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop",
                  check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def run_writer(home: str, n: int, segment_bytes: int) -> None:
    """Write ``n`` calls into ``home`` with small segments, print acked call ids, seal."""
    from support.audit import make_record
    from tooltrace.audit import Ack
    from tooltrace.telemetry import AuditSink

    acked: list[str] = []

    def on_ack(ack: Ack) -> None:
        acked.extend(ack.call_ids)

    sink = AuditSink(home, segment_max_bytes=segment_bytes, group_interval_ms=1,
                     on_ack=on_ack)
    rng = random.Random(os.getpid())
    for i in range(n):
        sink.emit(make_record(rng, run_id=f"{Path(home).name}-{i % 4}"))
        if i % 50 == 49:
            sink.flush()
    sink.shutdown()
    sys.stdout.write("".join(c + "\n" for c in acked))
    sys.stdout.write(f"done {sink.dropped}\n")
    sys.stdout.flush()


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "writer":
    run_writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
