"""Values every JSON writer takes, whatever a call held.

A model's JSON can carry a lone surrogate (``"\\ud83d"``), a file name ``os.fsdecode`` could not
decode holds one (``"caf\\udce9"``), and a tool can return an integer past 64 bits or nesting
deeper than orjson writes. UTF-8 cannot carry a lone surrogate, so orjson and the OTLP encoder
refuse such a value whole. The audit trail's, the logs' and the spans' writers fall back to
these helpers instead of losing the record (and, in a batch, the records beside it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MAX_DEPTH", "valid_text", "writable"]

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")

#: The nesting ``writable`` keeps: deeper containers become ``"[nested too deep]"`` (orjson
#: refuses more than 255 levels).
MAX_DEPTH: Final = 128


def valid_text(obj: Any) -> str:
    """``obj``'s text (``str()``, or ``<Type>`` when that raises) with U+FFFD in place of each
    lone surrogate."""
    try:
        text = obj if isinstance(obj, str) else str(obj)
    except Exception:
        text = f"<{type(obj).__name__}>"
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


def writable(obj: Any, depth: int = 0) -> Any:
    """``obj`` as values orjson always writes: text that is not valid Unicode gets U+FFFD in
    place of each lone surrogate, a key orjson refuses and a value it does not know become their
    text, an integer past 64 bits its digits, and a container nested deeper than ``MAX_DEPTH``
    levels the text ``"[nested too deep]"``."""
    if obj is None or isinstance(obj, (bool, float)):
        return obj
    if isinstance(obj, int):
        return obj if -(2**63) <= obj < 2**64 else str(obj)
    if isinstance(obj, (Mapping, list, tuple, set, frozenset)):
        if depth >= MAX_DEPTH:
            return "[nested too deep]"
        if isinstance(obj, Mapping):
            return {valid_text(k): writable(v, depth + 1) for k, v in obj.items()}
        if isinstance(obj, (set, frozenset)):
            return sorted(valid_text(v) for v in obj)
        return [writable(v, depth + 1) for v in obj]
    return valid_text(obj)
