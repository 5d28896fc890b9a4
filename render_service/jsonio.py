"""JSON bytes for responses and events: orjson, with a fallback for lone surrogates.

A tool parser that decodes a model's JSON may meet an escape such as `\\ud800` that json
turns into a lone surrogate; vLLM then fails to encode its response (UTF-8 cannot carry it).
orjson refuses such strings too; they are written with ASCII escapes instead, valid JSON a
client decodes to the same string.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps"]


def dumps(data: Any, *, option: int = 0) -> bytes:
    try:
        return orjson.dumps(data, option=option)
    except TypeError:
        if not _has_surrogate(data):
            raise
        return json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode()


def _has_surrogate(data: Any) -> bool:
    if isinstance(data, str):
        return any("\ud800" <= ch <= "\udfff" for ch in data)
    if isinstance(data, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in data.items())
    if isinstance(data, list | tuple):
        return any(_has_surrogate(v) for v in data)
    return False
