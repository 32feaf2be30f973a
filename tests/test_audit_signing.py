"""Ed25519 signatures on the trail: the home's key is made once, 0600; every checkpoint, seal,
approval and digest entry is signed and `verify` trusts the signature (the HMAC key alone
cannot re-seal a rewritten trail); a copied trail verifies with only the public key; a trail
without signatures fails unless `--allow-unsigned`; `tooltrace where` prints where everything
is and no key; `secret_values` holds every secret form of both keys."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from support.audit import workload
from support.forge import approval, install_key, reforge, write_trail

from tooltrace._settings import resolve_home
from tooltrace.audit import (
    PublicKey,
    SegmentWriter,
    Signer,
    list_segments,
    load_key,
    load_public_key,
    load_signer,
    recover_dead_segments,
    secret_values,
    signing_key_path,
    verify,
)
from tooltrace.audit._format import chain_hash, seal_line, split_hash
from tooltrace.cli import main
from tooltrace.exceptions import ConfigurationError
from tooltrace.telemetry import AuditSink

TOOLTRACE = str(Path(sys.executable).parent / "tooltrace")


@pytest.fixture(autouse=True)
def _own_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLTRACE_AUDIT_KEY", "TOOLTRACE_SIGNING_KEY", "TOOLTRACE_HOME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    write_trail(h, writers=2, n=60)
    return h


def _cli(*args: str) -> tuple[int, Any]:
    res = CliRunner().invoke(main, [*args, "--json"])
    return res.exit_code, orjson.loads(res.stdout) if res.stdout.strip() else res.output


def _errors(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["severity"] == "error"]


def _lines(home: Path) -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for info in list_segments(home / "audit"):
        for no, raw in enumerate(info.path.read_bytes().splitlines(), start=1):
            out.append((info.name, no, orjson.loads(raw)))
    return out


def test_the_key_is_made_once_0600_in_a_private_directory_with_its_public_key_beside_it(
        tmp_path: Path) -> None:
    home = tmp_path / "h"
    # Four processes race to make the key: one wins, all sign with it.
    code = ("import sys; from pathlib import Path; from tooltrace.audit import load_signer;"
            " print(load_signer(Path(sys.argv[1]), create=True).kid)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(home)], stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    kids = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(kids) == 1 and all(p.returncode == 0 for p in procs)
    key = signing_key_path(home)
    assert key == home / "keys" / "signing.ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    pub = load_public_key(home)
    assert pub is not None and pub.kid == kids.pop()
    assert pub.path == key.with_name("signing.ed25519.pub")
    assert PublicKey.parse(pub.path).raw == PublicKey.parse(pub.hex).raw == pub.raw
    assert not [p for p in key.parent.iterdir() if p.name.startswith(".")]  # no temp files
    # A lost public file is written again from the private key.
    pub.path.unlink()
    assert load_public_key(home) == PublicKey(pub.raw)
    assert load_signer(home, create=False) is not None and pub.path.exists()
    assert stat.S_IMODE(pub.path.stat().st_mode) == 0o644


def test_the_signing_key_can_live_outside_the_home(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    load_signer(tmp_path / "vault", create=True)
    kept = signing_key_path(tmp_path / "vault")
    monkeypatch.setenv("TOOLTRACE_SIGNING_KEY", str(kept))
    home = tmp_path / "home"
    write_trail(home, writers=1, n=20)
    assert not (home / "keys").exists()
    rep = verify(home)
    assert rep.ok and rep.key_ids == [PublicKey.parse(kept.with_name(kept.name + ".pub")).kid]
    monkeypatch.setenv("TOOLTRACE_SIGNING_KEY", str(tmp_path / "nowhere.ed25519"))
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_signer(home, create=True)


def test_every_checkpoint_seal_approval_and_digest_entry_is_signed(home: Path) -> None:
    pub = load_public_key(home)
    assert pub is not None
    signed = [(name, no, o) for name, no, o in _lines(home) if o["k"] in ("ckpt", "seal", "a")]
    kinds = {o["k"] for _, _, o in signed}
    assert kinds == {"ckpt", "seal", "a"}
    assert all(o.get("kid") == pub.kid and len(o.get("sig", "")) == 128 for _, _, o in signed)
    assert not [o for _, _, o in _lines(home) if o["k"] not in ("ckpt", "seal", "a")
                and "sig" in o]
    digest = [orjson.loads(x) for x in (home / "audit" / "digest.jsonl").read_bytes().split()]
    assert digest and all(d.get("kid") == pub.kid and "sig" in d for d in digest)
    rep = verify(home)
    assert rep.ok and rep.findings == []
    assert rep.signatures == len(signed) + len(digest) and rep.key_ids == [pub.kid]


def test_a_copied_trail_verifies_offline_with_only_the_public_key(home: Path,
                                                                  tmp_path: Path) -> None:
    pub = load_public_key(home)
    assert pub is not None
    copy = tmp_path / "elsewhere"
    shutil.copytree(home / "audit", copy / "audit")
    pubfile = tmp_path / "signing.pub"
    pubfile.write_text(pub.pem())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLTRACE_")}
    for given in (pub.hex, str(pubfile)):
        p = subprocess.run([TOOLTRACE, "verify", "--home", str(copy), "--pubkey", given, "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        rep = orjson.loads(p.stdout)
        assert rep["ok"] and rep["key_ids"] == [pub.kid] and rep["keyed"] is False
        assert rep["signatures"] > 0 and _errors(rep) == []
        assert [f["kind"] for f in rep["findings"]] == ["nokey"]  # the MACs alone are skipped
    # Without a public key nothing is vouched for: say so, and fail.
    p = subprocess.run([TOOLTRACE, "verify", "--home", str(copy)], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 1 and "no public key" in p.stdout
    # A record edited in the copy fails there too.
    seg = sorted((copy / "audit" / "segments").glob("*.jsonl"))[0]
    seg.write_bytes(seg.read_bytes().replace(b'"status":"ok"', b'"status":"OK"', 1))
    code, rep = _cli("verify", "--home", str(copy), "--pubkey", pub.hex)
    assert code == 1 and _errors(rep)[0]["kind"] == "edited"


def _first_checkpoint(home: Path) -> tuple[str, int, int]:
    return next((n, no, o["seq"]) for n, no, o in _lines(home) if o["k"] == "ckpt")


def test_a_trail_resealed_with_the_audit_key_fails_at_each_checkpoint(home: Path) -> None:
    key = load_key(home, create=False)
    assert key is not None
    name, no, seq = _first_checkpoint(home)
    target = seq - 2

    def edit(writer: str, s: int, obj: dict[str, Any]) -> dict[str, Any]:
        if s == target and name.startswith(writer) and obj["k"] == "c":
            obj["summary"] = "nothing happened"
        return obj

    # Everything re-chained and every MAC recomputed with the audit key: only the
    # signatures, which need the private key, no longer hold.
    reforge(home, key, None, edit)
    code, rep = _cli("verify", "--home", str(home))
    assert code == 1
    errs = _errors(rep)
    assert errs and all(e["kind"] in ("rewritten", "forged", "unsigned") for e in errs)
    first = next(e for e in errs if e["segment"] == name)
    assert (first["kind"], first["line"], first["seq"]) == ("rewritten", no, seq)
    assert "does not verify" in first["message"]
    # The digest rebuilt to match could not be signed either.
    assert {e["kind"] for e in errs if e["segment"] == "digest.jsonl"} == {"unsigned"}


def test_a_checkpoint_signed_by_another_key_fails_with_its_segment_and_line(
        home: Path, tmp_path: Path) -> None:
    original = load_public_key(home)
    key = load_key(home, create=False)
    assert original is not None and key is not None
    attacker = load_signer(tmp_path / "attacker", create=True)
    assert attacker is not None
    reforge(home, key, attacker)
    name, no, seq = _first_checkpoint(home)
    # Against the original public key, kept elsewhere: every signed line names another key.
    code, rep = _cli("verify", "--home", str(home), "--pubkey", original.hex)
    assert code == 1
    first = next(e for e in _errors(rep) if e["segment"] == name and e["kind"] == "rewritten")
    assert (first["line"], first["seq"]) == (no, seq)
    assert f"signed by key {attacker.kid}" in first["message"]
    assert any(e["segment"] == "digest.jsonl" and f"signed by key {attacker.kid}" in e["message"]
               for e in _errors(rep))
    # The home's own public key vouches for the original signer only: still another key.
    code, rep = _cli("verify", "--home", str(home))
    assert code == 1 and f"signed by key {attacker.kid}" in _errors(rep)[0]["message"]
    # Replace the home's key too and, from inside the home, nothing can tell: that is what
    # a public key kept elsewhere (and the anchors) are for.
    install_key(home, tmp_path / "attacker")
    assert _cli("verify", "--home", str(home))[0] == 0
    assert _cli("verify", "--home", str(home), "--pubkey", original.hex)[0] == 1


def test_an_approval_altered_and_resigned_without_the_key_is_named(home: Path) -> None:
    name, no, obj = next(x for x in _lines(home) if x[2]["k"] == "a")
    seg = home / "audit" / "segments" / name
    lines = seg.read_bytes().splitlines(keepends=True)
    # Who approved changes; the line is re-chained, and so is every line after it.
    body, _ = split_hash(lines[no - 1].rstrip(b"\n"))  # type: ignore[misc]
    prev = split_hash(lines[no - 2].rstrip(b"\n"))[1]  # type: ignore[index]
    bodies = [body.replace(b'"who":"alice"', b'"who":"mallory"')] + [
        split_hash(x.rstrip(b"\n"))[0] for x in lines[no:]]  # type: ignore[index]
    out = lines[: no - 1]
    for b in bodies:
        prev = chain_hash(prev, b)
        out.append(seal_line(b, prev))
    seg.write_bytes(b"".join(out))
    code, rep = _cli("verify", "--home", str(home))
    assert code == 1
    forged = [e for e in _errors(rep) if e["kind"] == "forged"]
    assert [(e["segment"], e["line"], e["seq"]) for e in forged] == [(name, no, obj["seq"])]
    assert "approval" in forged[0]["message"]


def _legacy(home: Path, records: int = 30) -> None:
    """A trail as written before signatures: no signing key, nothing signed."""
    key = load_key(home, create=True)
    assert key is not None
    w = SegmentWriter(home / "audit", key, checkpoint_every=10, signer=None)
    from tooltrace.audit import encode_approval, encode_call_bytes

    recs: list[Any] = [encode_call_bytes(r) for r in workload(records)]
    recs.append(encode_approval(approval(1)))
    with w.lock:
        w.append(recs, ["x"] * len(recs), durable=True)
        w.close()


def test_a_trail_without_signatures_fails_unless_explicitly_allowed(tmp_path: Path) -> None:
    home = tmp_path / "legacy"
    _legacy(home)
    assert not (home / "keys").exists()
    res = CliRunner().invoke(main, ["verify", "--home", str(home)])
    assert res.exit_code == 1 and "no public key: no signature was checked" in res.stdout
    code, rep = _cli("verify", "--home", str(home), "--allow-unsigned")
    assert code == 0 and rep["ok"] and [f["kind"] for f in rep["findings"]] == ["nopubkey"]
    # Given a public key, each segment says where its first unsigned line is.
    pub = load_signer(tmp_path / "new", create=True)
    assert pub is not None
    code, rep = _cli("verify", "--home", str(home), "--pubkey", pub.public.hex)
    seg = list_segments(home / "audit")[0].name
    first = next(no for n, no, o in _lines(home) if o["k"] in ("ckpt", "seal", "a"))
    unsigned = [(e["segment"], e["line"]) for e in _errors(rep) if e["kind"] == "unsigned"]
    assert code == 1 and unsigned == [("digest.jsonl", 1), (seg, first)]
    code, rep = _cli("verify", "--home", str(home), "--pubkey", pub.public.hex,
                     "--allow-unsigned")
    assert code == 0 and {f["kind"] for f in rep["findings"]} == {"unsigned"}


def test_a_bad_public_key_is_a_usage_error(home: Path, tmp_path: Path) -> None:
    for bad in ("00" * 31, str(tmp_path / "missing.pub"), str(home / "audit" / "digest.jsonl")):
        res = CliRunner().invoke(main, ["verify", "--home", str(home), "--pubkey", bad])
        assert res.exit_code == 2, (bad, res.output)
    with pytest.raises(ConfigurationError):
        PublicKey.parse("zz" * 32)


def test_a_crashed_writers_recovered_seal_is_signed_and_anchored(tmp_path: Path) -> None:
    home = tmp_path / "h"
    sink = AuditSink(home, checkpoint_every=5)
    for r in workload(12):
        sink.emit(r)
    sink.flush()
    w = sink._writer
    assert w is not None and w._fd is not None
    os.close(w._fd)  # what SIGKILL leaves: the lock gone, nothing sealed
    w._fd = None
    key = load_key(home, create=False)
    assert key is not None
    (rec,) = recover_dead_segments(home / "audit", key)
    assert rec.lines == 16  # the header, twelve records, checkpoints after 5, 10 and the flush
    seal = [o for _, _, o in _lines(home) if o["k"] == "seal"]
    assert [s["reason"] for s in seal] == ["recovered"] and seal[0]["records"] == 12
    anchors = [orjson.loads(x) for x in (home / "anchors" / "anchors.jsonl").read_bytes().split()]
    assert anchors[-1]["reason"] == "recovered" and anchors[-1]["sig"] == seal[0]["sig"]
    rep = verify(home)
    assert rep.ok and rep.findings == [], rep.findings


def test_secret_values_hold_both_keys_and_no_command_prints_them(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = secret_values(home)
    hmac_key = (home / "audit.key").read_text().strip()
    pem = signing_key_path(home).read_text().strip()
    assert hmac_key in secrets and pem in secrets
    body = "".join(pem.splitlines()[1:-1])
    assert body in secrets
    assert any(len(s) == 64 and s != hmac_key for s in secrets)  # the seed, as hex
    assert secret_values(tmp_path / "empty") == ()  # and nothing is made
    assert not (tmp_path / "empty").exists()
    outputs = [CliRunner().invoke(main, args).output for args in (
        ["where", "--home", str(home)], ["where", "--home", str(home), "--json"],
        ["verify", "--home", str(home)], ["verify", "--home", str(home), "--json"])]
    for out in outputs:
        assert not [s for s in secrets if s in out]
        assert "PRIVATE KEY" not in out
    assert repr(load_signer(home, create=False)).startswith("Signer(kid=")


def test_where_names_the_home_and_everything_in_it(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "tooltrace.toml").write_text("")
    monkeypatch.chdir(ws)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    # No --home, no TOOLTRACE_HOME: the workspace's own home in the state directory.
    res = CliRunner().invoke(main, ["where", "--json"])
    assert res.exit_code == 0, res.output
    info = orjson.loads(res.stdout)
    assert info["home"] == str(resolve_home(workspace=ws).absolute())
    assert info["home"].startswith(str(tmp_path / "state" / "tooltrace"))
    assert info["workspace"] == str(ws) and info["home_from"] == "default for the workspace"
    assert info["public_key"] is None and info["audit_dir_exists"] is False
    assert info["policy_file"] == str(ws / "tooltrace.toml")
    other = CliRunner().invoke(main, ["where", "--json", "--workspace", str(tmp_path)])
    assert orjson.loads(other.stdout)["home"] == str(resolve_home(workspace=tmp_path).absolute())
    assert orjson.loads(other.stdout)["home"] != info["home"]
    # A home with a trail: its key, its files.
    pub = load_public_key(home)
    assert pub is not None and pub.path is not None
    res = CliRunner().invoke(main, ["where", "--json", "--home", str(home)])
    info = orjson.loads(res.stdout)
    assert info == {
        "home": str(home.absolute()), "home_from": "--home", "workspace": str(ws),
        "audit_dir": str(home / "audit"), "audit_dir_exists": True,
        "anchors_file": str(home / "anchors" / "anchors.jsonl"),
        "signing_key_file": str(signing_key_path(home)),
        "public_key": pub.hex, "key_id": pub.kid, "public_key_file": str(pub.path),
        "policy_file": str(ws / "tooltrace.toml")}
    monkeypatch.setenv("TOOLTRACE_HOME", str(home))
    text = CliRunner().invoke(main, ["where"]).output
    assert f"home         {home} (TOOLTRACE_HOME)" in text and pub.hex in text


def test_a_signature_that_is_not_128_hex_digits_is_refused_not_raised() -> None:
    from tooltrace.audit._signing import line_payload

    signer = Signer.generate()
    payload = line_payload("w0", 1, 3, {"k": "ckpt"})
    good = signer.sign(payload)
    assert signer.public.verify(payload, good)
    for bad in ("zz" * 64, good[:-2], good + "00", good[:-1], None, 7, "g" + good[1:]):
        assert signer.public.verify(payload, bad) is False, bad


def test_a_signed_field_that_is_a_read_only_mapping_signs_as_its_dict() -> None:
    from types import MappingProxyType

    from tooltrace.audit._signing import line_payload

    principal: dict[str, Any] = {"user": "alice", "roles": ["ops"]}
    fields = {"k": "a", "principal": principal}
    view = {**fields, "principal": MappingProxyType(principal)}
    assert line_payload("w0", 1, 4, view) == line_payload("w0", 1, 4, fields)


def test_a_public_key_is_a_frozen_record() -> None:
    key = Signer.generate().public
    with pytest.raises(dataclasses.FrozenInstanceError):
        key.raw = b"\0" * 32  # type: ignore[misc]


@pytest.mark.parametrize("text", [
    "-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n",
    "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n",
])
def test_a_broken_pem_public_key_is_a_configuration_error(tmp_path: Path, text: str) -> None:
    f = tmp_path / "k.pub"
    f.write_text(text)
    with pytest.raises(ConfigurationError, match="holds no Ed25519 public key"):
        PublicKey.parse(f)


def test_a_signing_key_file_that_is_no_usable_private_key_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    encrypted = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"))
    garbage = b"-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n"
    for i, data in enumerate((encrypted, garbage)):
        f = tmp_path / f"signing-{i}.ed25519"
        f.write_bytes(data)
        monkeypatch.setenv("TOOLTRACE_SIGNING_KEY", str(f))
        with pytest.raises(ConfigurationError, match="holds no Ed25519 private key"):
            load_signer(tmp_path / "home", create=False)


def test_the_signing_api_takes_its_arguments_by_name(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from tooltrace.audit import Trust
    from tooltrace.audit._signing import resolve_signer

    signer = load_signer(home=tmp_path / "h", create=True)
    assert signer is not None
    home = "".join(["ho", "me"])  # "home" as a caller may build it, not the literal
    found = resolve_signer(signer=home, adir=tmp_path / "h" / "audit",  # type: ignore[arg-type]
                           create=False)
    assert found is not None and found.kid == signer.kid
    assert Signer(private=Ed25519PrivateKey.generate()).public.raw
    trust = Trust.of(keys=[signer.public])
    assert trust.allow_unsigned is False and trust.describe() == signer.kid
    assert Trust.of([]).describe() == "none"
    assert Trust({}).allow_unsigned is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        trust.allow_unsigned = True  # type: ignore[misc]


def test_a_signed_lines_anchor_is_its_fields_without_the_mac() -> None:
    signer = Signer.generate()
    fields = {"k": "seal", "head": "ab" * 32, "final": True, "mac": "m" * 64, "n": 2}
    anchor = signer.sign_line("w0", 1, 9, fields)
    assert anchor == {"k": "seal", "head": "ab" * 32, "final": True, "n": 2, "kid": signer.kid,
                      "sig": fields["sig"], "writer": "w0", "segment": 1, "seq": 9}


def test_a_public_key_of_66_hex_digits_is_no_key_and_a_missing_file_says_why(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError):
        PublicKey.parse("00" * 33)
    missing = str(tmp_path / ("x" * 200))
    with pytest.raises(ConfigurationError) as err:
        PublicKey.parse(missing)
    assert repr(missing[:80]) in str(err.value) and repr(missing[:81]) not in str(err.value)
    assert "(No such file or directory)" in str(err.value)


def test_a_key_is_made_in_a_keys_directory_that_exists_already(tmp_path: Path) -> None:
    (tmp_path / "h" / "keys").mkdir(parents=True, mode=0o700)
    signer = load_signer(tmp_path / "h", create=True)
    assert signer is not None and signing_key_path(tmp_path / "h").is_file()


def test_secret_values_hold_the_signing_key_file_as_stored(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    home = tmp_path / "h"
    seed = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
        serialization.NoEncryption())
    key = signing_key_path(home)
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_text(seed.hex().upper() + "\n")  # the seed as hex, in capitals
    assert seed.hex().upper() in secret_values(home) and seed.hex() in secret_values(home)
