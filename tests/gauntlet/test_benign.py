"""The other side of redaction: a benign corpus stays as it is.

100,000 lines (CI: 10,000) mixing source code (the Python standard library), prose (license
texts and docstrings), UUIDs, git SHAs and sha256 digests in their usual contexts, base64 images,
prose after header names ("Authorization: see the docs at ...") and code next to names that
hold secrets (``private_key: ec.EllipticCurvePrivateKey``, ``password=get_password()``,
``secret = os.environ["X"]``); at most 0.5% may be altered, and none of the identifiers,
digests, images, header prose or code next to secret names. The digests and UUIDv7 call ids
tooltrace itself writes are never altered, neither by the Redactor nor on their way through
the registry.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import random
import uuid
from pathlib import Path
from typing import Any

import uuid_utils

from tooltrace import CallContext, Status, ToolCall, ToolRegistry, tool
from tooltrace.redaction import Redactor

from ._figures import record, size

N_LINES = size(10_000, 100_000)


def _source_lines() -> list[str]:
    lib = os.path.dirname(os.__file__)
    out: list[str] = []
    for path in sorted(glob.glob(lib + "/**/*.py", recursive=True)):
        if "/test" in path or "site-packages" in path or "idlelib" in path:
            continue
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.extend(line for line in text.splitlines() if line.strip())
    return out


def _prose_lines() -> list[str]:
    out: list[str] = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            out.extend(ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip())
        except (UnicodeDecodeError, OSError, IsADirectoryError):
            continue
    import json
    import textwrap

    for mod in (os, json, textwrap, random, base64, hashlib, uuid):
        for name in dir(mod):
            doc = getattr(getattr(mod, name), "__doc__", None)
            if isinstance(doc, str):
                out.extend(ln.strip() for ln in doc.splitlines() if len(ln.strip()) > 20)
    return out


# Code next to a name that holds a secret: type annotations, dotted names, calls, other
# variables. Each holds no secret, whichever name it stands next to.
_SECRET_NAMES = (
    "password", "api_key", "private_key", "secret", "client_secret", "token", "access_token",
    "auth_token", "session", "credentials", "signing_key", "db_password", "passphrase", "apiKey",
)
_TYPES = (
    "str", "bytes", "SecretStr", "Optional[str]", "str | None", "ec.EllipticCurvePrivateKey",
    "Ed25519PrivateKey", "rsa.RSAPrivateKey", "HttpUrl", "UUID", "dict[str, str]", "APIKey",
    "CancellationToken", "requests.Session", "Credentials", "AuthBase", "SecretBytes", "Any",
    "typing.Optional[bytes]", "Annotated[str, Field(min_length=8)]", "PrivateKeyTypes",
    "ed25519.Ed25519PrivateKey", "Token", "AccessToken", "Union[str, None]", "Callable[[], str]",
    "HTTPBasicCredentials", "CredentialsT", "t.Any",
)
_VALUES = (
    "None", "get_password()", 'os.environ["SECRET"]', 'os.getenv("SECRET")',
    "settings.SECRET_KEY", "self.{n}", "config.{n}", "user_{n}", "getpass.getpass()",
    "request.form['password']", "kwargs.get('token')", "load_key(path)", "_creds",
    "await get_api_key()", "Field(default=None)", "ec.generate_private_key(ec.SECP256R1())",
    "Ed25519PrivateKey.generate()", "args.{n}", "{n}", "new_{n}", "DEFAULT_{N}", "self._{n}",
    "secrets.token_hex(32)", "base64.b64decode(raw)", "read_secret(path)",
)
_ANNOTATED = (
    "{n}: {t}", "    {n}: {t}", "{n}: {t} = None", "    def f(self, {n}: {t}) -> None:",
    "def f({n}: {t}, retries: int = 0):", "{n}: {t} = Field(...)", "        {n}: {t},",
)
_ASSIGNED = (
    "{n} = {v}", "{n}={v}", "    self.{n} = {v}", '    "{n}": {v},', "f({n}={v})",
    "{n} = {v}  # from the vault",
)


def _secret_name_code(rng: random.Random) -> str:
    name = rng.choice(_SECRET_NAMES)
    if rng.random() < 0.5:
        return rng.choice(_ANNOTATED).format(n=name, t=rng.choice(_TYPES))
    value = rng.choice(_VALUES).format(n=name, N=name.upper())
    return rng.choice(_ASSIGNED).format(n=name, v=value)


def _generated(rng: random.Random, kind: str, i: int) -> str:
    sha = hashlib.sha256(f"{kind}{i}".encode()).hexdigest()
    git = hashlib.sha1(f"{kind}{i}".encode()).hexdigest()
    if kind == "uuid":
        u = rng.choice([str(uuid.uuid4()), str(uuid_utils.uuid7()), str(uuid.uuid1())])
        return rng.choice([
            f"request_id={u}", f'{{"id": "{u}", "session_id": "{u}"}}', f"trace {u} done",
            f"token: {u}", f"X-Request-Id: {u}",
        ])
    if kind == "git":
        return rng.choice([
            f"commit {git}", f"Merge: {git[:7]} {git[7:14]}", f"{git} refs/heads/main",
            f"git checkout {git}", f"parent {git}", f'"sha": "{git}"',
        ])
    if kind == "sha256":
        return rng.choice([
            f"sha256:{sha}", f"{sha}  dist/tooltrace-0.1.0.tar.gz", f'"digest": "sha256:{sha}"',
            f"secret_sha256={sha}", f"--hash=sha256:{sha}", f"checksum {sha.upper()}",
        ])
    if kind == "secret_name_code":
        return _secret_name_code(rng)
    if kind == "header_prose":
        # Documentation about a header: the words after its name are prose, not a credential.
        name = rng.choice(["Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie"])
        name = rng.choice([name, name.lower(), name.upper()])
        prose = rng.choice([
            "see the docs at https://example.com/auth", "see below", "See below.",
            "required for every request", "not needed inside the cluster",
            "is sent by the login endpoint", "see RFC 7235, section 4.2",
            f"described in section {i % 9 + 1}", "Sent only over HTTPS.", "optional",
            "(none)", "N/A", "missing (the request is anonymous)", "header is empty",
            f"see https://example.com/docs/headers#{name.lower()}", "one per session, see above",
        ])
        return rng.choice(["{h}: {p}", "  {h}: {p}", '"{h}: {p}"']).format(h=name, p=prose)
    data = rng.randbytes(rng.randint(60, 600))
    b64 = base64.b64encode(b"\x89PNG\r\n\x1a\n" + data).decode()
    return rng.choice([
        f"data:image/png;base64,{b64}", b64[:76], f'<img src="data:image/png;base64,{b64}">',
        f'"icon": "{b64}"',
    ])


def test_benign_corpus_is_left_alone() -> None:
    rng = random.Random(20261202)
    source, prose = _source_lines(), _prose_lines()
    assert len(source) > 50_000 and len(prose) > 2_000
    mix = [("source", 0.30), ("prose", 0.20), ("uuid", 0.10), ("git", 0.10),
           ("sha256", 0.10), ("base64_image", 0.10), ("header_prose", 0.05),
           ("secret_name_code", 0.05)]
    lines: list[tuple[str, str]] = []
    for kind, share in mix:
        n = int(N_LINES * share)
        if kind == "source":
            lines += [(kind, x) for x in rng.sample(source, n)]
        elif kind == "prose":
            lines += [(kind, rng.choice(prose)) for _ in range(n)]
        else:
            lines += [(kind, _generated(rng, kind, i)) for i in range(n)]
    red = Redactor()
    altered: dict[str, list[str]] = {k: [] for k, _ in mix}
    for kind, line in lines:
        if red.redact_text(line) != line:
            altered[kind].append(line)
    total = sum(len(v) for v in altered.values())
    rate = total / len(lines)
    record("benign corpus", lines=len(lines), altered=total, rate_pct=round(rate * 100, 3),
           **{f"altered_{k}": len(v) for k, v in altered.items()})
    assert rate <= 0.005, {k: v[:5] for k, v in altered.items() if v}
    # Identifiers and digests are never touched, whatever name they sit next to; nor is prose
    # after a header name, nor code next to a name that holds a secret.
    for kind in ("uuid", "git", "sha256", "base64_image", "header_prose", "secret_name_code"):
        assert not altered[kind], altered[kind][:5]


def test_own_call_ids_and_digests_pass_untouched(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    seen: list[dict[str, Any]] = []

    @tool(capability="read")
    def ids(ctx: CallContext, n: int) -> dict[str, Any]:
        """Return tooltrace's own identifiers and digests under the names tooltrace uses."""
        digest = hashlib.sha256(str(n).encode()).hexdigest()
        out = {
            "call_id": ctx.call_id,
            "run_id": ctx.run_id,
            "job_id": str(uuid_utils.uuid7()),
            "sha256_before": digest,
            "sha256_after": hashlib.sha256(digest.encode()).hexdigest(),
            "artifact": {"sha256": digest, "path": f"artifacts/{digest[:2]}/{digest}.txt"},
            "text": f"call {ctx.call_id} wrote sha256:{digest} (token {ctx.call_id})",
            "big": "x" * (20_000 if n < 0 else 0),
        }
        seen.append(out)
        return out

    reg = ToolRegistry(workspace=ws, home=tmp_path / "home")
    reg.register(ids)
    n = size(500, 5000)
    for i in range(n):
        env = reg.call(ToolCall("ids", {"n": i}))
        assert env.status is Status.OK
        assert env.data == seen[-1], (env.data, seen[-1])
        assert env.record.result_preview is not None and "REDACTED" not in env.record.result_preview
    big = reg.call(ToolCall("ids", {"n": -1}))  # offloaded: the artifact holds it whole
    assert big.artifact is not None
    stored = reg.artifacts.read(big.artifact.sha256)
    assert seen[-1]["call_id"] in stored and seen[-1]["sha256_after"] in stored
    assert "REDACTED" not in stored
    reg.shutdown()
    record("own ids untouched", calls=n + 1, altered=0)
