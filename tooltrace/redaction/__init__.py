"""Secret redaction: what every argument and result passes through before anyone sees it.

Every argument and result passes through :class:`Redactor` before any sink, hook view, log or
model sees it, so the common case (no secret) is kept cheap: one scan with a pre-filter regex
of literal anchors; only text that contains an anchor goes through the full detectors.

A redaction replaces the secret with a marker ``[REDACTED:<kind>]``. The marker never holds
the secret or any part of it (no "first four characters" hints): ``kind`` names the detector.

Three kinds of rule:

* **detectors** for well-known credential formats (cloud keys, VCS and SaaS tokens, JWTs, PEM
  private key blocks, passwords in URLs, ``Authorization`` headers, cookies) and for values
  assigned to key-like names in text (``api_key = "..."``, ``"token": "..."``, ``SECRET=...``);
* **key rules** for structured values: a mapping key such as ``password`` or ``accessToken``
  has its whole value replaced by :meth:`Redactor.redact` (the key itself is text like any
  other and is redacted as such);
* **registered values**: secrets the operator knows (``register_value``), matched raw and in
  their base64, URL-encoded and JSON-escaped forms.

Benign text is left alone on purpose: UUIDs, git SHAs (40 hex) and sha256 digests (64 hex) are
never treated as secrets, not even next to a key-like name; nor is code after such a name
(``private_key: ec.EllipticCurvePrivateKey``, ``password = get_password()``), in shapes a
generated password does not take (``docs/guide/redaction.md`` lists them).

Where the rules live: the detector table in ``_detectors`` (its validators of benign text in
``_benign``), the key rules in ``_keyrules``, encoded secrets in ``_encoded`` and
:class:`Redactor` in ``_redactor``; bounded previews and the artifact store in ``_artifacts``.
"""

from __future__ import annotations

from tooltrace.redaction._artifacts import ArtifactStore, preview
from tooltrace.redaction._detectors import marker
from tooltrace.redaction._keyrules import DEFAULT_KEY_PATTERNS
from tooltrace.redaction._redactor import Redactor, default_redactor

__all__ = [
    "DEFAULT_KEY_PATTERNS",
    "ArtifactStore",
    "Redactor",
    "default_redactor",
    "marker",
    "preview",
]
