"""Known-answer vectors for the audit trail's formats: the chain hash, the genesis hash, a
stored line, the checkpoint MAC, what a line's signature covers and the Ed25519 signature of it.

Every expected value is written out here, worked out with hashlib, hmac and cryptography
straight from the formats (sha256 over the previous hash's hex and the body; HMAC-SHA256 over
``writer|segment|seq|head|fields``; Ed25519 over a tag and the sorted JSON of the fields), never
computed by tooltrace's own functions: a change to a format, however consistent with itself,
fails here. The signing key is RFC 8032's test 1, whose signature of the empty message is
checked too."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tooltrace.audit import Signer
from tooltrace.audit._format import (
    chain_hash,
    checkpoint_mac,
    genesis_hash,
    seal_line,
    split_hash,
)
from tooltrace.audit._signing import PublicKey, line_payload

GENESIS_W0 = "86fa1ba58622210b5875cb4fdd6fc4c8140de7f4ee2e808b96fb3de7088ecc13"
BODY1 = b'{"k":"open","seq":1,"writer":"w0"}'
H1 = "081a773de191759db38fbe7a83e1a280e89c11719d694a26b3b08f6703c7a4a3"
BODY2 = b'{"k":"c","seq":2,"call_id":"c-1","status":"ok"}'
H2 = "61b01c24460c749dfe5d01811d46bba6fa2ffdfd150e1bc31b738db2284b0ae0"
KEY = bytes(range(32))
MAC_BARE = "e9db10a76ee78869de05317407247a4475c75c68df964b1ec17ef40e504d395a"
MAC_FIELDS = "b8fc7e2c7f2ee316269d5cec629210886f7bb24cb030facda5603cd83fca7601"

# RFC 8032, section 7.1, test 1.
RFC_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
RFC_SIG_EMPTY = ("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33b"
                 "acc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
KID = "21fe31dfa154a261"  # sha256(public key)[:16]
PAYLOAD = (b'tooltrace-line-v1\n{"head":"' + H2.encode() + b'","k":"ckpt","kid":"21fe31dfa154a261",'
           b'"n":2,"segment":1,"seq":3,"writer":"w0"}')
LINE_SIG = ("93116313c387654e4c76713f497fa60cea70e3a2427fc1f99fcf1917a39bb1633b7f016ff398e13e0b8dd"
            "0893626b6b78742ec1901232cbb9ee27075fddd5005")


def test_genesis_and_chain_hashes() -> None:
    assert genesis_hash("w0") == GENESIS_W0
    assert chain_hash(GENESIS_W0, BODY1) == H1
    assert chain_hash(H1, BODY2) == H2
    assert genesis_hash("w1") != GENESIS_W0


def test_a_stored_line_and_its_split() -> None:
    line = seal_line(BODY2, H2)
    assert line == b'{"k":"c","seq":2,"call_id":"c-1","status":"ok","h":"' + H2.encode() + b'"}\n'
    assert split_hash(line.rstrip(b"\n")) == (BODY2, H2)
    assert split_hash(BODY2) is None  # no hash field
    assert split_hash(line.rstrip(b"\n").replace(b',"h":"', b',"x":"')) is None
    assert split_hash(line.rstrip(b"\n").replace(b',"h":"', b',"a":"')) is None
    assert split_hash(seal_line(b"{}", H2).rstrip(b"\n")) is None  # no field: no record


def test_checkpoint_mac() -> None:
    assert checkpoint_mac(KEY, "w0", 1, 3, H2) == MAC_BARE
    # The MAC covers the checkpoint's own fields except mac, h, seq and head (in the fixed part).
    fields = {"k": "ckpt", "n": 2, "seq": 3, "head": H2, "h": "0" * 64, "mac": "x"}
    assert checkpoint_mac(KEY, "w0", 1, 3, H2, fields) == MAC_FIELDS
    # Over the fields sorted by name, whatever order the line has them in.
    assert checkpoint_mac(KEY, "w0", 1, 3, H2, dict(reversed(fields.items()))) == MAC_FIELDS
    assert checkpoint_mac(KEY, "w0", 1, 3, H2, {**fields, "final": True}) != MAC_FIELDS
    assert checkpoint_mac(KEY, "w0", 2, 3, H2, fields) != MAC_FIELDS


def test_ed25519_matches_rfc_8032() -> None:
    private = Ed25519PrivateKey.from_private_bytes(RFC_SECRET)
    signer = Signer(private)
    assert signer.public.hex == RFC_PUBLIC
    assert signer.kid == KID
    assert signer.sign(b"") == RFC_SIG_EMPTY
    assert PublicKey(bytes.fromhex(RFC_PUBLIC)).verify(b"", RFC_SIG_EMPTY)


def test_what_a_line_signature_covers_and_the_signature() -> None:
    fields = {"k": "ckpt", "n": 2, "head": H2, "kid": KID, "mac": "m", "h": "0" * 64,
              "sig": "s"}
    assert line_payload("w0", 1, 3, fields) == PAYLOAD
    signer = Signer(Ed25519PrivateKey.from_private_bytes(RFC_SECRET))
    line = {"k": "ckpt", "n": 2, "head": H2}
    signer.sign_line("w0", 1, 3, line)
    assert line == {"k": "ckpt", "n": 2, "head": H2, "kid": KID, "sig": LINE_SIG}
    pub = PublicKey(bytes.fromhex(RFC_PUBLIC))
    assert pub.verify(PAYLOAD, LINE_SIG)
    assert not pub.verify(PAYLOAD.replace(b'"seq":3', b'"seq":4'), LINE_SIG)
    assert not pub.verify(PAYLOAD, LINE_SIG[:-2] + "00")
    assert not pub.verify(PAYLOAD, 12345)


# -- the fallback encoder of a call line ---------------------------------------------------------


def test_the_fallback_encoder_writes_the_fast_encoders_fields() -> None:
    """``encode_call`` is what a call line is written with when msgspec refuses a value: for
    every kind of record, both encoders give the same object."""
    import random

    import orjson
    from support.audit import make_record

    from tooltrace.audit._format import dumps, encode_call, encode_call_bytes

    rng = random.Random(39)
    kinds = ("ok", "offload", "params", "policy", "approval", "hook_modify", "hook_block",
             "failed", "unknown", "cancelled", "admission")
    for kind in kinds:
        r = make_record(rng, kind=kind)
        assert orjson.loads(encode_call_bytes(r)) == orjson.loads(dumps(encode_call(r))), kind


def test_a_value_msgspec_refuses_goes_through_the_fallback_and_the_trail(tmp_path: object
                                                                       ) -> None:
    """A call whose step detail holds what neither msgspec nor orjson write as it is (text
    that is not valid Unicode as a value and as a key, an integer past 64 bits, nesting past
    their limits, a value whose ``str`` raises, a tuple key): the line is still written with
    every field, each such value in a form that says what it was, and the trail verifies. A
    late step holding such text is written too."""
    import random
    from pathlib import Path

    import msgspec
    import orjson
    from support.audit import make_record

    from tooltrace.audit import verify
    from tooltrace.audit._format import dumps, encode_call_bytes, encode_late
    from tooltrace.sinks import LateStep
    from tooltrace.telemetry import AuditSink

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    deep: list[object] = []
    cur = deep
    for _ in range(300):
        cur.append([])
        cur = cur[0]  # type: ignore[assignment]
    deep_map: dict[str, object] = {}
    at = deep_map
    for _ in range(300):
        at["a"] = {}
        at = at["a"]  # type: ignore[assignment]
    detail = {"deep_map": deep_map,
              "text": "a\ud800b", "\udc00key": 1, "big": 2**70, "small": -(2**63),
              "top": 2**64 - 1, "over": 2**64, "under": -(2**63) - 1, "flags": [None, True, 0.5],
              "deep": deep, "odd": Unprintable(), "tags": {"b", "a"}, (1, 2): "tuple key"}
    r = make_record(random.Random(7), kind="ok")
    steps = (*r.steps[:-1], msgspec.structs.replace(r.steps[-1], detail=detail))
    odd = msgspec.structs.replace(r, steps=steps, capability="write", effect="local",
                                  description="Write a file.")
    line = orjson.loads(encode_call_bytes(odd))
    assert line["k"] == "c" and line["call_id"] == odd.call_id
    assert set(line) == set(orjson.loads(encode_call_bytes(r)))  # every field of the fast path
    assert (line["capability"], line["effect"], line["description"]) == (
        "write", "local", "Write a file.")
    got = line["steps"][-1][-1]
    assert got["text"] == "a\ufffdb" and got["\ufffdkey"] == 1
    assert got["big"] == str(2**70) and got["small"] == -(2**63) and got["top"] == 2**64 - 1
    assert got["over"] == str(2**64) and got["under"] == str(-(2**63) - 1)
    assert got["flags"] == [None, True, 0.5]
    assert got["odd"] == "<Unprintable>" and got["tags"] == ["a", "b"]
    assert got["(1, 2)"] == "tuple key"
    # The line keeps 128 levels of nesting, the detail's list starting at the fifth.
    levels, cur = 0, got["deep"]
    while isinstance(cur, list):
        levels, cur = levels + 1, cur[0]
    assert (levels, cur) == (128 - 4, "[nested too deep]")
    levels, at = 0, got["deep_map"]
    while isinstance(at, dict):
        levels, at = levels + 1, at["a"]
    assert (levels, at) == (128 - 4, "[nested too deep]")

    late = LateStep(odd.call_id, odd.run_id, odd.tool, msgspec.structs.replace(
        r.steps[-1], seq=1000, detail={"exit": "x\udfff"}))
    assert orjson.loads(dumps(encode_late(late)))["step"][-1] == {"exit": "x\ufffd"}

    home = Path(str(tmp_path))
    sink = AuditSink(home)
    sink.emit(r)
    sink.emit(odd)
    sink.emit_late(late)
    sink.shutdown()
    assert sink.dropped == 0
    rep = verify(home)
    assert rep.ok and rep.records == 3, rep.findings


def test_a_public_key_in_each_form_it_is_read_from(tmp_path: object) -> None:
    """RFC 8032's test public key as 64 hex digits, as a file of them, of the raw 32 bytes and
    of SubjectPublicKeyInfo PEM: the same key id each time; a file of 31 bytes is an error."""
    from pathlib import Path

    import pytest

    from tooltrace.exceptions import ConfigurationError

    tmp = Path(str(tmp_path))
    raw = bytes.fromhex(RFC_PUBLIC)
    pem = ("-----BEGIN PUBLIC KEY-----\n"
           "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
           "-----END PUBLIC KEY-----\n")
    files = {"hex": RFC_PUBLIC + "\n", "raw": raw, "pem": pem}
    assert PublicKey.parse(RFC_PUBLIC).kid == KID
    for name, content in files.items():
        p = tmp / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        assert PublicKey.parse(p).kid == KID, name
    (tmp / "short").write_bytes(raw[:31])
    with pytest.raises(ConfigurationError):
        PublicKey.parse(tmp / "short")


def test_the_audit_key_is_made_in_a_home_whose_parents_are_missing(tmp_path: object,
                                                                   monkeypatch: object) -> None:
    """``load_key(create=True)``: 64 hex digits, mode 0600, in a home created with its parents;
    the same key read back; None without ``create`` where there is none."""
    import stat
    from pathlib import Path

    import pytest

    from tooltrace.audit._format import load_key

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.delenv("TOOLTRACE_AUDIT_KEY", raising=False)
    home = Path(str(tmp_path)) / "a" / "b" / "home"
    assert load_key(home, create=False) is None
    key = load_key(home, create=True)
    assert key is not None and len(key) == 64 and int(key, 16) >= 0
    assert stat.S_IMODE((home / "audit.key").stat().st_mode) == 0o600
    assert load_key(home, create=False) == key


def test_a_line_body_holds_read_only_mappings_sets_and_other_values_as_json() -> None:
    from types import MappingProxyType

    from tooltrace.audit._format import dumps

    class Odd:
        def __str__(self) -> str:
            return "odd value"

    body = {"k": "a", "m": MappingProxyType({"b": 1}), "s": frozenset({"y", "x"}), "n": {10, 2},
            "t": (1, "2"), "o": Odd()}
    assert dumps(body) == (b'{"k":"a","m":{"b":1},"s":["x","y"],"n":["10","2"],"t":[1,"2"],'
                           b'"o":"odd value"}')


def test_a_segment_header_names_format_version_1(tmp_path: object) -> None:
    import random
    from pathlib import Path

    import orjson
    from support.audit import make_record

    from tooltrace.telemetry import AuditSink

    home = Path(str(tmp_path))
    sink = AuditSink(home)
    sink.emit(make_record(random.Random(3), kind="ok"))
    sink.shutdown()
    segments = sorted((home / "audit" / "segments").glob("*.jsonl"))
    assert segments
    for segment in segments:
        header = orjson.loads(segment.read_bytes().splitlines()[0])
        assert (header["k"], header["v"]) == ("open", 1)


def test_a_call_lines_read_only_mapping_is_written_as_an_object() -> None:
    import random
    from types import MappingProxyType

    import msgspec
    import orjson
    from support.audit import make_record

    from tooltrace.audit._format import encode_call_bytes

    r = make_record(random.Random(5), kind="ok")
    detail = MappingProxyType({"b": [1, 2], "a": "x"})
    steps = (*r.steps[:-1], msgspec.structs.replace(r.steps[-1], detail=detail))
    line = orjson.loads(encode_call_bytes(msgspec.structs.replace(r, steps=steps)))
    assert line["steps"][-1][-1] == {"b": [1, 2], "a": "x"}
